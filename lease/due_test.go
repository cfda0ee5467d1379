package lease_test

import (
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/dibs-gpu/dibs/lease"
)

type step struct {
	id   string
	step lease.Step
}

func steps(due []lease.Due) []step {
	var out []step
	for _, d := range due {
		out = append(out, step{d.Lease.ID, d.Step})
	}
	return out
}

func TestDue(t *testing.T) {
	end := t0.Add(4 * time.Hour)
	base := held(1, alice, []int{0}, t0, 4*time.Hour)
	with := func(f func(*lease.Lease)) lease.Lease {
		l := base
		f(&l)
		return l
	}
	warned := with(func(l *lease.Lease) { l.Warned = true })
	final := with(func(l *lease.Lease) { l.Warned, l.FinalWarned = true, true })
	noticed := with(func(l *lease.Lease) { l.Warned, l.OverdueNoticed = true, true })
	session := with(func(l *lease.Lease) { l.Session = "dibs-gpu-01-1" })
	signalled := with(func(l *lease.Lease) { l.Session, l.SignalledAt = "dibs-gpu-01-1", end.Add(time.Minute) })

	tests := []struct {
		name   string
		l      lease.Lease
		action lease.EndAction
		now    time.Time
		want   lease.Step // "" for nothing
	}{
		{"far from the end", base, lease.ActionEnd, t0.Add(time.Hour), ""},
		{"just outside the warning", base, lease.ActionEnd, end.Add(-10*time.Minute - time.Nanosecond), ""},
		{"warned ten minutes before", base, lease.ActionEnd, end.Add(-10 * time.Minute), lease.StepWarn},
		{"warned once", warned, lease.ActionEnd, end.Add(-time.Minute - time.Nanosecond), ""},
		{"warned again a minute before", warned, lease.ActionEnd, end.Add(-time.Minute), lease.StepWarnFinal},
		{"a minute before, one warning is enough", base, lease.ActionEnd, end.Add(-30 * time.Second), lease.StepWarnFinal},
		{"warned a minute before once", final, lease.ActionEnd, end.Add(-time.Second), ""},
		{"a lease shorter than the warning is warned at once", held(1, alice, []int{0}, t0, 5*time.Minute), lease.ActionWarn, t0, lease.StepWarn},
		{"warn: overdue at the end", warned, lease.ActionWarn, end, lease.StepOverdue},
		{"warn: overdue even if never warned", base, lease.ActionWarn, end, lease.StepOverdue},
		{"warn: told once", noticed, lease.ActionWarn, end.Add(time.Hour), ""},
		{"end: ends at the end", warned, lease.ActionEnd, end, lease.StepEnd},
		{"end: not a nanosecond early", final, lease.ActionEnd, end.Add(-time.Nanosecond), ""},
		{"signal: a bare claim just ends", warned, lease.ActionSignal, end, lease.StepEnd},
		{"signal: a session is signalled first", session, lease.ActionSignal, end, lease.StepSignal},
		{"signal: then given its grace", signalled, lease.ActionSignal, end.Add(time.Minute + 29*time.Second), ""},
		{"signal: then ended", signalled, lease.ActionSignal, end.Add(time.Minute + 30*time.Second), lease.StepEnd},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := lease.DefaultPolicy() // warn 10m before, 30s grace
			p.EndAction = tt.action
			got := steps(table(tt.l).Due(lease.At(tt.now), p))
			var want []step
			if tt.want != "" {
				want = []step{{tt.l.ID, tt.want}}
			}
			if !slices.Equal(got, want) {
				t.Errorf("Due = %v, want %v", got, want)
			}
		})
	}
}

func TestDueOrderAndCompanions(t *testing.T) {
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionEnd
	tab := table(
		held(3, bob, []int{3}, t0, time.Hour),        // ended
		held(1, alice, []int{0}, t0, 8*time.Hour),    // nothing yet
		held(2, alice, []int{1}, t0, 65*time.Minute), // warn
	)
	got := steps(tab.Due(lease.At(t0.Add(time.Hour)), p))
	want := []step{{"gpu-01-2", lease.StepWarn}, {"gpu-01-3", lease.StepEnd}}
	if !slices.Equal(got, want) {
		t.Errorf("Due = %v, want %v (in grant order)", got, want)
	}
}

