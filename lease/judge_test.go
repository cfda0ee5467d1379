package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestJudgeSquatters(t *testing.T) {
	p := lease.DefaultPolicy()
	box := islands(2, 2)
	leases := []lease.Lease{held(1, alice, []int{0, 1}, t0, 4*time.Hour)}
	byName := func(pid int, user string) nodeprobe.Process {
		return nodeprobe.Process{PID: pid, UID: -1, User: user, Command: "python"}
	}
	tests := []struct {
		name     string
		snap     nodeprobe.Snapshot
		gpu      int
		squatted []int // pids
	}{
		{"no process, no lease", box, 2, nil},
		{"a process with no lease", withProc(box, 2, proc(10, bob, "python")), 2, []int{10}},
		{"the holder's own process", withProc(box, 0, proc(11, alice, "python")), 0, nil},
		{"another uid's process on a leased GPU", withProc(withProc(box, 1, proc(12, alice, "python")), 1, proc(13, bob, "python")), 1, []int{13}},
		{"same name, other uid: the uid wins", withProc(box, 0, nodeprobe.Process{PID: 14, UID: 4001, User: "alice"}), 0, []int{14}},
		{"uid unknown, holder's name", withProc(box, 0, byName(15, "alice")), 0, nil},
		{"uid unknown, someone else's name", withProc(box, 0, byName(16, "bob")), 0, []int{16}},
		{"uid and name unknown", withProc(box, 0, byName(17, "")), 0, []int{17}},
		{"root's process on someone's GPU", withProc(box, 1, proc(18, root, "nvidia-persistenced")), 1, []int{18}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := lease.Judge(tt.snap, leases, nil, t0.Add(time.Hour), p)[tt.gpu]
			var got []int
			for _, pr := range j.Squatters {
				got = append(got, pr.PID)
			}
			if !slices.Equal(got, tt.squatted) {
				t.Errorf("squatters = %v, want %v", got, tt.squatted)
			}
			if j.Has(lease.FlagSquatted) != (len(tt.squatted) > 0) {
				t.Errorf("flags = %v, want squatted %v", j.Flags, len(tt.squatted) > 0)
			}
		})
	}
}

func TestJudgeTime(t *testing.T) {
	p := lease.DefaultPolicy() // warn 10m before the end
	leases := []lease.Lease{held(1, alice, []int{0}, t0, 4*time.Hour)}
	end := t0.Add(4 * time.Hour)
	tests := []struct {
		now  time.Time
		want []lease.Flag
	}{
		{t0, nil},
		{end.Add(-10*time.Minute - time.Second), nil},
		{end.Add(-10 * time.Minute), []lease.Flag{lease.FlagExpiring}},
		{end.Add(-time.Second), []lease.Flag{lease.FlagExpiring}},
		{end, []lease.Flag{lease.FlagOverdue}},
		{end.Add(time.Hour), []lease.Flag{lease.FlagOverdue}},
	}
	for _, tt := range tests {
		js := lease.Judge(islands(2), leases, nil, tt.now, p)
		if got := js[0].Flags; !slices.Equal(got, tt.want) {
			t.Errorf("%s before the end: flags %v, want %v", end.Sub(tt.now), got, tt.want)
		}
		if got := js[1].Flags; got != nil {
			t.Errorf("unleased GPU flagged %v", got)
		}
	}
}

