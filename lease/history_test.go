package lease

import (
	"testing"
	"time"
)

// TestHistoryStates: every way a lease ends reads as one of history's
// states, the way sacct's users expect (a queued run reclaimed for
// someone goes back in the queue: requeued).
func TestHistoryStates(t *testing.T) {
	for _, c := range []struct {
		reason EndReason
		entry  string
		want   RunState
	}{
		{ExitReason(0), "", StateCompleted},
		{ExitReason(3), "", StateFailed},
		{EndReleased, "", StateReleased},
		{EndExpired, "", StateExpired},
		{EndSessionEnded, "", StateCompleted},
		{EndSessionFailed, "", StateFailed},
		{EndByAdmin, "", StateCancelled},
		{EndReservationExpired, "q1#1", StateCancelled},
		{EndLost, "", StateLost},
		{PreemptedReason(PreemptIdle), "", StateReclaimed},
		{PreemptedReason(PreemptOverdue), "", StateReclaimed},
		{PreemptedReason(PreemptQuota), "", StatePreempted},
		{PreemptedReason(PreemptQuota), "q1#1", StateRequeued},
		{PreemptedReason(PreemptIdle), "q1#1", StateRequeued},
		{PreemptedReason(PreemptGang), "q1#1", StatePreempted},
		{ReasonCompacted, "", StateFolded},
	} {
		e := LedgerEntry{Reason: string(c.reason), Entry: c.entry}
		if got := e.State(); got != c.want {
			t.Errorf("%s (entry %q) reads %s, want %s", c.reason, c.entry, got, c.want)
		}
	}
}

// TestFilterLedger: the newest rows that match, in end order; a job
// filter finds an array's tasks and a gang's ranks; a folded row counts
// the leases it stands for.
func TestFilterLedger(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var all []LedgerEntry
	for i := range 10 {
		e := LedgerEntry{LeaseID: "n-" + string(rune('a'+i)), User: []string{"ann", "ben"}[i%2], End: t0.Add(time.Duration(i) * time.Minute), Reason: "released"}
		if i == 4 {
			e.Entry = "n-q7/2#1"
		}
		if i == 6 {
			e.Gang = "g9"
		}
		all = append(all, e)
	}
	rows, more := FilterLedger(all, HistoryFilter{User: "ann", Since: t0.Add(time.Minute), Limit: 2})
	if len(rows) != 2 || rows[0].LeaseID != "n-g" || rows[1].LeaseID != "n-i" || !more {
		t.Errorf("ann's newest two: %v (more %v), want n-g, n-i and more", rows, more)
	}
	for job, want := range map[string]string{"n-q7": "n-e", "n-q7/2": "n-e", "g9": "n-g"} {
		rows, _ := FilterLedger(all, HistoryFilter{Job: job})
		if len(rows) != 1 || rows[0].LeaseID != want {
			t.Errorf("job %s: %v, want %s", job, rows, want)
		}
	}
	row := FoldInto(FoldInto(FoldInto(LedgerEntry{}, all[0]), all[2]), all[4])
	if row.Folded != 3 || row.State() != StateFolded {
		t.Errorf("a row folded from three leases counts %d (%s), want 3", row.Folded, row.State())
	}
	f := HistoryFilter{Since: t0, Until: t0.Add(-time.Hour)}
	if err := f.Validate(); err == nil {
		t.Error("--until before --since was taken")
	}
}
