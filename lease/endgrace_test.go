package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A lease's processes take a moment to exit after it ends: within EndGrace
// its holder's processes on its GPUs are not squatters, anyone else's are.
func TestJudgeEndGrace(t *testing.T) {
	p := lease.DefaultPolicy()
	box := islands(2, 2)
	end := t0.Add(time.Hour)
	gone := lease.Ended(held(1, alice, []int{0}, t0, 4*time.Hour), end, string(lease.EndReleased), "")
	reserved := gone
	reserved.Reserved = true
	live := held(2, bob, []int{1}, t0, 4*time.Hour)
	again := held(3, bob, []int{0}, end, 4*time.Hour) // GPU 0 claimed again at once
	byName := nodeprobe.Process{PID: 20, UID: -1, User: "alice", Command: "python"}
	tests := []struct {
		name     string
		snap     nodeprobe.Snapshot
		leases   []lease.Lease
		ended    []lease.LedgerEntry
		now      time.Time
		gpu      int
		squatted []int // pids
	}{
		{"no ended lease: the holder gone is a squatter", withProc(box, 0, proc(10, alice, "python")), nil, nil, end.Add(time.Second), 0, []int{10}},
		{"the ended lease's holder, just after the end", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{gone}, end.Add(time.Second), 0, nil},
		{"the ended lease's holder, at the end", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{gone}, end, 0, nil},
		{"the ended lease's holder, late in the grace", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{gone}, end.Add(lease.EndGrace - time.Millisecond), 0, nil},
		{"the ended lease's holder, uid unknown, by name", withProc(box, 0, byName), nil, []lease.LedgerEntry{gone}, end.Add(time.Second), 0, nil},
		{"the ended lease's holder, grace over", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{gone}, end.Add(lease.EndGrace), 0, []int{10}},
		{"the ended lease's holder, long after", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{gone}, end.Add(time.Hour), 0, []int{10}},
		{"another user within the grace", withProc(withProc(box, 0, proc(10, alice, "python")), 0, proc(11, bob, "python")), nil, []lease.LedgerEntry{gone}, end.Add(time.Second), 0, []int{11}},
		{"the holder on a GPU the ended lease did not have", withProc(box, 2, proc(12, alice, "python")), nil, []lease.LedgerEntry{gone}, end.Add(time.Second), 2, []int{12}},
		{"a reservation ran nothing", withProc(box, 0, proc(10, alice, "python")), nil, []lease.LedgerEntry{reserved}, end.Add(time.Second), 0, []int{10}},
		{"a live lease's holder", withProc(box, 1, proc(13, bob, "python")), []lease.Lease{live}, []lease.LedgerEntry{gone}, end.Add(time.Second), 1, nil},
		{"the ended holder on a live lease's GPU", withProc(box, 1, proc(14, alice, "python")), []lease.Lease{live}, []lease.LedgerEntry{gone}, end.Add(time.Second), 1, []int{14}},
		{"claimed again: the old holder's work still exiting", withProc(withProc(box, 0, proc(10, alice, "python")), 0, proc(15, bob, "python")), []lease.Lease{again}, []lease.LedgerEntry{gone}, end.Add(time.Second), 0, nil},
		{"claimed again, grace over", withProc(withProc(box, 0, proc(10, alice, "python")), 0, proc(15, bob, "python")), []lease.Lease{again}, []lease.LedgerEntry{gone}, end.Add(lease.EndGrace), 0, []int{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := lease.JudgeWithEnded(tt.snap, tt.leases, tt.ended, nil, tt.now, p)[tt.gpu]
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

// A live lease's GPU is judged the same with or without ended leases
// beside it: its idle, expiring and overdue flags do not move.
func TestJudgeEndGraceLeavesLiveLeases(t *testing.T) {
	p := lease.DefaultPolicy()
	snap := withProc(islands(2), 0, proc(10, alice, "python"))
	leases := []lease.Lease{held(2, bob, []int{1}, t0, time.Hour)}
	idle := lease.NewIdleTracker()
	idle.Observe(snap, p)
	gone := lease.Ended(held(1, alice, []int{0}, t0, time.Hour), t0.Add(time.Hour), string(lease.EndExpired), "")
	for _, now := range []time.Time{t0.Add(50 * time.Minute), t0.Add(time.Hour), t0.Add(time.Hour + time.Second)} {
		want := lease.Judge(snap, leases, idle, now, p)[1]
		got := lease.JudgeWithEnded(snap, leases, []lease.LedgerEntry{gone}, idle, now, p)[1]
		if !slices.Equal(got.Flags, want.Flags) || len(got.Squatters) != len(want.Squatters) || !got.IdleSince.Equal(want.IdleSince) {
			t.Errorf("at %s: live GPU judged %+v, want %+v", now.Sub(t0), got, want)
		}
	}
}

func TestWithinEndGrace(t *testing.T) {
	now := t0.Add(time.Hour)
	at := func(id uint64, end time.Time) lease.LedgerEntry {
		return lease.Ended(held(id, alice, []int{0}, t0, 4*time.Hour), end, string(lease.EndReleased), "")
	}
	all := []lease.LedgerEntry{
		at(1, now.Add(-time.Hour)),
		at(2, now.Add(-lease.EndGrace)),
		at(3, now.Add(-lease.EndGrace+time.Second)),
		at(4, now),
		at(5, now.Add(time.Second)), // the wall clock stepped back a little
	}
	var got []string
	for _, e := range lease.WithinEndGrace(all, now) {
		got = append(got, e.LeaseID)
	}
	want := []string{lease.LeaseID(node, 3), lease.LeaseID(node, 4), lease.LeaseID(node, 5)}
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}
