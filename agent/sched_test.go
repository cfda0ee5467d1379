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
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Simulated colleagues: the agent's in-process API with their identity, as
// the SSH front door and forwarded requests use it.
var (
	heavy = lease.Caller{UID: 30001, User: "heavy"}
	light = lease.Caller{UID: 30002, User: "light"}
	// testUsers makes heavy and light accounts every node knows.
	testUsers = agenttest.Users{"heavy": 30001, "light": 30002}
)

func queueIDs(q api.Queue) []string {
	var ids []string
	for _, e := range q.Entries {
		if !e.Running {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

func TestQueueSameOrderEverywhereAndFairShare(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	// heavy has used GPUs; light has not.
	var ids []string
	for _, n := range nodes {
		r, err := n.As(heavy).Claim(ctx(t), api.ClaimRequest{Node: n.Opts.Name, Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// Some GPU-seconds to count: every node's view holds heavy's usage.
	for _, n := range nodes {
		agenttest.Eventually(t, 15*time.Second, n.Opts.Name+" to count heavy's GPU-seconds", func() bool {
			u, err := n.As(heavy).Usage(ctx(t), "1h")
			if err != nil {
				return false
			}
			for _, x := range u.Users {
				if x.User == "heavy" {
					return x.Decayed > 0
				}
			}
			return false
		})
	}
	// heavy submits first, at node02; light later, at node03.
	h, err := nodes[1].As(heavy).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := nodes[2].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{l.ID, h.ID}
	for _, n := range nodes {
		n := n
		agenttest.Eventually(t, 15*time.Second, n.Opts.Name+" to order light before heavy", func() bool {
			got := queueIDs(n.Queue())
			return strings.Join(got, ",") == strings.Join(want, ",")
		})
	}
	// One GPU frees: light (less usage) gets it, though heavy asked first.
	if _, err := nodes[0].As(heavy).Release(ctx(t), api.ReleaseRequest{IDs: []string{ids[0]}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "light's request to start first", func() bool {
		for _, e := range nodes[1].Queue().Entries {
			if e.ID == l.ID && e.Running {
				return true
			}
		}
		return false
	})
	u, err := nodes[0].As(heavy).Usage(ctx(t), "1h")
	if err != nil {
		t.Fatal(err)
	}
	factors := map[string]float64{}
	for _, x := range u.Users {
		factors[x.User] = x.FairShare
	}
	if !(factors["heavy"] < factors["light"]) {
		t.Errorf("fair-share factors %v: heavy should be below light", factors)
	}
}

func TestBackfillStartsShortJobWithoutDelayingTheGang(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	// Each node has one GPU free; one lease ends in 1h on each.
	for _, n := range nodes {
		if _, err := n.As(heavy).Claim(ctx(t), api.ClaimRequest{Node: n.Opts.Name, Count: 1, Duration: "1h"}); err != nil {
			t.Fatal(err)
		}
	}
	// The gang needs both GPUs of both nodes: it waits about an hour.
	g, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "2h", Run: &api.RunSpec{Command: []string{"sleep", "60"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// A 30-minute job ends before the gang could start: it backfills.
	short, err := nodes[0].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "30m"}})
	if err != nil {
		t.Fatal(err)
	}
	// A 3-hour job would delay the gang: it waits.
	long, err := nodes[1].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "3h"}})
	if err != nil {
		t.Fatal(err)
	}
	running := func(n *agenttest.Node, id string) bool {
		for _, e := range n.Queue().Entries {
			if e.ID == id {
				return e.Running
			}
		}
		return false
	}
	agenttest.Eventually(t, 15*time.Second, "the short job to backfill", func() bool { return running(nodes[0], short.ID) })
	// Proof the scheduler weighed the long job with node02's GPU free: a
	// second 30-minute job of light's, submitted at node02 after it (so
	// behind it in light's order, and never seen without it), backfills on
	// that GPU. Had the pass started the 3h job, no GPU would be left for it.
	probe, err := nodes[1].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "30m"}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "the second short job to backfill on node02", func() bool { return running(nodes[1], probe.ID) })
	if running(nodes[1], long.ID) {
		t.Errorf("the 3h job started and would delay the gang")
	}
	if running(nodes[1], g.ID) {
		t.Errorf("the gang started early")
	}
}

// TestCompetingGangsBothRunNeverPartially submits two 2-node gangs over
// three nodes, where only one fits at a time: both must run, one after the
// other (neither holding part of the cluster while waiting for the rest,
// which would deadlock them), and each as a whole — its two ranks running
// at the same time. Each rank proves the last the way a distributed job
// does: it waits at a rendezvous for the other rank to have started. (The
// nemesis checks partiality under faults, from every node's own record.)
func TestCompetingGangsBothRunNeverPartially(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	dir := agenttest.PublicDir(t)
	var want []string
	for i, n := range nodes[:2] {
		g := filepath.Join(dir, "g"+string(rune('a'+i)))
		// Up to 10 s for the other rank; a rank alone never meets it.
		rank := `touch ` + g + `$NODE_RANK; peer=` + g + `$((1-NODE_RANK)); i=0
while [ ! -e $peer ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
[ -e $peer ] && touch ` + g + `$NODE_RANK.met`
		if _, err := n.Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{
			Command: []string{"sh", "-c", rank}}}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, g+"0.met", g+"1.met")
	}
	agenttest.Eventually(t, 20*time.Second, "both gangs to run, each rank meeting the other", func() bool {
		for _, f := range want {
			if _, err := os.Stat(f); err != nil {
				return false
			}
		}
		return true
	})
}

