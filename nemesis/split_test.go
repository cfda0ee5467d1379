package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
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
	held := holdEveryGPU(t, h)
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

// TestALostAnswerDoesNotStartAnEntryTwice is the fault the final long run
// found: the scheduler (node01) starts a queued request on node02, node02
// starts it, then falls silent (paused) before its answer or its gossip
// gets out. Taking the silence for a refusal, the scheduler planned
// the request again on node03, and it ran in two places. A start that got
// no answer now keeps its hold until the attempt's lease shows, its origin
// moves on, or InFlightTimeout passes.
func TestALostAnswerDoesNotStartAnEntryTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three agents and waits out a lost answer")
	}
	h := startCluster(t, Options{Nodes: 3, GPUs: 1, Seed: 2})
	c := func(i int) *api.Client { return h.members[i].client }
	ctx := context.Background()
	held := holdEveryGPU(t, h)
	if _, err := c(1).Release(ctx, api.ReleaseRequest{IDs: []string{held[1].ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see node02's GPU free", func() bool {
		b, err := c(0).Board(ctx)
		if err != nil {
			return false
		}
		for _, n := range b.Nodes {
			if n.Name == "node02" {
				return len(n.GPUs) == 1 && n.GPUs[0].Lease == nil
			}
		}
		return false
	})
	// node02 hears everyone; nobody hears node02: not its answers, not its
	// gossip.
	h.net.oneWay("node02", "node01")
	h.net.oneWay("node02", "node03")
	sub, err := c(0).Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, sub.ID+" to start on node02", func() bool {
		return len(runsOf(ctx, h, "node02")) == 1
	})
	// Then node02 stops altogether, as a paused agent does, and a second
	// GPU comes free: a scheduler that took the silence for a refusal
	// starts the request there too.
	h.net.isolate("node02", true)
	if _, err := c(2).Release(ctx, api.ReleaseRequest{IDs: []string{held[2].ID}}); err != nil {
		t.Fatal(err)
	}
	poll.Never(t, 8*time.Second, sub.ID+" runs on node03 too while node02 is silent", func() bool {
		return len(runsOf(ctx, h, "node03")) > 0
	})
	h.net.isolate("node02", false)
	h.net.heal()
	poll.Never(t, 4*time.Second, sub.ID+" runs on node03 too once node02 is heard", func() bool {
		return len(runsOf(ctx, h, "node03")) > 0
	})
	agenttest.Eventually(t, 10*time.Second, "its origin to know it runs", func() bool {
		q, err := c(0).Queue(ctx)
		return err == nil && (len(q.Entries) == 0 || len(q.Entries) == 1 && q.Entries[0].Running)
	})
	if r2, r3 := runsOf(ctx, h, "node02"), runsOf(ctx, h, "node03"); len(r2) != 1 || len(r3) != 0 {
		t.Errorf("after the heal %s runs as %v on node02 and %v on node03; want once, on node02", sub.ID, r2, r3)
	}
}

// holdEveryGPU claims each member's GPU 0 for an hour, through its own
// agent, so a queued request must wait for one to come free.
func holdEveryGPU(t *testing.T, h *harness) []api.ClaimResponse {
	t.Helper()
	var held []api.ClaimResponse
	for _, m := range h.members {
		l, err := m.client.Claim(context.Background(), api.ClaimRequest{GPUs: []int{0}, Duration: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}

// runsOf lists the queued runs node's agent says it holds.
func runsOf(ctx context.Context, h *harness, node string) []string {
	for _, m := range h.members {
		if m.name != node {
			continue
		}
		b, err := m.client.WithoutRetry().Board(ctx)
		if err != nil {
			return nil
		}
		var out []string
		for _, n := range b.Nodes {
			if n.Name != node {
				continue
			}
			for _, g := range n.GPUs {
				if g.Lease != nil && g.Lease.Entry != "" {
					out = append(out, g.Lease.ID)
				}
			}
		}
		return out
	}
	return nil
}
