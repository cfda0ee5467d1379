package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// The cluster of issue 23, as a team would run it: node01 with 4×H100
// tagged h100; node02 with 2×L40S in pool l40s (max_gpus = 1, max_time =
// 2h); node03 with an A100 split 3g.40gb+2g.20gb+1g.10gb and a whole A100,
// in pool a100 open to alice and bob only. carol is outside pool a100.
var (
	holdUsers                     = agenttest.Users{"alice": 2301, "bob": 2302, "carol": 2303}
	holdAlice, holdBob, holdCarol = lease.Caller{UID: 2301, User: "alice"}, lease.Caller{UID: 2302, User: "bob"}, lease.Caller{UID: 2303, User: "carol"}
)

func holdCluster(t *testing.T) []*agenttest.Node {
	t.Helper()
	policy := lease.DefaultPolicy()
	policy.Pools = lease.Pools{
		"l40s": {MaxGPUs: 1, MaxTime: 2 * time.Hour},
		"a100": {Users: []string{"alice", "bob"}},
	}
	return agenttest.Cluster(t, agenttest.ClusterOptions{
		Specs:  []string{"4xH100-80GB", "2xL40S", "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB"},
		Tags:   [][]string{{"h100"}, {"l40s"}, {"a100"}},
		Policy: policy,
		Users:  holdUsers,
		Quiet:  true,
	})
}

// Placement reads every pool's limits before it chooses a node: with four
// free H100s, a claim the l40s pool would refuse lands on an H100, and only
// a request no node can take is refused, with the closest fit's reason.
func TestPlacementHonoursPoolLimits(t *testing.T) {
	t.Parallel()
	nodes := holdCluster(t)
	n := nodes[0]
	claim := func(c lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error) {
		t.Helper()
		return n.As(c).Claim(ctx(t), req)
	}
	// -g 2: the L40S node is the fullest fit, but its pool allows 1.
	r, err := claim(holdCarol, api.ClaimRequest{Count: 2})
	if err != nil || r.Node != "node01" {
		t.Fatalf("carol -g 2 with four free H100s: %+v, %v; want node01", r, err)
	}
	// Two -g 1: the first may take an L40S, the second goes elsewhere.
	first, err := claim(holdCarol, api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatalf("carol's first -g 1: %v", err)
	}
	second, err := claim(holdCarol, api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatalf("carol's second -g 1 (first on %s): %v; want it placed outside the l40s pool", first.Node, err)
	}
	if first.Node == "node02" && second.Node == "node02" {
		t.Errorf("both of carol's GPUs are on the l40s pool's node, over its max_gpus = 1")
	}
	// A 3h claim is over the l40s pool's 2h, so it goes to an H100.
	if r, err := claim(holdBob, api.ClaimRequest{Count: 1, Duration: "3h"}); err != nil || r.Node == "node02" {
		t.Errorf("bob -g 1 --for 3h: %+v, %v; want it outside the l40s pool (max_time 2h)", r, err)
	}
	// A booking of 3h tomorrow: refused by the l40s pool today.
	bk, err := n.As(holdCarol).Book(ctx(t), api.BookRequest{Count: 1, Start: time.Now().Add(24 * time.Hour), Duration: "3h"})
	if err != nil || bk.Node == "node02" {
		t.Errorf("carol book -g 1 --for 3h tomorrow: %+v, %v; want it booked outside the l40s pool", bk, err)
	}
	// (A loaded machine can make a node suspect for a moment: the checks
	// below are about pool limits, so they start from a converged view.)
	agenttest.WaitConverged(t, nodes, 15*time.Second)
	// Asked in pool l40s itself, the pool's limits are the answer, in words
	// that make sense.
	_, err = claim(holdAlice, api.ClaimRequest{Count: 2, Tags: []string{"l40s"}})
	if err == nil || !strings.Contains(err.Error(), "pool l40s allows 1 GPU per person and 2 were asked for: ask for at most 1 there") {
		t.Errorf("alice -g 2 --pool l40s: %v; want the pool's limit of 1 GPU named", err)
	}
	if first.Node == "node02" || second.Node == "node02" {
		_, err = claim(holdCarol, api.ClaimRequest{Count: 1, Tags: []string{"l40s"}})
		if err == nil || !strings.Contains(err.Error(), "you hold 1 there already: release it") {
			t.Errorf("carol -g 1 --pool l40s holding one there: %v; want her told she holds 1 already", err)
		}
	}
	_, err = claim(holdAlice, api.ClaimRequest{Count: 1, Tags: []string{"l40s"}, Duration: "3h"})
	if err == nil || !strings.Contains(err.Error(), "3h is over pool l40s's maximum of 2h") {
		t.Errorf("alice -g 1 --pool l40s --for 3h: %v; want the pool's 2h named", err)
	}
	// A MIG instance no node has is refused, not "wait".
	for _, sel := range []string{"7g.80gb", "0:9"} {
		_, err = claim(holdAlice, api.ClaimRequest{MIG: sel})
		if refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), "no node has a MIG instance "+sel+" (node03: 3g.40gb, 2g.20gb, 1g.10gb)") {
			t.Errorf("--mig %s: %v (code %q); want it refused as invalid, naming what node03 has", sel, err, refusal.CodeOf(err))
		}
	}
	// The queue refuses at submit what pool limits make impossible.
	_, err = n.As(holdAlice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2, Tags: []string{"l40s"}, Duration: "1h"}})
	if err == nil || !strings.Contains(err.Error(), "pool l40s allows 1 GPU per person") {
		t.Errorf("queue -g 2 --pool l40s: %v; want it refused at submit, naming the pool's limit", err)
	}
	// A queued run keeps its time limit (the default 4h here), so a pool
	// with a shorter max_time can never start it: refused, saying what to ask.
	_, err = n.As(holdAlice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Tags: []string{"l40s"}}})
	if err == nil || !strings.Contains(err.Error(), "4h is over pool l40s's maximum of 2h: ask for less (--for 2h)") {
		t.Errorf("queue -g 1 --pool l40s with the default 4h: %v; want it refused at submit, naming --for 2h", err)
	}
	_, err = n.As(holdCarol).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Tags: []string{"a100"}}})
	if err == nil || !strings.Contains(err.Error(), "pool a100 is open to alice, bob only") {
		t.Errorf("carol queue --pool a100: %v; want it refused at submit", err)
	}
	if q := n.Queue(); len(q.Entries) != 0 {
		t.Errorf("queue holds %d entries after refusals; want none", len(q.Entries))
	}
}

