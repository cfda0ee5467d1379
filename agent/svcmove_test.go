package agent_test

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// TestServiceMovesOffALostNodeAndItsOldCopyFencesItself: a service on
// node02 of a two-node cluster keeps its process across a restart of
// node02's agent within the grace; then node02's agent is killed outright (tmux
// and the service go on). Past the grace the replica answers on node01,
// and the copy left on node02 has stopped itself (its watchdog saw the
// agent's heartbeat go stale); when node02's agent comes back it ends its
// own lease of the service instead of starting it again: one copy runs.
func TestServiceMovesOffALostNodeAndItsOldCopyFencesItself(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	const grace = 3 * time.Second
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, OwnTmux: true,
		Sched: queue.SchedConfig{LostAfter: grace}})
	me := nodes[0].Agent.For(u.UID)
	_, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Node: "node02",
		Run:     &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port}})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	l := waitHealthy(t, me, "web", 30*time.Second)
	if l.Node != "node02" || get(url) != 200 {
		t.Fatalf("service on %s answering %d, want node02 and 200", l.Node, get(url))
	}
	old := listenerPID(t, nodes[1], u, l.Session, port)
	if old == 0 {
		t.Fatal("no process of the service's session listens on its port")
	}

	// node02 comes back on the same gossip address: memberlist refuses a
	// dead node's name from another address for a while.
	_, gport, err := net.SplitHostPort(nodes[1].Agent.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	nodes[1].Opts.Cluster.BindPort, _ = strconv.Atoi(gport)

	// A restart of node02's agent within the grace (SIGTERM) fences
	// nothing and moves nothing: the same process keeps serving.
	nodes[1].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	// An absence check: the watchdog would have stopped the replica
	// within the grace + 2 s of whole seconds, and a move would have come.
	poll.Never(t, grace+3*time.Second, fmt.Sprintf("the replica (pid %d) stopped or moved across an agent restart within the grace", old), func() bool {
		got, _ := serviceOf(t, me, "web")
		return syscall.Kill(old, 0) != nil || get(url) != 200 || got.Node != "node02"
	})
	crashed := time.Now()
	nodes[1].Crash() // as kill -9: tmux and the replica go on
	agenttest.Eventually(t, grace+15*time.Second, "the copy on node02 stopped itself", func() bool {
		return syscall.Kill(old, 0) != nil
	})
	fenced := time.Since(crashed)
	var moved time.Duration
	agenttest.Eventually(t, grace+20*time.Second, "the service moved to node01, healthy and answering", func() bool {
		got, ok := serviceOf(t, me, "web")
		if ok && got.Node == "node02" && got.Service.State != service.Moving && time.Since(crashed) > grace+2*time.Second {
			// Shown moving once node02 is lost past the grace.
			t.Logf("state of the service on lost node02: %s", got.Service.State)
		}
		l = got
		return ok && got.Node == "node01" && got.Service.State == service.Healthy && get(url) == 200
	})
	moved = time.Since(crashed)
	t.Logf("agent killed to old copy stopped: %s; to answering on node01: %s (grace %s)", fenced.Round(10*time.Millisecond), moved.Round(10*time.Millisecond), grace)
	if moved > grace+5*time.Second {
		t.Errorf("the service answered on node01 %s after node02's agent died: want at most the grace (%s) + 5 s", moved.Round(10*time.Millisecond), grace)
	}
	now := listenerPID(t, nodes[0], u, l.Session, port)
	if now == 0 || now == old {
		t.Fatalf("listener on node01: pid %d (old copy %d)", now, old)
	}

	// node02 comes back: it ends its own lease of the service, starts no
	// copy, and node01's keeps serving.
	nodes[1].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	agenttest.Eventually(t, 30*time.Second, "node02 ended its own lease of the moved service", func() bool {
		for _, x := range nodes[1].Agent.Service().View().Local().Leases {
			if x.IsService() {
				if x.Service.Restarts > 0 {
					t.Fatalf("node02 restarted the service it came back to (%d restarts): two copies", x.Service.Restarts)
				}
				return false
			}
		}
		return true
	})
	if ok, _ := nodes[1].Sessions.Exists(ctx(t), u, l.Session); ok {
		t.Fatal("node02 started the service again after it came back: two copies")
	}
	got, ok := serviceOf(t, me, "web")
	if !ok || got.Node != "node01" || get(url) != 200 {
		t.Fatalf("after node02's return: service on %s (found %v) answering %d, want node01 and 200", got.Node, ok, get(url))
	}
	if pid := listenerPID(t, nodes[0], u, got.Session, port); pid != now {
		t.Fatalf("node01's copy changed when node02 came back: pid %d, was %d", pid, now)
	}
}

// TestAStoppedServiceStaysStoppedWhenItsLostNodeReturns: a service on
// node02 moves to node01 when node02's agent dies; its owner stops it
// there (dibs stop releases the copy the board shows). The copy on lost
// node02 is never moved again, and when node02 returns (after node01's
// agent restarted, so node01 keeps the stop across its own restart) it
// ends its own lease of the service: nothing of it runs anywhere. (The nemesis found a
// stopped service placed again half a millisecond after the stop.)
func TestAStoppedServiceStaysStoppedWhenItsLostNodeReturns(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	const grace = 3 * time.Second
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, OwnTmux: true,
		Sched: queue.SchedConfig{LostAfter: grace}})
	me := nodes[0].Agent.For(u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Node: "node02",
		Run:     &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port}}); err != nil {
		t.Fatal(err)
	}
	first := waitHealthy(t, me, "web", 30*time.Second)
	_, gport, err := net.SplitHostPort(nodes[1].Agent.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	nodes[1].Opts.Cluster.BindPort, _ = strconv.Atoi(gport)
	nodes[1].Crash() // as kill -9: tmux and the replica go on, then fence
	var moved lease.Lease
	agenttest.Eventually(t, grace+30*time.Second, "the service moved to node01 and healthy", func() bool {
		got, ok := serviceOf(t, me, "web")
		moved = got
		return ok && got.Node == "node01" && got.Service.State == service.Healthy
	})
	if _, err := me.Release(ctx(t), api.ReleaseRequest{IDs: []string{moved.ID}}); err != nil {
		t.Fatal(err)
	}
	// An absence check: the scheduler passes every second or so; a move
	// of node02's copy would come within a pass or two.
	poll.Never(t, grace+2*time.Second, "the stopped service was placed again from node02's copy", func() bool {
		_, ok := serviceOf(t, me, "web")
		return ok || get(fmt.Sprintf("http://127.0.0.1:%d/", port)) != 0
	})
	// node01's agent restarts before node02 returns: the stop it keeps
	// comes back from its ledger.
	_, gport, err = net.SplitHostPort(nodes[0].Agent.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].Opts.Cluster.BindPort, _ = strconv.Atoi(gport)
	nodes[0].Restart()
	me = nodes[0].Agent.For(u.UID)
	nodes[1].Restart()
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	agenttest.Eventually(t, 30*time.Second, "node02 ended its own lease of the stopped service", func() bool {
		for _, x := range nodes[1].Agent.Service().View().Local().Leases {
			if x.IsService() {
				return false
			}
		}
		return true
	})
	if ok, _ := nodes[1].Sessions.Exists(ctx(t), u, first.Session); ok {
		t.Fatal("node02's session of the stopped service still runs after its return")
	}
	if got, ok := serviceOf(t, me, "web"); ok {
		t.Fatalf("the stopped service runs again on %s (lease %s)", got.Node, got.ID)
	}
}
