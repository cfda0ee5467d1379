package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// book puts bob's booking of gpus from t0+in for dur into tb.
func book(t *testing.T, tb *lease.Table, c lease.Caller, gpus []int, in, dur time.Duration) lease.Lease {
	t.Helper()
	b, err := tb.PlanBooking(c, lease.BookRequest{GPUs: gpus, Start: t0.Add(in), Duration: dur}, islands(4), t0, lease.DefaultPolicy())
	if err != nil {
		t.Fatalf("book %v: %v", gpus, err)
	}
	tb.Put(b, lease.At(t0))
	return b
}

func TestPlanBooking(t *testing.T) {
	snap := islands(4)
	tb := table(held(1, alice, []int{0}, t0, 3*time.Hour))
	p := lease.DefaultPolicy()
	b, err := tb.PlanBooking(bob, lease.BookRequest{Count: 2, Start: t0.Add(2 * time.Hour), Duration: 3 * time.Hour, Note: "deadline"}, snap, t0, p)
	if err != nil {
		t.Fatal(err)
	}
	// GPU 0 is alice's until after the start; two of the others.
	if !b.Booked || !slices.Equal(b.GPUs, []int{1, 2}) || !b.StartedAt.Equal(t0.Add(2*time.Hour)) || b.ExpiresAt.Sub(b.StartedAt) != 3*time.Hour {
		t.Fatalf("booking %+v, want GPUs 1,2 booked from t0+2h for 3h", b)
	}
	tb.Put(b, lease.At(t0))
	if len(tb.List()) != 1 || len(tb.Bookings()) != 1 {
		t.Errorf("List has %d, Bookings %d: a booking is not a lease until it starts", len(tb.List()), len(tb.Bookings()))
	}
	for _, tt := range []struct {
		req  lease.BookRequest
		code refusal.Code
		want []string
	}{
		{lease.BookRequest{Count: 4, Start: t0.Add(150 * time.Minute), Duration: time.Hour}, refusal.CodeConflict,
			[]string{"asked to book 4 GPUs of gpu-01", "but only 1 can be", "GPU 0 is held by alice until", "GPU 1 is booked by bob from"}},
		{lease.BookRequest{GPUs: []int{2}, Start: t0.Add(4 * time.Hour), Duration: time.Hour}, refusal.CodeConflict, []string{"cannot book GPU 2", "booked by bob"}},
		{lease.BookRequest{Count: 1, Start: t0.Add(-time.Minute), Duration: time.Hour}, refusal.CodeInvalid, []string{"not in the future", "dibs claim"}},
		{lease.BookRequest{Count: 1, Start: t0.Add(40 * 24 * time.Hour), Duration: time.Hour}, refusal.CodeInvalid, []string{"at most 30d ahead"}},
		{lease.BookRequest{Count: 1, Start: t0.Add(time.Hour)}, refusal.CodeInvalid, []string{"say how long", "--for 3h"}},
		{lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: 30 * 24 * time.Hour}, refusal.CodeInvalid, []string{"over the interactive maximum"}},
	} {
		_, err := tb.PlanBooking(carol, tt.req, snap, t0, p)
		checkRefusal(t, err, tt.code, tt.want...)
	}
	// After alice's lease ends the whole node is free.
	if _, err := tb.PlanBooking(carol, lease.BookRequest{GPUs: []int{0, 3}, Start: t0.Add(5 * time.Hour), Duration: time.Hour}, snap, t0, p); err != nil {
		t.Errorf("booking GPU 0 after alice's lease ends: %v", err)
	}
	p.BookMaxGPUHours = 10
	_, err = tb.PlanBooking(bob, lease.BookRequest{Count: 2, Start: t0.Add(6 * time.Hour), Duration: 3 * time.Hour}, snap, t0, p)
	checkRefusal(t, err, refusal.CodeConflict, "one person may hold 10 GPU-hours of bookings; you hold 6 and this one is 6")
}

