package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/agent/sched"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/queue"
)

// gangRanks is node -> lease id of each committed rank of entry id.
func gangRanks(b api.Board, id string) map[string]string {
	out := map[string]string{}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, id+"#") && l.ReservedUntil.IsZero() {
				out[n.Name] = l.ID
			}
		}
	}
	return out
}

// TestPreviousReleaseDialectWithGang is the N-1 promise from this release
// on: agents of this release beside agents speaking the previous release's
// protocol (peer.MinVersion, pinned with agent.ClusterSettings.Protocol, as
// strict as v0.1.0 was) form one cluster; a gang placed by a new scheduler
// runs across a new node and an old one; claims cross the versions both
// ways; and a feature of this release is refused, naming the old node,
// until the upgrade has rolled through every node. Upgrading a node the
// gang does not run on leaves the gang as it was.
func TestPreviousReleaseDialectWithGang(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"3xL40S", "3xL40S", "3xL40S"}, Quiet: true,
		Protocols: []int{0, peer.MinVersion, peer.MinVersion}})
	feature := peer.Feature{Name: "a feature of this release (test)", Since: peer.Version}

	// node03 is busy, so the gang lands on node01 (new) and node02 (old).
	busy, err := nodes[2].Client.Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "node02 to see node03 busy", func() bool {
		b, _ := nodes[1].Client.Board(ctx(t))
		return leaseOn(b, "node03", 2) != nil
	})
	s, err := nodes[1].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatalf("submit a gang at the old node: %v", err)
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

	// Claims cross the versions both ways.
	for _, c := range []struct{ at, on int }{{0, 1}, {1, 0}} {
		r, err := nodes[c.at].Client.Claim(ctx(t), api.ClaimRequest{Node: nodes[c.on].Opts.Name, Count: 1})
		if err != nil {
			t.Fatalf("claim at %s on %s: %v", nodes[c.at].Opts.Name, nodes[c.on].Opts.Name, err)
		}
		if _, err := nodes[c.at].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
			t.Fatalf("release %s at %s: %v", r.ID, nodes[c.at].Opts.Name, err)
		}
	}

	// The feature waits for the old nodes, on every node.
	for _, n := range nodes {
		err := n.Agent.Service().Require(feature)
		if err == nil || !strings.Contains(err.Error(), "node02 runs an older dibs (protocol 6): upgrade it first") {
			t.Errorf("Require at %s with node02 and node03 old: %v", n.Opts.Name, err)
		}
	}

	// node03 is upgraded while the gang runs and clients at node01 (new)
	// and node02 (old) claim and release on every node.
	if _, err := nodes[2].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{busy.ID}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		granted int
		refused []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	// The names are read once: node03's restart below replaces its Opts
	// while the clients run.
	names := []string{nodes[0].Opts.Name, nodes[1].Opts.Name, nodes[2].Opts.Name}
	for _, at := range nodes[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				on := names[i%3]
				r, err := at.Client.Claim(context.Background(), api.ClaimRequest{Node: on, Count: 1})
				mu.Lock()
				switch {
				case err == nil:
					granted++
				case strings.Contains(err.Error(), "protocol") || strings.Contains(err.Error(), "unknown field") || strings.Contains(err.Error(), "malformed"):
					refused = append(refused, fmt.Sprintf("claim at %s on %s: %v", at.Opts.Name, on, err))
				}
				mu.Unlock()
				if err == nil {
					at.Client.Release(context.Background(), api.ReleaseRequest{IDs: []string{r.ID}})
				} else {
					time.Sleep(20 * time.Millisecond) // load pacing: a refused client tries again soon, not in a spin on shared cores
				}
			}
		}()
	}
	nodes[2].Opts.Cluster.Protocol = 0
	nodes[2].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	mu.Lock()
	from := granted
	mu.Unlock()
	agenttest.Eventually(t, 30*time.Second, "three claims granted with node03 upgraded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return granted >= from+3
	})
	close(stop)
	wg.Wait()
	t.Logf("%d claims granted at node01 and node02 while node03 was upgraded", granted)
	if len(refused) > 0 || granted == 0 {
		t.Errorf("%d claims granted while node03 was upgraded; refused for a version reason: %q", granted, refused)
	}
	for _, n := range nodes {
		b, _ := n.Client.Board(ctx(t))
		if got := gangRanks(b, s.ID); got["node01"] != ranks["node01"] || got["node02"] != ranks["node02"] {
			t.Errorf("%s shows the gang's ranks as %v after node03's upgrade, want %v", n.Opts.Name, got, ranks)
		}
	}
	r, err := nodes[2].Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1})
	if err != nil {
		t.Fatalf("claim at the upgraded node03 on the old node02: %v", err)
	}
	nodes[2].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}})
	if err := nodes[2].Agent.Service().Require(feature); err == nil || !strings.Contains(err.Error(), "node02 runs an older dibs") {
		t.Errorf("Require with node02 still old: %v", err)
	}

	// The last node is upgraded: the feature may be used everywhere.
	if _, err := nodes[1].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{ranks["node01"], ranks["node02"]}}); err != nil {
		t.Fatalf("release the gang's ranks at the old node: %v", err)
	}
	nodes[1].Opts.Cluster.Protocol = 0
	nodes[1].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	agenttest.Eventually(t, 15*time.Second, "the feature to be allowed on every node", func() bool {
		for _, n := range nodes {
			if n.Agent.Service().Require(feature) != nil {
				return false
			}
		}
		return true
	})
}

