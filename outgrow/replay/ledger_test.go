package replay

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// TestFromLedger: gang ranks become one request asked when it was queued,
// an interactive lease's work is its held time times the busy share, a
// batch run's is all of it, a running lease counts until now, and a lease
// from before the window is left out.
func TestFromLedger(t *testing.T) {
	nodes := []NodeSpec{{Name: "n1", Spec: "2xL40S"}, {Name: "n2", Spec: "2xL40S"}}
	start, end := t0, t0.Add(24*time.Hour)
	ledger := []lease.LedgerEntry{
		{LeaseID: "n1-1", Node: "n1", User: "ana", GPUs: []int{0}, Start: t0.Add(time.Hour), End: t0.Add(5 * time.Hour), Kind: lease.KindInteractive, Limit: 4 * time.Hour},
		{LeaseID: "n1-2", Node: "n1", User: "bo", GPUs: []int{0, 1}, Start: t0.Add(6 * time.Hour), End: t0.Add(8 * time.Hour), Kind: lease.KindBatch,
			Entry: "n2-q3#0", Gang: "n2-q3-0", Rank: 1, QueuedAt: t0.Add(5 * time.Hour), Limit: 3 * time.Hour},
		{LeaseID: "n2-7", Node: "n2", User: "bo", GPUs: []int{0, 1}, Start: t0.Add(6 * time.Hour), End: t0.Add(8 * time.Hour), Kind: lease.KindBatch,
			Entry: "n2-q3#0", Gang: "n2-q3-0", QueuedAt: t0.Add(5 * time.Hour), Limit: 3 * time.Hour},
		{LeaseID: "n2-1", Node: "n2", User: "cy", GPUs: []int{1}, Start: t0.Add(-3 * time.Hour), End: t0.Add(-time.Hour)},
	}
	running := []lease.Lease{{ID: "n2-9", Node: "n2", User: "cy", GPUs: []int{1}, Kind: lease.KindBatch, StartedAt: t0.Add(20 * time.Hour), ExpiresAt: t0.Add(30 * time.Hour)}}
	tr := FromLedger(nodes, ledger, running, start, end, 0.25)
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	byID := map[string]Request{}
	for _, r := range tr.Requests {
		byID[r.ID] = r
	}
	if len(byID) != 3 {
		t.Fatalf("requests %v, want ana's lease, bo's gang and cy's running lease", tr.Requests)
	}
	if r := byID["n1-1"]; r.Work != time.Hour || r.Hold != 4*time.Hour || r.Via != ViaClaim || r.From != "n1" {
		t.Errorf("ana's session = %+v, want work 1h (a quarter of 4h held), hold 4h, a claim at n1", r)
	}
	if r := byID["n2-q3-0"]; r.Nodes != 2 || r.GPUs != 2 || !r.At.Equal(t0.Add(5*time.Hour)) || r.Work != 2*time.Hour || r.Via != ViaQueue || r.From != "n2" || r.Limit != 3*time.Hour {
		t.Errorf("bo's gang = %+v, want 2 nodes × 2 GPUs queued at 5h at n2, work 2h, limit 3h", r)
	}
	if r := byID["n2-9"]; r.Work != 4*time.Hour {
		t.Errorf("cy's running lease = %+v, want 4h of work until the window's end", r)
	}
	if _, err := Run(tr, PolicyDibs, Config{}); err != nil {
		t.Fatalf("replaying the rebuilt trace: %v", err)
	}
}