func TestSchedulerFailover(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S", "1xL40S"}, Quiet: true, Users: testUsers})
	if got := nodes[1].Queue().Scheduler; got != "node01" {
		t.Fatalf("scheduler = %s, want node01 (lowest name)", got)
	}
	r, err := nodes[1].As(heavy).Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	nodes[2].As(heavy).Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 1})
	s, err := nodes[2].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Node: "node02"}})
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].Crash()
	agenttest.Eventually(t, 30*time.Second, "node02 to take over scheduling", func() bool {
		return nodes[2].Queue().Scheduler == "node02"
	})
	// node03 submitted the entry and node03 saw node02 take over: node02
	// itself may hear of the entry by gossip a moment later.
	var ids []string
	poll.Wait(15*time.Second, func() bool {
		ids = queueIDs(nodes[1].Queue())
		return len(ids) == 1 && ids[0] == s.ID
	})
	if len(ids) != 1 || ids[0] != s.ID {
		t.Fatalf("queue after the scheduler died = %v, want %s kept", ids, s.ID)
	}
	if _, err := nodes[1].As(heavy).Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "the new scheduler to start the entry", func() bool {
		for _, e := range nodes[2].Queue().Entries {
			if e.ID == s.ID {
				return e.Running
			}
		}
		return false
	})
}