// jumpWall returns now as time.Now would report it after someone moved the
// system clock by d: the wall reading moves, the monotonic reading does not.
// The time package cannot build such a value (Add moves both readings, Round
// drops the monotonic one), so this writes time.Time's fields directly:
// wall holds a has-monotonic bit, 33 bits of seconds and 30 of nanoseconds.
// It checks its own result and skips the test if that layout ever changes.
func jumpWall(t *testing.T, now time.Time, d time.Duration) time.Time {
	t.Helper()
	type timeLayout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if unsafe.Sizeof(now) != unsafe.Sizeof(timeLayout{}) || d%time.Second != 0 {
		t.Skip("time.Time layout changed; cannot simulate a clock jump")
	}
	j := now
	tl := (*timeLayout)(unsafe.Pointer(&j))
	const hasMonotonic, nsecShift = 1 << 63, 30
	if tl.wall&hasMonotonic == 0 {
		t.Fatal("jumpWall needs a time with a monotonic reading (time.Now())")
	}
	tl.wall = uint64(int64(tl.wall) + int64(d/time.Second)<<nsecShift)
	if !j.Round(0).Equal(now.Round(0).Add(d)) || j.Sub(now) != 0 {
		t.Skip("time.Time layout changed; cannot simulate a clock jump")
	}
	return j
}

// A lease never ends early: Due ends a lease only when both the wall clock and
// the monotonic clock say its time is up. Times from the store and the wire
// carry no monotonic reading, so the table measures each lease's end on the
// monotonic clock from the now it was granted or loaded with; Go compares two
// times by their monotonic readings only when both have one, so the agent
// must pass time.Now() (never a time read back from disk or made with Round).
func TestDueClockJumps(t *testing.T) {
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionEnd
	granted := time.Now()
	l := held(1, alice, []int{0}, granted.Round(0), time.Hour)
	tab := lease.NewTable(node, []lease.Lease{l}, 1, lease.At(granted))
	due := func(now time.Time) []step { return steps(tab.Due(lease.At(now), p)) }
	ended := []step{{l.ID, lease.StepEnd}}

	if got := due(granted.Add(time.Minute)); got != nil {
		t.Fatalf("a minute in: %v", got)
	}

	// The clock is set three hours forward a minute after the grant: by the
	// wall clock the lease is two hours over, by the monotonic clock it has
	// 59 minutes left. Nothing happens, not even the warning.
	jumped := jumpWall(t, granted.Add(time.Minute), 3*time.Hour)
	if !jumped.After(l.ExpiresAt) {
		t.Fatalf("simulated jump: %v is not past %v", jumped, l.ExpiresAt)
	}
	if got := due(jumped); got != nil {
		t.Errorf("after a 3h jump forward: Due = %v, want nothing", got)
	}
	// The hour runs out on the monotonic clock: now it ends.
	if got := due(jumpWall(t, granted.Add(time.Hour), 3*time.Hour)); !slices.Equal(got, ended) {
		t.Errorf("an hour after the grant, clock still 3h ahead: Due = %v, want %v", got, ended)
	}

	// A jump back makes it end late, never early: the hour has run by the
	// monotonic clock, but the wall clock says there are 29 minutes left.
	if got := due(jumpWall(t, granted.Add(61*time.Minute), -30*time.Minute)); got != nil {
		t.Errorf("after a 30m jump back: Due = %v, want nothing until the wall clock agrees", got)
	}

	// Readings that agree end it whether or not they are monotonic...
	if got := due(granted.Add(2 * time.Hour)); !slices.Equal(got, ended) {
		t.Errorf("2h later (monotonic): Due = %v, want %v", got, ended)
	}
	// ...and a wall-only now gets no protection: a caller passing such a time
	// (a time from the store, a test's fixed clock, time.Now() inside a
	// testing/synctest bubble) is trusted as it stands. This is why the
	// agent's clock must be time.Now().
	if got := due(jumpWall(t, granted.Add(time.Minute), 3*time.Hour).Round(0)); !slices.Equal(got, ended) {
		t.Errorf("the jumped time without its monotonic reading: Due = %v, want %v", got, ended)
	}
}

