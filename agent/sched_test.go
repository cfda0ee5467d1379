package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
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
	time.Sleep(300 * time.Millisecond) // some GPU-seconds to count
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
		agenttest.Eventually(t, 3*time.Second, n.Opts.Name+" to order light before heavy", func() bool {
			got := queueIDs(n.Queue())
			return strings.Join(got, ",") == strings.Join(want, ",")
		})
	}
	// One GPU frees: light (less usage) gets it, though heavy asked first.
	if _, err := nodes[0].As(heavy).Release(ctx(t), api.ReleaseRequest{IDs: []string{ids[0]}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 3*time.Second, "light's request to start first", func() bool {
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
	agenttest.Eventually(t, 3*time.Second, "the short job to backfill", func() bool {
		for _, e := range nodes[0].Queue().Entries {
			if e.ID == short.ID {
				return e.Running
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond) // give the scheduler every chance to start the long one
	for _, e := range nodes[1].Queue().Entries {
		if e.ID == long.ID && e.Running {
			t.Errorf("the 3h job started and would delay the gang")
		}
		if e.ID == g.ID && e.Running {
			t.Errorf("the gang started early")
		}
	}
}

func TestCompetingGangsBothRunNeverPartially(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	dir := agenttest.PublicDir(t)
	// Two 2-node gangs over three nodes: only one fits at a time.
	var gangs []string
	for i, n := range nodes[:2] {
		s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{
			Command: []string{"sh", "-c", "touch " + filepath.Join(dir, "g"+string(rune('a'+i))) + "$NODE_RANK; sleep 1.5"}}}})
		if err != nil {
			t.Fatal(err)
		}
		gangs = append(gangs, s.ID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// Never a partial gang: each gang holds 0 or 2 nodes' GPUs.
		b, _ := nodes[2].Client.Board(ctx(t))
		per := map[string]int{}
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				if g.Lease != nil && g.Lease.Gang != "" && g.Lease.ReservedUntil.IsZero() {
					per[g.Lease.Gang]++
				}
			}
		}
		for gang, held := range per {
			if held != 4 {
				// Ranks start within a second of each other; allow the window.
				time.Sleep(200 * time.Millisecond)
				b, _ = nodes[2].Client.Board(ctx(t))
				again := 0
				for _, n := range b.Nodes {
					for _, g := range n.GPUs {
						if g.Lease != nil && g.Lease.Gang == gang && g.Lease.ReservedUntil.IsZero() {
							again++
						}
					}
				}
				if again != 4 && again != 0 {
					t.Fatalf("gang %s holds %d GPUs, want 0 or 4", gang, again)
				}
			}
		}
		done := 0
		for _, f := range []string{"ga0", "ga1", "gb0", "gb1"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				done++
			}
		}
		if done == 4 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("both gangs %v did not run within 20s", gangs)
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
	agenttest.Eventually(t, 10*time.Second, "node02 to take over scheduling", func() bool {
		return nodes[2].Queue().Scheduler == "node02"
	})
	if ids := queueIDs(nodes[1].Queue()); len(ids) != 1 || ids[0] != s.ID {
		t.Fatalf("queue after the scheduler died = %v, want %s kept", ids, s.ID)
	}
	if _, err := nodes[1].As(heavy).Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 3*time.Second, "the new scheduler to start the entry", func() bool {
		for _, e := range nodes[2].Queue().Entries {
			if e.ID == s.ID {
				return e.Running
			}
		}
		return false
	})
}

func TestPreemptionForQuotaSignalsAndWaitsTheGrace(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	p := lease.DefaultPolicy()
	p.PreemptGrace = 1500 * time.Millisecond
	sched := lease.SchedConfig{Quotas: map[string]int{"light": 2}}
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Policy: p, Sched: sched, Users: testUsers})
	dir := agenttest.PublicDir(t)
	got := filepath.Join(dir, "usr1")
	// I have no quota, so my run borrows both GPUs.
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Run: &api.RunSpec{
		Command: []string{"sh", "-c", `trap 'date +%s.%N > ` + got + `' USR1; while :; do sleep 0.1; done`}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := n.Client.Board(ctx(t))
	if l := b.Nodes[0].GPUs[0].Lease; l == nil || !l.Borrowed {
		t.Fatalf("my lease beyond quota = %+v, want borrowed", l)
	}
	// light is within quota and waits: my borrowed lease is preempted.
	s, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "SIGUSR1 to reach my session", func() bool {
		return !readTime(got).IsZero()
	})
	signalled := readTime(got)
	var ended time.Time
	agenttest.Eventually(t, 6*time.Second, "light's request to start after the grace", func() bool {
		for _, e := range n.Queue().Entries {
			if e.ID == s.ID && e.Running {
				ended = time.Now()
				return true
			}
		}
		return false
	})
	if d := ended.Sub(signalled); d < 1200*time.Millisecond {
		t.Errorf("the borrower got %s between the signal and the end, want the 1.5s grace", d)
	}
	b, _ = n.Client.Board(ctx(t))
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil && g.Lease.ID == r.ID {
			t.Errorf("my preempted lease %s is still there", r.ID)
		}
	}
	if len(b.Notices) == 0 || !strings.Contains(strings.Join(b.Notices, "\n"), "beyond your quota") {
		t.Errorf("no notice told me why: %v", b.Notices)
	}
}

func TestIdleLeaseReclaimedWhenSomeoneWaits(t *testing.T) {
	t.Parallel()
	p := lease.DefaultPolicy()
	p.PreemptGrace = time.Second
	p.IdleAfter = 200 * time.Millisecond
	sched := lease.SchedConfig{IdleReclaimAfter: 300 * time.Millisecond}
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Policy: p, Sched: sched, Users: testUsers})
	idle, err := n.As(heavy).Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // idle past the threshold: no process, no load
	s, err := n.As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 3*time.Second, "the idle lease to be warned", func() bool {
		b := n.BoardAs(heavy)
		l := b.Nodes[0].GPUs[0].Lease
		return l != nil && l.ID == idle.ID && !l.PreemptedAt.IsZero() && l.PreemptReason == "idle" &&
			len(b.Notices) > 0 && strings.Contains(b.Notices[0], "idle")
	})
	agenttest.Eventually(t, 4*time.Second, "the waiting request to get the reclaimed GPU", func() bool {
		for _, e := range n.Queue().Entries {
			if e.ID == s.ID && e.Running {
				return true
			}
		}
		return false
	})
}
