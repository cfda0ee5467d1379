package agent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// migQueueCluster is node01 with an A100 split 3g.40gb+2g.20gb+1g.10gb and
// a whole A100, in pool a100 (max_gpus = 1), and node02 with an L4 outside
// any pool, where the requests are queued.
func migQueueCluster(t *testing.T, sched queue.SchedConfig) []*agenttest.Node {
	t.Helper()
	policy := lease.DefaultPolicy()
	policy.Pools = lease.Pools{"a100": {MaxGPUs: 1}}
	return agenttest.Cluster(t, agenttest.ClusterOptions{
		Specs:  []string{"1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB", "1xL4"},
		Tags:   [][]string{{"a100"}},
		Policy: policy,
		Sched:  sched,
		Users:  holdUsers,
		Quiet:  true,
	})
}

// entryLease finds the granted lease (whole or part of a GPU) started for
// queue entry id, as the board of n shows it.
func entryLease(n *agenttest.Node, id string) *lease.Lease {
	for _, bn := range n.Board().Nodes {
		for _, g := range bn.GPUs {
			held := g.Shares
			if g.Lease != nil {
				held = append([]lease.Lease{*g.Lease}, held...)
			}
			for i := range held {
				if strings.HasPrefix(held[i].Entry, id+"#") && held[i].ReservedUntil.IsZero() {
					return &held[i]
				}
			}
		}
	}
	return nil
}

