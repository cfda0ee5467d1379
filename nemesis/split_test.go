package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/internal/poll"
)

// TestSplitSchedulersNeverStartAnEntryTwice is the fault the nemesis found:
// node01 (the scheduler, being the lowest-named) is cut off from the other
// two; for the seconds before anyone calls anyone dead, node01 still
// schedules with a view that shows node02 alive, and node02's side soon
// schedules too. A request queued at node02 then waits for a GPU; one comes
// free on each side. Only one scheduler may start it: its origin, node02,
// lets only one, and node01 cannot even ask.
func TestSplitSchedulersNeverStartAnEntryTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three agents and waits out a failure detection")
	}
	h := startCluster(t, Options{Nodes: 3, GPUs: 1, Seed: 1})
	c := func(i int) *api.Client { return h.members[i].client }
	ctx := context.Background()
	var held []api.ClaimResponse
	for i := range h.members {
		l, err := c(i).Claim(ctx, api.ClaimRequest{GPUs: []int{0}, Duration: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	sub, err := c(1).Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to know the queued request", func() bool {
		q, err := c(0).Queue(ctx)
		return err == nil && len(q.Entries) == 1
	})
	h.net.partition([]string{"node01"}, []string{"node01", "node02", "node03"})
	// A GPU comes free on each side at once.
	if _, err := c(0).Release(ctx, api.ReleaseRequest{IDs: []string{held[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c(2).Release(ctx, api.ReleaseRequest{IDs: []string{held[2].ID}}); err != nil {
		t.Fatal(err)
	}
	// Watch every board, both sides, while the split lasts and after it
	// heals: the entry never runs in two places.
	runs := func() map[string]bool {
		out := map[string]bool{}
		for i := range h.members {
			b, err := c(i).WithoutRetry().Board(ctx)
			if err != nil {
				continue
			}
			for _, n := range b.Nodes {
				if n.Name != b.Self {
					continue // each agent's word on its own GPUs
				}
				for _, g := range n.GPUs {
					if g.Lease != nil && g.Lease.Entry != "" {
						out[g.Lease.ID] = true
					}
				}
			}
		}
		return out
	}
	poll.Never(t, 12*time.Second, sub.ID+" runs twice while the split lasts", func() bool {
		r := runs()
		if len(r) > 1 {
			t.Logf("%s runs in two places: leases %v", sub.ID, r)
		}
		return len(r) > 1
	})
	h.net.heal()
	agenttest.Eventually(t, 15*time.Second, "the request to run once the split heals", func() bool {
		r := runs()
		if len(r) > 1 {
			t.Fatalf("%s runs twice after the heal: leases %v", sub.ID, r)
		}
		return len(r) == 1
	})
}