// Saving a change to a lease (warned, signalled, extended) after a jump keeps
// its monotonic deadline, moved by as much as the end moved.
func TestPutAfterClockJumpKeepsDeadline(t *testing.T) {
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionEnd
	granted := time.Now()
	l := held(1, alice, []int{0}, granted.Round(0), time.Hour)
	tab := lease.NewTable(node, []lease.Lease{l}, 1, lease.At(granted))

	later := jumpWall(t, granted.Add(2*time.Minute), 3*time.Hour) // clock set 3h forward
	warned := l
	warned.Warned = true
	tab.Put(warned, lease.At(later))
	if got := steps(tab.Due(lease.At(jumpWall(t, granted.Add(3*time.Minute), 3*time.Hour)), p)); got != nil {
		t.Errorf("after saving the warned flag: Due = %v, want nothing (57m left)", got)
	}

	// Extending by an hour after the jump gives an hour more on the
	// monotonic clock: the lease had 58 minutes left and now has 1h58m, even
	// though by the jumped wall clock it looked two hours over.
	ext, err := tab.PlanExtend(alice, l.ID, time.Hour, lease.At(later), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := l.ExpiresAt.Add(time.Hour); !ext.ExpiresAt.Equal(want) {
		t.Errorf("extended after the jump: ends %v, want %v (the old end plus 1h)", ext.ExpiresAt, want)
	}
	tab.Put(ext, lease.At(later))
	if got, want := steps(tab.Due(lease.At(jumpWall(t, granted.Add(2*time.Hour-time.Second), 3*time.Hour)), p)), []step{{l.ID, lease.StepWarnFinal}}; !slices.Equal(got, want) {
		t.Errorf("a second before 2h after the grant: Due = %v, want only %v", got, want)
	}
	if got, want := steps(tab.Due(lease.At(jumpWall(t, granted.Add(2*time.Hour), 3*time.Hour)), p)), []step{{l.ID, lease.StepEnd}}; !slices.Equal(got, want) {
		t.Errorf("2h after the grant: Due = %v, want %v", got, want)
	}
}

func TestDueReservationsAndPreemption(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	p := lease.DefaultPolicy()
	res := lease.Lease{ID: "n-1", Node: "n", GPUs: []int{0}, UID: 1, Token: 1, StartedAt: now, ExpiresAt: now.Add(time.Hour), ReservedUntil: now.Add(30 * time.Second)}
	pre := lease.Lease{ID: "n-2", Node: "n", GPUs: []int{1}, UID: 1, Token: 2, StartedAt: now, ExpiresAt: now.Add(time.Hour), PreemptedAt: now, PreemptReason: "quota"}
	tab := lease.NewTable("n", []lease.Lease{res, pre}, 2, lease.At(now))
	if got := tab.Due(lease.At(now.Add(10*time.Second)), p); len(got) != 0 {
		t.Errorf("before the reservation TTL and the grace: %v, want nothing", got)
	}
	got := tab.Due(lease.At(now.Add(31*time.Second)), p)
	if len(got) != 1 || got[0].Step != lease.StepReservationExpired || got[0].Lease.ID != "n-1" {
		t.Errorf("after the TTL: %v, want n-1 reservation-expired", got)
	}
	got = tab.Due(lease.At(now.Add(p.PreemptGrace)), p)
	if len(got) != 2 || got[1].Step != lease.StepPreemptEnd || got[1].Lease.ID != "n-2" {
		t.Errorf("after the grace: %v, want n-2 preempted too", got)
	}
}

// The graces and a reservation's expiry are measured on both clocks too, and
// a lease stamped under one boot keeps its monotonic limits when its agent
// restarts in the same boot; after a reboot only the wall clock is left.
func TestGracesAndRestartsSurviveWallSteps(t *testing.T) {
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionSignal
	at := lease.Instant{Wall: t0, Mono: 5 * time.Hour, Boot: "boot-1"}
	res := lease.Lease{ID: "n-1", Node: "n", GPUs: []int{0}, UID: 1, Token: 1, StartedAt: t0, ExpiresAt: t0.Add(time.Hour), ReservedUntil: t0.Add(30 * time.Second)}
	pre := lease.Lease{ID: "n-2", Node: "n", GPUs: []int{1}, UID: 1, Token: 2, StartedAt: t0, ExpiresAt: t0.Add(time.Hour), PreemptedAt: t0, PreemptReason: "quota"}
	sig := lease.Lease{ID: "n-3", Node: "n", GPUs: []int{2}, UID: 1, Token: 3, Session: "s", StartedAt: t0.Add(-time.Hour), ExpiresAt: t0, SignalledAt: t0}
	tab := lease.NewTable("n", nil, 0, at)
	for _, l := range []lease.Lease{res, pre, sig} {
		tab.Put(l, at)
	}
	// The wall clock is set a day forward ten seconds later.
	stepped := lease.Instant{Wall: t0.Add(24 * time.Hour), Mono: at.Mono + 10*time.Second, Boot: "boot-1"}
	if got := tab.Due(stepped, p); len(got) != 0 {
		t.Errorf("after a day's step forward, 10s in: Due = %v, want nothing (no grace is over)", steps(got))
	}
	// Restarted in the same boot from what the store kept: still nothing.
	var stored []lease.Lease
	for _, l := range tab.List() {
		stored = append(stored, tab.Stamp(l, stepped))
	}
	again := lease.NewTable("n", stored, 3, stepped)
	if got := again.Due(stepped, p); len(got) != 0 {
		t.Errorf("restarted in the same boot: Due = %v, want nothing", steps(got))
	}
	later := stepped
	later.Mono += p.PreemptGrace
	want := []step{{"n-1", lease.StepReservationExpired}, {"n-2", lease.StepPreemptEnd}, {"n-3", lease.StepEnd}}
	if got := steps(again.Due(later, p)); !slices.Equal(got, want) {
		t.Errorf("once the graces run out on the monotonic clock: Due = %v, want %v", got, want)
	}
	// After a reboot the monotonic limits mean nothing: the wall clock rules.
	rebooted := lease.Instant{Wall: stepped.Wall, Mono: time.Minute, Boot: "boot-2"}
	if got := steps(lease.NewTable("n", stored, 3, rebooted).Due(rebooted, p)); !slices.Equal(got, want) {
		t.Errorf("after a reboot with the clock a day ahead: Due = %v, want %v", got, want)
	}
}

// TestStillDueAfterAnExtend: a node reads what is due, then takes each step;
// an extend saved in between (same token, a later end) cancels the end and
// the warnings the old limit called for, while an unchanged lease's steps
// still stand. The final nemesis run caught a lease ended "expired" 3.6 s
// before the limit its holder had just extended it to.
func TestStillDueAfterAnExtend(t *testing.T) {
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionEnd
	l := held(1, alice, []int{0}, t0, time.Hour)
	other := held(2, alice, []int{1}, t0, time.Hour)
	tab := table(l, other)
	at := lease.At(t0.Add(time.Hour + time.Second))
	due := tab.Due(at, p)
	if len(due) != 2 || due[0].Step != lease.StepEnd || due[1].Step != lease.StepEnd {
		t.Fatalf("Due past the limit = %v, want both ended", steps(due))
	}
	ext, err := tab.PlanExtend(alice, l.ID, time.Hour, lease.At(t0.Add(59*time.Minute)), p)
	if err != nil {
		t.Fatal(err)
	}
	tab.Put(ext, at)
	for _, d := range due {
		want := d.Lease.ID == other.ID
		if got := lease.StillDue(tab, at, p, d); got != want {
			t.Errorf("StillDue(%s %s) after %s was extended = %v, want %v", d.Lease.ID, d.Step, l.ID, got, want)
		}
	}
	warn := lease.Due{Lease: l, Step: lease.StepWarn}
	if lease.StillDue(tab, lease.At(t0.Add(55*time.Minute)), p, warn) {
		t.Errorf("the ten-minute warning of the old limit is still due after the extend")
	}
	tab.Remove(other.ID)
	if lease.StillDue(tab, at, p, due[1]) {
		t.Errorf("a step of a lease no longer in the table is still due")
	}
}