// A claim that would run into a booking gets a time limit that ends before
// it, or is refused when it asked for longer.
func TestClaimStopsBeforeBooking(t *testing.T) {
	tb := table()
	book(t, tb, bob, []int{0, 1, 2, 3}, 2*time.Hour, 3*time.Hour)
	l, err := tb.PlanClaim(alice, lease.Claim{Count: 1}, islands(4), t0, lease.DefaultPolicy())
	if err != nil || !l.ExpiresAt.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("a default 4h claim before a booking in 2h: ends %s (%v), want at the booking's start", l.ExpiresAt, err)
	}
	_, err = tb.PlanClaim(alice, lease.Claim{Count: 1, Duration: 3 * time.Hour}, islands(4), t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "only 0 are free that long", "booked by bob from")
	_, err = tb.PlanClaim(alice, lease.Claim{GPUs: []int{2}, Duration: 3 * time.Hour}, islands(4), t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "GPUs 0,1,2,3 are booked by bob", "ask for --for 2h at most")
	if _, err := tb.PlanClaim(alice, lease.Claim{Count: 1, Duration: time.Hour}, islands(4), t0, lease.DefaultPolicy()); err != nil {
		t.Errorf("a 1h claim that ends before the booking: %v", err)
	}
	// A claim prefers GPUs no booking needs.
	tb = table()
	book(t, tb, bob, []int{0, 1}, 2*time.Hour, time.Hour)
	l, err = tb.PlanClaim(alice, lease.Claim{Count: 2}, islands(4), t0, lease.DefaultPolicy())
	if err != nil || !slices.Equal(l.GPUs, []int{2, 3}) || l.ExpiresAt.Sub(t0) != 4*time.Hour {
		t.Errorf("-g 2 took %v until %s (%v), want the unbooked GPUs 2,3 for the full 4h", l.GPUs, l.ExpiresAt, err)
	}
	// A booking starting within a minute makes its GPUs taken.
	tb = table()
	book(t, tb, bob, []int{0, 1, 2, 3}, 30*time.Second, time.Hour)
	_, err = tb.PlanClaim(alice, lease.Claim{Count: 1}, islands(4), t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "only 0 free")
}

func TestExtendStopsBeforeBooking(t *testing.T) {
	tb := table(held(1, alice, []int{0}, t0, time.Hour))
	book(t, tb, bob, []int{0}, 2*time.Hour, time.Hour)
	_, err := tb.PlanExtend(alice, "gpu-01-1", 2*time.Hour, lease.At(t0), lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "would run into a booking", "extend by at most 1h")
	if _, err := tb.PlanExtend(alice, "gpu-01-1", 30*time.Minute, lease.At(t0), lease.DefaultPolicy()); err != nil {
		t.Errorf("extending to before the booking: %v", err)
	}
	_, err = tb.PlanExtend(bob, "gpu-01-2", time.Hour, lease.At(t0), lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeInvalid, "is a booking, which cannot be extended")
}

// At its time a booking becomes a lease; a lease still there (past its own
// end) is to be ended first.
func TestBookingStarts(t *testing.T) {
	overdue := held(1, alice, []int{0}, t0, time.Hour)
	tb := table(overdue)
	b := book(t, tb, bob, []int{0, 1}, 2*time.Hour, time.Hour)
	steps := func(at time.Time) []lease.Step {
		var out []lease.Step
		for _, d := range tb.Due(lease.At(at), lease.DefaultPolicy()) {
			if d.Lease.ID == b.ID {
				out = append(out, d.Step)
			}
		}
		return out
	}
	if s := steps(t0.Add(time.Hour + 59*time.Minute)); len(s) != 0 {
		t.Errorf("before its time the booking is due %v", s)
	}
	if s := steps(t0.Add(2 * time.Hour)); !slices.Equal(s, []lease.Step{lease.StepBookingStart}) {
		t.Errorf("at its time the booking is due %v, want booking-start", s)
	}
	if s := steps(t0.Add(3 * time.Hour)); !slices.Equal(s, []lease.Step{lease.StepBookingLapsed}) {
		t.Errorf("after its end the booking is due %v, want booking-lapsed", s)
	}
	l, end, err := tb.PlanBookingStart(b.ID, t0.Add(2*time.Hour+time.Second))
	if err != nil || l.Booked || l.ID != b.ID || !l.StartedAt.Equal(t0.Add(2*time.Hour+time.Second)) || !l.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("started %+v (%v), want the booking as a lease from now to its end", l, err)
	}
	if len(end) != 1 || end[0].ID != overdue.ID {
		t.Errorf("leases to end first: %v, want alice's overdue lease", end)
	}
}