// A claim beyond its holder's quota says it borrows, and the board keeps
// the mark.
func TestClaimSaysItBorrows(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB", Users: holdUsers, Quiet: true,
		Sched: queue.SchedConfig{Quotas: map[string]int{"alice": 1}}})
	within, err := n.As(holdAlice).Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil || within.Borrowed || strings.Contains(within.Notice, "borrowed") {
		t.Fatalf("alice's first GPU, within her quota of 1: %+v, %v; want it not borrowed", within, err)
	}
	r, err := n.As(holdAlice).Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Borrowed || !strings.Contains(r.Notice, "this lease is borrowed: it takes you beyond your quota, so it may be preempted") {
		t.Errorf("alice's second GPU, beyond her quota: borrowed %v, notice %q; want it marked and said", r.Borrowed, r.Notice)
	}
	b := n.Board()
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil && g.Lease.ID == r.ID && !g.Lease.Borrowed {
			t.Errorf("the board's lease %s is not marked borrowed", r.ID)
		}
	}
}

// A queued run preempted for someone else goes back in the queue, as SLURM
// requeues a preempted batch job; submitted with --no-requeue it ends.
// Before, a preempted backfilled run without --requeue simply "failed".
func TestPreemptedQueuedRunGoesBackInTheQueue(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	tests := []struct {
		name      string
		noRequeue bool
		wantBack  bool
	}{
		{"default: back in the queue", false, true},
		{"--no-requeue: ends", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := lease.DefaultPolicy()
			p.PreemptGrace = time.Second
			fake := clock.NewFake(time.Now())
			n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Policy: p, Users: testUsers, Clock: fake, Quiet: true,
				Sched: queue.SchedConfig{Quotas: map[string]int{"light": 2}}})
			// I have no quota: my queued run borrows both GPUs.
			mine, err := n.Client.Submit(ctx(t), api.SubmitRequest{NoRequeue: tt.noRequeue, Claim: api.ClaimRequest{Count: 2,
				Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
			if err != nil {
				t.Fatal(err)
			}
			entry := func() (api.QueuedEntry, bool) {
				for _, e := range n.Queue().Entries {
					if e.ID == mine.ID {
						return e, true
					}
				}
				return api.QueuedEntry{}, false
			}
			agenttest.Eventually(t, 10*time.Second, "my queued run to start", func() bool {
				e, ok := entry()
				return ok && e.Running
			})
			// light, within quota, waits for both GPUs: mine is preempted.
			theirs, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2, Duration: "1h"}})
			if err != nil {
				t.Fatal(err)
			}
			agenttest.Tick(t, fake, 100*time.Millisecond, 15*time.Second, "light's request to start after the grace", func() bool {
				for _, e := range n.Queue().Entries {
					if e.ID == theirs.ID && e.Running {
						return true
					}
				}
				return false
			})
			e, back := entry()
			if back != tt.wantBack || back && e.Running {
				t.Errorf("after its preemption my entry is in the queue: %v (running %v); want %v, waiting", back, e.Running, tt.wantBack)
				if evs, err := n.Client.Events(ctx(t), api.EventsRequest{}); err == nil {
					for _, ev := range evs.Events {
						t.Logf("event %s %s %s: %s", ev.Kind, ev.Lease, ev.Reason, ev.Text)
					}
				}
			}
			// Only the default is checked: the ledger row is written by the
			// node that held the attempt, which does not know the entry's
			// --no-requeue, so that attempt is listed "requeued" too (a
			// known mislabel, in the closing note).
			if tt.wantBack {
				if got := historyStates(t, n, mine.ID); !slices.Equal(got, []lease.RunState{lease.StateRequeued}) {
					t.Errorf("dibs history says my queued run's attempt ended %v, want [requeued]", got)
				}
			}
		})
	}
}