// waitingFor is why entry id waits in n's queue ("" when it is not there).
func waitingFor(t *testing.T, n *agenttest.Node, id string) string {
	t.Helper()
	q, err := n.Me().Queue(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range q.Entries {
		if e.ID == id {
			return e.Waiting
		}
	}
	return ""
}

// A MIG instance is queued like any request: `run --queue --mig 3g.40gb`
// waits while the instance is held (saying so), other requests start past
// it, and it starts on the instance as soon as its holder lets it go. A
// pool's max_gpus counts the share of the GPU an instance holds.
func TestQueuedMIGStartsWhenInstanceFrees(t *testing.T) {
	t.Parallel()
	nodes := migQueueCluster(t, queue.SchedConfig{})
	inst := map[string]string{}
	for _, d := range nodes[0].Board().Nodes[0].GPUs[0].MIGDevices {
		inst[d.Profile] = d.UUID
	}
	alice, bob := nodes[1].As(holdAlice), nodes[1].As(holdBob)
	held, err := nodes[0].As(holdAlice).Claim(ctx(t), api.ClaimRequest{MIG: "3g.40gb"})
	if err != nil || held.MIG != inst["3g.40gb"] {
		t.Fatalf("alice's 3g.40gb: %+v, %v", held, err)
	}

	// Refused at submit: what no node has, and a gang of instances.
	for _, tt := range []struct {
		req        api.ClaimRequest
		nodes, per int
		want       string
	}{
		{api.ClaimRequest{MIG: "7g.80gb", Duration: "1h"}, 0, 0, "no node has a MIG instance 7g.80gb (node01 has 3g.40gb"},
		{api.ClaimRequest{MIG: "3g.40gb", Count: 2, Duration: "1h"}, 0, 0, "cannot be a gang or take -g N"},
		{api.ClaimRequest{MIG: "3g.40gb", Duration: "1h", Run: &api.RunSpec{Command: []string{"true"}}}, 2, 1, "cannot be a gang or take -g N"},
		{api.ClaimRequest{MIG: "3g.40gb", Mem: "10G", Duration: "1h"}, 0, 0, "not both"},
	} {
		_, err := bob.Submit(ctx(t), api.SubmitRequest{Claim: tt.req, Nodes: tt.nodes, GPUsPerNode: tt.per})
		if refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("submit %+v: %v, want %q", tt.req, err, tt.want)
		}
	}

	// bob's 3g.40gb waits for alice's; his 1g.10gb starts past it.
	big, err := bob.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{MIG: "3g.40gb", Duration: "1h"}})
	if err != nil {
		t.Fatalf("bob queues a 3g.40gb: %v", err)
	}
	agenttest.Eventually(t, 10*time.Second, "the 3g.40gb to wait, saying why", func() bool {
		return strings.Contains(waitingFor(t, nodes[1], big.ID), "needs a MIG instance 3g.40gb, none free")
	})
	small, err := bob.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{MIG: "1g.10gb", Duration: "1h"}})
	if err != nil {
		t.Fatalf("bob queues a 1g.10gb: %v", err)
	}
	agenttest.Eventually(t, 10*time.Second, "the 1g.10gb to start on its instance", func() bool {
		l := entryLease(nodes[1], small.ID)
		return l != nil && l.MIG == inst["1g.10gb"] && l.User == "bob" && l.Node == "node01"
	})

	// Pool a100 allows one GPU a person: alice's 3g.40gb counts about
	// half, so her queued 2g.20gb (a quarter) starts, and a whole A100 then
	// waits (the simulated instances hold 0.74 of the GPU together).
	mid, err := alice.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{MIG: "2g.20gb", Duration: "1h"}})
	if err != nil {
		t.Fatalf("alice queues a 2g.20gb: %v", err)
	}
	agenttest.Eventually(t, 10*time.Second, "alice's 2g.20gb to start within pool a100's max_gpus", func() bool {
		l := entryLease(nodes[1], mid.ID)
		return l != nil && l.MIG == inst["2g.20gb"]
	})
	whole, err := alice.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", Tags: []string{"a100"}}})
	if err != nil {
		t.Fatalf("alice queues a whole A100: %v", err)
	}
	agenttest.Eventually(t, 10*time.Second, "the whole A100 to wait on the pool, counting parts", func() bool {
		return strings.Contains(waitingFor(t, nodes[1], whole.ID), "pool a100 allows 1 GPU per person and alice holds 0.74 there")
	})

	// A direct claim counts the same: the pool refuses alice a whole GPU.
	_, err = nodes[0].As(holdAlice).Claim(ctx(t), api.ClaimRequest{Count: 1, Tags: []string{"a100"}})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "pool a100 allows 1 GPU per person and you hold 0.74 there: ask for at most 0.26 more there") {
		t.Errorf("alice's direct -g 1 in pool a100 holding two instances: %v, want the pool's limit counting their shares", err)
	}

	// alice lets her 3g.40gb go: bob's queued one starts on it.
	if _, err := nodes[0].As(holdAlice).Release(ctx(t), api.ReleaseRequest{IDs: []string{held.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "bob's queued 3g.40gb to start on the freed instance", func() bool {
		l := entryLease(nodes[1], big.ID)
		return l != nil && l.MIG == inst["3g.40gb"] && l.User == "bob"
	})
}

// A queued MIG or budget request reclaims part of a GPU as a queued
// whole-GPU request reclaims a GPU: an idle lease (after IdleReclaimAfter)
// or, for someone within quota, a borrowed one; the holder is told why and
// keeps it for the grace, then the waiting request gets the part. A queued
// whole-GPU request reclaims the budgets on a shared GPU the same way.
func TestQueuedPartsReclaim(t *testing.T) {
	t.Parallel()
	idle := queue.SchedConfig{IdleReclaimAfter: 300 * time.Millisecond}
	quota := queue.SchedConfig{IdleReclaimAfter: time.Hour, Quotas: map[string]int{"light": 1}}
	const mig, h100 = "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb", "1xH100-80GB"
	for _, tt := range []struct {
		name      string
		sim       string
		sched     queue.SchedConfig
		hold, ask api.ClaimRequest
		reason    string
	}{
		{"mig idle", mig, idle, api.ClaimRequest{MIG: "3g.40gb"}, api.ClaimRequest{MIG: "3g.40gb"}, lease.PreemptIdle},
		{"mig quota", mig, quota, api.ClaimRequest{MIG: "3g.40gb"}, api.ClaimRequest{MIG: "3g.40gb"}, lease.PreemptQuota},
		{"budget idle", h100, idle, api.ClaimRequest{Mem: "50G"}, api.ClaimRequest{Mem: "40G"}, lease.PreemptIdle},
		{"budget quota", h100, quota, api.ClaimRequest{Mem: "50G"}, api.ClaimRequest{Mem: "40G"}, lease.PreemptQuota},
		{"budgets for a whole GPU, idle", h100, idle, api.ClaimRequest{Mem: "20G"}, api.ClaimRequest{Count: 1}, lease.PreemptIdle},
		{"budgets for a whole GPU, quota", h100, quota, api.ClaimRequest{Mem: "20G"}, api.ClaimRequest{Count: 1}, lease.PreemptQuota},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := lease.DefaultPolicy()
			p.PreemptGrace = time.Second
			p.IdleAfter = 200 * time.Millisecond
			fake := clock.NewFake(time.Now())
			n := agenttest.Start(t, agenttest.Options{Sim: tt.sim, Policy: p, Sched: tt.sched, Users: testUsers, Clock: fake})
			held, err := n.As(heavy).Claim(ctx(t), tt.hold)
			if err != nil {
				t.Fatal(err)
			}
			// The lease sits idle: the board flags it (quiet for IdleAfter,
			// 200ms, when the agent last judged it), and the clock moves on
			// past IdleReclaimAfter (300ms) from there, so the pass Submit
			// kicks finds it idle long enough to reclaim.
			from := fake.Now()
			var flagged time.Time
			agenttest.Tick(t, fake, 100*time.Millisecond, 15*time.Second, "the lease to sit idle for 600ms", func() bool {
				if flagged.IsZero() && slices.Contains(n.BoardAs(heavy).Nodes[0].GPUs[0].Flags, lease.FlagIdle) {
					flagged = fake.Now()
				}
				return !flagged.IsZero() && fake.Now().Sub(flagged) >= 200*time.Millisecond && fake.Now().Sub(from) >= 600*time.Millisecond
			})
			s, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: tt.ask})
			if err != nil {
				t.Fatal(err)
			}
			var warned time.Time
			preempted := func(withNotice bool) bool {
				b := n.BoardAs(heavy)
				for _, l := range b.Nodes[0].GPUs[0].Shares {
					if l.ID == held.ID && !l.PreemptedAt.IsZero() {
						warned = l.PreemptedAt
						return l.PreemptReason == tt.reason && (!withNotice || len(b.Notices) > 0 && strings.Contains(strings.Join(b.Notices, "\n"), tt.reason))
					}
				}
				return false
			}
			// The preemption is stamped with the clock's time before it is
			// written and shown (a write that takes real time on a loaded
			// machine): wait for it with the clock held, or the clock runs
			// through the whole 1 s grace during the write and the lease
			// ends before the board ever shows it preempted. The notice
			// reaches the board through the event log's writer a moment
			// after the preemption (real time too): held for the same
			// reason.
			agenttest.Eventually(t, 15*time.Second, "the lease to be preempted ("+tt.reason+")", func() bool { return preempted(false) })
			agenttest.Eventually(t, 15*time.Second, "the lease to be warned ("+tt.reason+")", func() bool { return preempted(true) })
			agenttest.Tick(t, fake, 100*time.Millisecond, 15*time.Second, "the waiting request to get the reclaimed part", func() bool {
				l := entryLease(n, s.ID)
				return l != nil && l.User == "light" && l.MIG == held.MIG && (tt.ask.Mem == "" || l.MemMiB == 40<<10)
			})
			if d := fake.Now().Sub(warned); d < time.Second {
				t.Errorf("the lease was reclaimed %s after its warning, want the 1s grace", d)
			}
		})
	}
}

// An older agent would read a queued MIG request as one whole GPU, so none
// is queued while one is live.
func TestQueuedMIGWaitsForEveryNodeToUpgrade(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb", "1xL40S"}, Quiet: true,
		Protocols: []int{0, peer.MinVersion}})
	_, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{MIG: "3g.40gb", Duration: "1h"}})
	if err == nil || !strings.Contains(err.Error(), "node02 runs an older dibs") {
		t.Fatalf("a queued MIG instance with an older node live: %v, want a refusal naming node02", err)
	}
	if q, _ := nodes[0].Client.Queue(ctx(t)); len(q.Entries) != 0 {
		t.Errorf("the refused request left %d entries", len(q.Entries))
	}
}