// TestPreviousReleaseLeaveIsARestart: v0.1.0 (protocol 6) sent the leave
// notice on every stop, an upgrade's SIGTERM included, so a rolling upgrade
// ended every gang with a rank on the node being swapped. An agent of this
// release takes a protocol-6 node's leave as a restart: the node shows
// restarting, its gang rank holds for the grace, and the event says
// "restarting", never "is left". The same node upgraded to this release
// and told to leave for good (`dibs leave`) fails the gang at once.
func TestPreviousReleaseLeaveIsARestart(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true,
		Protocols: []int{0, peer.MinVersion}, Sched: queue.SchedConfig{LostAfter: 2 * time.Minute}})
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Claim: api.ClaimRequest{Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ranks map[string]string
	agenttest.Eventually(t, 45*time.Second, "the gang to run on node01 and node02", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		ranks = gangRanks(b, s.ID)
		return len(ranks) == 2
	})
	running := func() (bool, string) {
		st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID)
		return err == nil && st.State == queue.EntryRunning, fmt.Sprintf("%+v %v", st, err)
	}
	events := func() []string {
		l, _ := nodes[0].Client.Events(ctx(t), api.EventsRequest{})
		var out []string
		for _, e := range l.Events {
			if e.Kind == event.EventAgentLeave && e.Subject == "node02" && e.Node == "node01" {
				out = append(out, e.Text)
			}
		}
		return out
	}

	// node02 stops as v0.1.0 did: with the leave notice.
	nodes[1].Leave()
	agenttest.Eventually(t, 10*time.Second, "node01 to show the old node02 restarting", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		return nodeState(b, "node02") == api.NodeRestarting
	})
	// An absence: the origin judges its running gangs on every pass
	// (sched.Tick, and at once on a membership change); two passes and
	// more go by without it giving the gang up.
	var st string
	if poll.WaitEvery(200*time.Millisecond, 2*sched.Tick+time.Second, func() bool {
		var ok bool
		ok, st = running()
		return !ok
	}) {
		t.Fatalf("the gang stopped running when the v0.1.0 node02 stopped (its leave is a restart): %s", st)
	}
	// On a loaded machine node01's prober may find node02 silent before
	// its leave notice arrives, and record that first ("not answering"):
	// what must hold is that the stop is recorded as a restart, and never
	// as leaving for good.
	agenttest.Eventually(t, 10*time.Second, "node01 to record node02 restarting", func() bool {
		return slices.ContainsFunc(events(), func(text string) bool { return strings.Contains(text, "the agent on node02 is restarting") })
	})
	for _, text := range events() {
		if strings.Contains(text, "for good") {
			t.Errorf("node01 records node02's stop as %q, want it restarting", text)
		}
	}

	// It comes back, upgraded: the same ranks run.
	nodes[1].Opts.Cluster.Protocol = 0
	nodes[1].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	b, _ := nodes[0].Client.Board(ctx(t))
	if got := gangRanks(b, s.ID); got["node01"] != ranks["node01"] || got["node02"] != ranks["node02"] {
		t.Errorf("after node02's upgrade the gang's ranks are %v, want %v", got, ranks)
	}
	if ok, st := running(); !ok {
		t.Fatalf("the gang is not running after node02's upgrade: %s", st)
	}

	// This release's node leaving for good fails the gang at once, not
	// after the grace (2 minutes).
	seen := len(events())
	nodes[1].Leave()
	agenttest.Eventually(t, 15*time.Second, "the gang to fail at once when node02 leaves for good", func() bool {
		st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID)
		return err == nil && st.State == queue.EntryFailed && strings.Contains(st.Reason, "node02 left the cluster")
	})
	// As above, the prober may record node02 silent first, at load; the
	// leave for good must be recorded after it.
	agenttest.Eventually(t, 10*time.Second, "node01 to record node02 leaving for good", func() bool {
		return slices.ContainsFunc(events()[seen:], func(text string) bool {
			return strings.Contains(text, "the agent on node02 left the cluster for good")
		})
	})
	for _, text := range events()[seen:] {
		if strings.Contains(text, "is restarting") {
			t.Errorf("node01 records node02's leave for good as %q, want it left for good", text)
		}
	}
}

// TestPreviousReleaseLeaveWaitsOutTheGrace is the cost of taking a v0.1.0
// agent's leave as a restart: a v0.1.0 node that really went for good holds
// its gangs for the grace, like a crashed one — and no longer: past it the
// gang fails, naming the node.
func TestPreviousReleaseLeaveWaitsOutTheGrace(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	const grace = 3 * time.Second
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true,
		Protocols: []int{0, peer.MinVersion}, Sched: queue.SchedConfig{LostAfter: grace}})
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Claim: api.ClaimRequest{Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 45*time.Second, "the gang to run on node01 and node02", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		return len(gangRanks(b, s.ID)) == 2
	})
	nodes[1].Leave()
	left := time.Now()
	agenttest.Eventually(t, grace+15*time.Second, "the gang to fail once the old node02 has been away past the grace", func() bool {
		st, err := nodes[0].Client.EntryStatus(ctx(t), s.ID)
		return err == nil && st.State == queue.EntryFailed
	})
	// The grace runs from when node02 was last heard, which comes before
	// its leave by up to a gossip round: half the grace is the floor.
	if took := time.Since(left); took < grace/2 {
		t.Errorf("the gang failed %s after the v0.1.0 node02 left, within the grace (%s)", took, grace)
	}
	st, _ := nodes[0].Client.EntryStatus(ctx(t), s.ID)
	if !strings.Contains(st.Reason, "node node02 has been") || !strings.Contains(st.Reason, "past the 3s grace") {
		t.Errorf("the gang failed with %q, want it lost past the grace on node02", st.Reason)
	}
}