func TestBookNode(t *testing.T) {
	a, b := cand("a", islands(4), "h100"), cand("b", islands(2), "h100")
	bk := held(9, bob, []int{0, 1, 2}, t0.Add(time.Hour), 2*time.Hour)
	bk.Booked = true
	a.Bookings = []lease.Lease{bk}
	got, err := lease.BookNode([]lease.Candidate{a, b}, 2, "", []string{"h100"}, nil, "alice", t0.Add(2*time.Hour), t0.Add(3*time.Hour))
	if err != nil || got != "b" {
		t.Errorf("2 GPUs while a's are booked went to %q (%v), want b", got, err)
	}
	got, err = lease.BookNode([]lease.Candidate{a, b}, 2, "", nil, nil, "alice", t0.Add(4*time.Hour), t0.Add(5*time.Hour))
	if err != nil || got != "b" {
		t.Errorf("after the booking: %q (%v), want b (packs: no GPU left over)", got, err)
	}
	_, err = lease.BookNode([]lease.Candidate{a, b}, 3, "", nil, nil, "alice", t0.Add(2*time.Hour), t0.Add(3*time.Hour))
	checkRefusal(t, err, refusal.CodeConflict, "at most 2 can be booked together (on b)")
}

// Weak 1 of issue 20: on the default config one person could book every
// GPU for weeks. The defaults cap one booking's length and a person's
// booked GPU-hours, each refusal saying what to do.
func TestBookingDefaultsProtectASharedCluster(t *testing.T) {
	p := lease.DefaultPolicy()
	for _, tt := range []struct {
		name string
		req  lease.BookRequest
		code refusal.Code
		want []string
	}{
		{"a week", lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: 7 * 24 * time.Hour}, refusal.CodeInvalid,
			[]string{"a booking may last at most 3d here; this one is 7d", "book a shorter time"}},
		{"every GPU for three days", lease.BookRequest{Count: 4, Start: t0.Add(time.Hour), Duration: 3 * 24 * time.Hour}, refusal.CodeConflict,
			[]string{"one person may hold 96 GPU-hours of bookings; you hold 0 and this one is 288", "book less"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := table().PlanBooking(carol, tt.req, islands(4), t0, p)
			checkRefusal(t, err, tt.code, tt.want...)
		})
	}
	// Within them, a booking of a day of four GPUs is fine.
	if _, err := table().PlanBooking(carol, lease.BookRequest{Count: 4, Start: t0.Add(time.Hour), Duration: 24 * time.Hour}, islands(4), t0, p); err != nil {
		t.Errorf("four GPUs for a day: %v", err)
	}
}

// A span's end is printed so that it cannot be misread: a week-long
// booking was shown as "16:13 to 16:13".
func TestSpanEnd(t *testing.T) {
	start := time.Date(2026, 12, 1, 16, 13, 0, 0, time.Local)
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Hour, "18:13"},
		{24 * time.Hour, "Wed 16:13"},
		{7 * 24 * time.Hour, "Tue Dec 8 16:13"},
	} {
		if got := lease.SpanEnd(start, start.Add(tt.d)); got != tt.want {
			t.Errorf("SpanEnd(+%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