// TestPreemptionForQuotaSignalsAndWaitsTheGrace runs on a fake clock: the
// borrowed lease is signalled when light's request arrives and ends only
// when the grace has run by the agent's clock.
func TestPreemptionForQuotaSignalsAndWaitsTheGrace(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	p := lease.DefaultPolicy()
	p.PreemptGrace = 1500 * time.Millisecond
	sched := queue.SchedConfig{Quotas: map[string]int{"light": 2}}
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Policy: p, Sched: sched, Users: testUsers, Clock: fake})
	dir := agenttest.PublicDir(t)
	got := filepath.Join(dir, "usr1")
	ready := filepath.Join(dir, "ready")
	// I have no quota, so my run borrows both GPUs.
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Run: &api.RunSpec{
		Command: []string{"sh", "-c", `trap 'echo usr1 > ` + got + `' USR1; touch ` + ready + `; while :; do sleep 0.1; done`}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "my job to set its trap", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	b, _ := n.Client.Board(ctx(t))
	if l := b.Nodes[0].GPUs[0].Lease; l == nil || !l.Borrowed {
		t.Fatalf("my lease beyond quota = %+v, want borrowed", l)
	}
	// light is within quota and waits: my borrowed lease is preempted.
	s, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler's pass on the arrival preempts at once; the clock
	// stands still while the signal travels, so the grace cannot run out.
	var preempted time.Time
	agenttest.Eventually(t, 5*time.Second, "SIGUSR1 to reach my session", func() bool {
		if l := leaseOn(n.Board(), "node01", 0); l != nil && l.ID == r.ID {
			preempted = l.PreemptedAt
		}
		body, _ := os.ReadFile(got)
		return strings.Contains(string(body), "usr1") && !preempted.IsZero()
	})
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "light's request to start after the grace", func() bool {
		for _, e := range n.Queue().Entries {
			if e.ID == s.ID && e.Running {
				return true
			}
		}
		return false
	})
	if d := fake.Now().Sub(preempted); d < p.PreemptGrace {
		t.Errorf("the borrower got %s between the preemption and the end, want the 1.5s grace", d)
	}
	b, _ = n.Client.Board(ctx(t))
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil && g.Lease.ID == r.ID {
			t.Errorf("my preempted lease %s is still there", r.ID)
		}
	}
	// The notice goes through my own delivery queue, which may run behind
	// the lease on a loaded machine.
	agenttest.Eventually(t, 10*time.Second, "a notice to tell me why", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return strings.Contains(strings.Join(b.Notices, "\n"), "beyond your quota")
	})
	if got := historyStates(t, n, r.ID); !slices.Equal(got, []lease.RunState{lease.StatePreempted}) {
		t.Errorf("dibs history says my run ended %v, want [preempted]", got)
	}
}

// TestIdleLeaseReclaimedWhenSomeoneWaits runs on a fake clock: the lease
// sits idle past the threshold, the waiting request warns it and gets its
// GPU after the grace, all by the agent's clock, in milliseconds.
func TestIdleLeaseReclaimedWhenSomeoneWaits(t *testing.T) {
	t.Parallel()
	p := lease.DefaultPolicy()
	p.PreemptGrace = time.Second
	p.IdleAfter = 200 * time.Millisecond
	sched := queue.SchedConfig{IdleReclaimAfter: 300 * time.Millisecond}
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Policy: p, Sched: sched, Users: testUsers, Clock: fake})
	idle, err := n.As(heavy).Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Idle past the threshold: no process, no load, for 600ms of its clock.
	from := fake.Now()
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the lease to sit idle for 600ms", func() bool {
		b := n.BoardAs(heavy)
		return fake.Now().Sub(from) >= 600*time.Millisecond && slices.Contains(b.Nodes[0].GPUs[0].Flags, lease.FlagIdle)
	})
	s, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var warned time.Time
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the idle lease to be warned", func() bool {
		l := n.BoardAs(heavy).Nodes[0].GPUs[0].Lease
		if l != nil && l.ID == idle.ID && !l.PreemptedAt.IsZero() && l.PreemptReason == "idle" {
			warned = l.PreemptedAt
			return true
		}
		return false
	})
	// The notice goes through the holder's own delivery queue, which may
	// run behind the lease on a loaded machine: looked for on its own.
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the holder to be told the lease sits idle", func() bool {
		return strings.Contains(strings.Join(n.BoardAs(heavy).Notices, "\n"), "idle")
	})
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the waiting request to get the reclaimed GPU", func() bool {
		for _, e := range n.Queue().Entries {
			if e.ID == s.ID && e.Running {
				return true
			}
		}
		return false
	})
	if d := fake.Now().Sub(warned); d < time.Second {
		t.Errorf("the idle lease was reclaimed %s after its warning, want the 1s grace", d)
	}
	if got := historyStates(t, n, idle.ID); !slices.Equal(got, []lease.RunState{lease.StateReclaimed}) {
		t.Errorf("dibs history says the idle lease ended %v, want [reclaimed]", got)
	}
}
