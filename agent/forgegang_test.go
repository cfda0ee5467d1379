package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// forgerAgent is the Delegate of a keyed gossip peer that publishes no
// state of its own.
type forgerAgent struct{}

func (forgerAgent) LocalState() gossip.NodeState { return gossip.NodeState{Leases: []lease.Lease{}} }
func (forgerAgent) HandleRequest(context.Context, string, gossip.Request) gossip.Response {
	return gossip.Response{ErrCode: refusal.CodeInvalid, ErrMsg: "a forger serves nothing"}
}
func (forgerAgent) ClusterChanged() {}

// TestForgedNodeStateEndsNoGang (issue 31, fourth round's broken 2, at the
// agents): a peer holding the cluster key forges, in node02's name, a
// lease section of its real boot with a huge sequence showing another
// user's lease, then a leave, then a suspicion, while a 2-node gang runs on
// node01 and node02. After each, within 2 s every agent's board shows
// node02 alive with its real leases (the gang's rank, no forged lease), the
// gang runs on with the same rank leases, and a later real claim and
// release on node02 shows on every board: the forged sequence keeps none
// of node02's updates out.
func TestForgedNodeStateEndsNoGang(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	key := []byte("forgegang-forgegang-forgegang-32")
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "1xL40S"}, Quiet: true, Key: key})

	// node03 is busy, so the gang lands on node01 and node02.
	if _, err := nodes[2].Client.Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 1}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "node01 to see node03 busy", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		return leaseOn(b, "node03", 0) != nil
	})
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Claim: api.ClaimRequest{Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ranks map[string]string
	agenttest.Eventually(t, 45*time.Second, "the gang to run on node01 and node02, on every board", func() bool {
		for _, n := range nodes {
			b, _ := n.Client.Board(ctx(t))
			got := gangRanks(b, s.ID)
			if len(got) != 2 || got["node01"] == "" || got["node02"] == "" {
				return false
			}
			ranks = got
		}
		return true
	})

	// The forger: a gossip peer with the key, joined to the agents.
	fc, err := gossip.New(gossip.Config{NodeName: "forger", BindAddr: "127.0.0.1", ClusterName: "test", Key: key,
		Join: []string{nodes[0].Agent.GossipAddr()}, Protocol: uint8(peer.Version), ProtocolMin: uint8(peer.MinVersion),
		BootID: "forgerboot", BootedAt: time.Now()}, forgerAgent{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.Shutdown() })
	var real gossip.NodeState
	agenttest.Eventually(t, 30*time.Second, "the forger to hold node02's leases", func() bool {
		p, ok := fc.Peer("node02")
		real = p.NodeState
		return ok && p.State == gossip.StateAlive && p.HasState && len(p.NodeState.Leases) > 0
	})
	// ahead is a sequence minutes ahead of node02's own (which follows its
	// boot's age in milliseconds), within what the agents accept.
	ahead := func() uint64 {
		return uint64(time.Since(real.BootedAt)/time.Millisecond) + uint64(5*time.Minute/time.Millisecond)
	}

	// undone waits until, on every board, node02 is alive with the gang's
	// rank and no forged lease, and the gang runs on with the same ranks.
	undone := func(what string) {
		t.Helper()
		at := time.Now()
		var why string
		ok := func() bool {
			for _, n := range nodes {
				b, err := n.Client.Board(ctx(t))
				if err != nil {
					why = fmt.Sprintf("%s's board: %v", n.Opts.Name, err)
					return false
				}
				if st := nodeState(b, "node02"); st != api.NodeAlive {
					why = fmt.Sprintf("%s shows node02 %s", n.Opts.Name, st)
					return false
				}
				for _, g := range []int{0, 1} {
					if l := leaseOn(b, "node02", g); l != nil && l.User == "mallory" {
						why = fmt.Sprintf("%s shows the forged lease %s of mallory on node02 GPU %d", n.Opts.Name, l.ID, g)
						return false
					}
				}
				if got := gangRanks(b, s.ID); got["node01"] != ranks["node01"] || got["node02"] != ranks["node02"] {
					why = fmt.Sprintf("%s shows the gang's ranks %v, want %v", n.Opts.Name, got, ranks)
					return false
				}
			}
			st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID)
			if err != nil || st.State != queue.EntryRunning {
				why = fmt.Sprintf("the gang is %+v (%v), want running", st, err)
				return false
			}
			return true
		}
		// Half a second at least: the forgery may not have reached every
		// agent when first checked, and an undone forgery must stay undone.
		if !poll.WaitEvery(20*time.Millisecond, 2*time.Second, func() bool { return time.Since(at) >= 500*time.Millisecond && ok() }) {
			t.Fatalf("2 s after %s: %s", what, why)
		}
	}
	// later makes a real change on node02 (a claim of its free GPU, then
	// its release) and waits until every board shows each.
	later := func(what string) {
		t.Helper()
		r, err := nodes[1].Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1, Note: "after the " + what})
		if err != nil {
			t.Fatalf("claim node02's free GPU after %s: %v", what, err)
		}
		shows := func(want bool) func() bool {
			return func() bool {
				for _, n := range nodes {
					b, _ := n.Client.Board(ctx(t))
					if l := leaseOn(b, "node02", r.GPUs[0]); (l != nil && l.ID == r.ID) != want {
						return false
					}
				}
				return true
			}
		}
		agenttest.Eventually(t, 2*time.Second, fmt.Sprintf("every board to show node02's claim %s made after %s", r.ID, what), shows(true))
		if _, err := nodes[1].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
			t.Fatalf("release %s: %v", r.ID, err)
		}
		agenttest.Eventually(t, 2*time.Second, fmt.Sprintf("every board to show node02's release of %s made after %s", r.ID, what), shows(false))
	}

	// (a) A lease section of node02's real boot, with mallory's lease on
	// both its GPUs: the attack as found (2^60), then as far ahead as the
	// agents accept.
	forged := lease.Lease{ID: lease.LeaseID("node02", 7), Node: "node02", GPUs: []int{0, 1}, User: "mallory", UID: 4242,
		Token: 7, Kind: lease.KindInteractive, Note: "forged", StartedAt: time.Now(), ExpiresAt: time.Now().Add(4 * time.Hour),
		Session: "dibs-" + lease.LeaseID("node02", 7)}
	for _, seq := range []uint64{1 << 60, ahead()} {
		if err := fc.ForgeLeases("node02", real.BootID, real.BootedAt, seq, []lease.Lease{forged}); err != nil {
			t.Fatal(err)
		}
	}
	undone("a forged lease section of node02")
	later("forged lease section")

	// (b) A leave of node02, as v0.1.0 sends one and with a later sequence.
	if err := fc.ForgeLeave("node02", real.BootID, real.BootedAt, 0); err != nil {
		t.Fatal(err)
	}
	if err := fc.ForgeLeave("node02", real.BootID, real.BootedAt, ahead()); err != nil {
		t.Fatal(err)
	}
	undone("a forged leave of node02")
	later("forged leave")

	// (c) A suspicion of node02.
	if err := fc.ForgeSuspect("node02", real.BootID); err != nil {
		t.Fatal(err)
	}
	undone("a forged suspicion of node02")
	later("forged suspicion")
	// node02's agent then restarts (it steps out without a leave): every
	// board shows it back, and the gang still runs on the same rank
	// leases. A forged leave that had stood would show it left, and a
	// node that left for good ends its gangs' ranks at once.
	nodes[1].Restart()
	var why string
	back := func() bool {
		for _, n := range nodes {
			b, _ := n.Client.Board(ctx(t))
			if got := gangRanks(b, s.ID); nodeState(b, "node02") != api.NodeAlive || got["node01"] != ranks["node01"] || got["node02"] != ranks["node02"] {
				why = fmt.Sprintf("%s shows node02 %s and the gang's ranks %v, want alive and %v", n.Opts.Name, nodeState(b, "node02"), got, ranks)
				return false
			}
		}
		st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID)
		why = fmt.Sprintf("the gang is %+v (%v), want running", st, err)
		return err == nil && st.State == queue.EntryRunning
	}
	if !poll.Wait(30*time.Second, back) {
		t.Fatalf("30 s after node02's restart: %s", why)
	}
	if st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID); err != nil || st.State != queue.EntryRunning {
		t.Fatalf("after node02's restart the gang is %+v (%v), want running", st, err)
	}
}