// The idle flag needs history: a GPU is idle when it has had no process and
// low utilisation for IdleAfter, counted from when it went quiet or from when
// the lease began, whichever is later.
func TestJudgeIdle(t *testing.T) {
	p := lease.DefaultPolicy() // idle after 30m under 5%
	box := islands(2)
	at := func(snap nodeprobe.Snapshot, d time.Duration) nodeprobe.Snapshot {
		snap.TakenAt = t0.Add(d)
		return snap
	}
	busyUtil := withUtil(box, 0, nodeprobe.IntPtr(80))
	lowUtil := withUtil(box, 0, nodeprobe.IntPtr(p.IdleUtilPct-1))
	atThreshold := withUtil(box, 0, nodeprobe.IntPtr(p.IdleUtilPct))
	unknownUtil := withUtil(box, 0, nil)
	running := withProc(box, 0, proc(10, alice, "python"))
	early := held(1, alice, []int{0}, t0.Add(-2*time.Hour), 8*time.Hour)
	late := held(1, alice, []int{0}, t0.Add(20*time.Minute), 8*time.Hour)

	tests := []struct {
		name  string
		lease lease.Lease
		seen  []nodeprobe.Snapshot // observed in order
		now   time.Duration        // after t0
		idle  bool
		since time.Duration // want IdleSince after t0; -1 for zero
	}{
		{"quiet for IdleAfter", early, []nodeprobe.Snapshot{at(box, 0), at(box, 10*time.Minute)}, 30 * time.Minute, true, 0},
		{"quiet not yet long enough", early, []nodeprobe.Snapshot{at(box, 0)}, 29 * time.Minute, false, 0},
		{"under the threshold counts as quiet", early, []nodeprobe.Snapshot{at(lowUtil, 0)}, 30 * time.Minute, true, 0},
		{"at the threshold is work", early, []nodeprobe.Snapshot{at(atThreshold, 0)}, time.Hour, false, -1},
		{"unknown utilisation and no process is quiet", early, []nodeprobe.Snapshot{at(unknownUtil, 0)}, 30 * time.Minute, true, 0},
		{"utilisation resets the count", early, []nodeprobe.Snapshot{at(box, 0), at(busyUtil, 10*time.Minute), at(box, 20*time.Minute)}, 45 * time.Minute, false, 20 * time.Minute},
		{"quiet again long enough", early, []nodeprobe.Snapshot{at(box, 0), at(busyUtil, 10*time.Minute), at(box, 20*time.Minute)}, 50 * time.Minute, true, 20 * time.Minute},
		{"a process resets the count", early, []nodeprobe.Snapshot{at(box, 0), at(running, 10*time.Minute)}, time.Hour, false, -1},
		{"counted from the lease start when that is later", late, []nodeprobe.Snapshot{at(box, 0)}, 45 * time.Minute, false, 0},
		{"idle 30m after the lease start", late, []nodeprobe.Snapshot{at(box, 0)}, 50 * time.Minute, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := lease.NewIdleTracker()
			for _, s := range tt.seen {
				it.Observe(s, p)
			}
			j := lease.Judge(box, []lease.Lease{tt.lease}, it, t0.Add(tt.now), p)[0]
			if j.Has(lease.FlagIdle) != tt.idle {
				t.Errorf("idle = %v, want %v (flags %v)", j.Has(lease.FlagIdle), tt.idle, j.Flags)
			}
			want := time.Time{}
			if tt.since >= 0 {
				want = t0.Add(tt.since)
			}
			if !j.IdleSince.Equal(want) {
				t.Errorf("IdleSince = %v, want %v", j.IdleSince, want)
			}
		})
	}

	t.Run("no tracker, no idle", func(t *testing.T) {
		j := lease.Judge(box, []lease.Lease{early}, nil, t0.Add(24*time.Hour), p)[0]
		if j.Has(lease.FlagIdle) || !j.IdleSince.IsZero() {
			t.Errorf("judged without history: %+v", j)
		}
	})
	t.Run("an unleased quiet GPU is not idle", func(t *testing.T) {
		it := lease.NewIdleTracker()
		it.Observe(at(box, 0), p)
		j := lease.Judge(box, nil, it, t0.Add(24*time.Hour), p)[1]
		if j.Has(lease.FlagIdle) || !j.IdleSince.Equal(t0) {
			t.Errorf("got %+v, want no flag and IdleSince %v", j, t0)
		}
	})
	t.Run("a GPU that leaves the snapshot is forgotten", func(t *testing.T) {
		it := lease.NewIdleTracker()
		it.Observe(at(box, 0), p)
		gone := at(box, time.Minute)
		gone.GPUs = gone.GPUs[:1]
		it.Observe(gone, p)
		if _, ok := it.QuietSince(1); ok {
			t.Errorf("GPU 1 left the snapshot but is still tracked")
		}
		it.Observe(at(box, 2*time.Minute), p)
		if since, _ := it.QuietSince(1); !since.Equal(t0.Add(2 * time.Minute)) {
			t.Errorf("GPU 1 back: quiet since %v, want %v", since, t0.Add(2*time.Minute))
		}
	})
}