// Under the default end_action "warn", a lease past its end keeps its GPU
// only while nobody waits for it: once someone does, it is stopped with a
// notice and ended after the grace, and the waiting request starts.
func TestOverdueLeaseEndsWhenSomeoneWaits(t *testing.T) {
	t.Parallel()
	p := lease.DefaultPolicy()
	p.PreemptGrace = time.Second
	if p.EndAction != lease.ActionWarn {
		t.Fatalf("the default end action is %q; this test is about warn", p.EndAction)
	}
	fake := clock.NewFake(time.Now())
	// bob's job keeps the GPU busy: it is overdue, not idle.
	load := filepath.Join(agenttest.PublicDir(t), "load.json")
	if err := os.WriteFile(load, []byte(`{"gpus":{"0":{"utilization_pct":90,"memory_used_mib":1000,"processes":[{"pid":4242,"user":"bob","uid":2302,"command":"python","used_memory_mib":1000}]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", SimLoad: load, Policy: p, Users: holdUsers, Clock: fake, Quiet: true})
	r, err := n.As(holdBob).Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Duration: "1h", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Tick(t, fake, time.Minute, 10*time.Second, "bob's lease to be overdue", func() bool {
		return fake.Now().After(r.ExpiresAt.Add(5 * time.Minute))
	})
	// Nobody waits: warn keeps it.
	if l := leaseOn(n.Board(), "node01", 0); l == nil || l.ID != r.ID {
		t.Fatalf("bob's overdue lease is gone with nobody waiting: %+v", l)
	}
	s, err := n.As(holdAlice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	// (The simulated process stays on the GPU, so alice's request then
	// waits for it; what matters here is that bob's lease ends.)
	agenttest.Tick(t, fake, 100*time.Millisecond, 15*time.Second, "bob's overdue lease to end once alice waits", func() bool {
		l := leaseOn(n.Board(), "node01", 0)
		return l == nil || l.ID != r.ID
	})
	if q := n.Queue(); len(q.Entries) != 1 || q.Entries[0].ID != s.ID {
		t.Errorf("queue %+v; want alice's request %s", q.Entries, s.ID)
	}
	// The notice goes through bob's own delivery queue, which may run
	// behind the lease on a loaded machine.
	agenttest.Eventually(t, 10*time.Second, "bob to be told why his lease ended", func() bool {
		return strings.Contains(strings.Join(n.BoardAs(holdBob).Notices, "\n"), "is past its end and someone is waiting for its GPUs")
	})
}

// `dibs cancel ID` ends a queued run whether it waits or runs, as scancel
// does: a running one's session is stopped and its lease ends; it is not
// requeued. Before, a running entry was refused ("release its leases
// instead").
func TestCancelEndsARunningQueuedRun(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	p := lease.DefaultPolicy()
	p.PreemptGrace = time.Second
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Policy: p, Quiet: true})
	s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1,
		Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the queued run to start", func() bool {
		q := n.Queue()
		return len(q.Entries) == 1 && q.Entries[0].Running
	})
	if err := n.Client.Cancel(ctx(t), s.ID); err != nil {
		t.Fatalf("cancel of a running queued run: %v; want it ended, as scancel does", err)
	}
	agenttest.Eventually(t, 10*time.Second, "its lease to end and the queue to be empty", func() bool {
		b := n.Board()
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				return false
			}
		}
		return len(n.Queue().Entries) == 0
	})
}

// Quotas count the share of a GPU a part holds: with a quota of one GPU,
// alice's two 20 GiB budgets on an 80 GiB GPU (half a GPU) and a MIG
// instance of 3g.40gb (half of another) borrow nothing; a second whole GPU
// does. Before, each part counted as a whole GPU, so her second budget
// borrowed.
func TestQuotasCountPartsFractionally(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,2xA100-80GB", Users: holdUsers, Quiet: true,
		Sched: queue.SchedConfig{Quotas: map[string]int{"alice": 1}}})
	steps := []struct {
		what     string
		req      api.ClaimRequest
		borrowed bool
	}{
		{"a 20 GiB budget", api.ClaimRequest{Mem: "20G", GPUs: []int{1}}, false},
		{"a second 20 GiB budget", api.ClaimRequest{Mem: "20G", GPUs: []int{1}}, false},
		{"a 3g.40gb MIG instance", api.ClaimRequest{MIG: "3g.40gb"}, false},
		{"a whole GPU", api.ClaimRequest{Count: 1}, true},
	}
	for _, st := range steps {
		r, err := n.As(holdAlice).Claim(ctx(t), st.req)
		if err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if r.Borrowed != st.borrowed {
			t.Errorf("%s: borrowed %v, want %v (quotas count the share of a GPU a part holds)", st.what, r.Borrowed, st.borrowed)
		}
	}
}
