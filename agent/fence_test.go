package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// TestReplicaStartedBeforeTheClusterIsHeardStillFences: a replica armed
// its watchdog only if the agent's heartbeat existed as it started, and a
// node's first agent made none until it was first in touch with the
// cluster. A service started on it before then (the nemesis found one,
// started at its cluster's first second, that a partition past the grace
// neither fenced nor moved) ran on whatever befell its node. Here the
// node never reaches its cluster (its seed is not there): its replica
// stops itself a grace later, as one cut off must.
func TestReplicaStartedBeforeTheClusterIsHeardStillFences(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	const grace = 2 * time.Second
	key := make([]byte, 32)
	n := agenttest.Start(t, agenttest.Options{Name: "node02", Quiet: true, Sched: queue.SchedConfig{LostAfter: grace},
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "fence", Key: key, Fast: true, Join: []string{"127.0.0.1:9"}}})
	hb := filepath.Join(filepath.Dir(n.Socket), "heartbeat")
	st, err := os.Stat(hb)
	if err != nil {
		t.Fatalf("no heartbeat once the agent serves, before it heard its cluster: %v", err)
	}
	if st.ModTime().After(time.Now().Add(time.Minute)) {
		t.Fatalf("heartbeat dated %s: an agent that joins a cluster is not alone by design", st.ModTime())
	}
	me := n.Agent.For(u.UID)
	r, err := me.Claim(ctx(t), api.ClaimRequest{Node: "node02", Run: &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home},
		Service: &service.Spec{Name: "lonely"}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the replica's session", func() bool {
		ok, _ := n.Sessions.Exists(ctx(t), u, r.Session)
		return ok
	})
	// The watchdog allows ceil(grace)+1 s of whole seconds, looks once a
	// second, and the session ends at its SIGTERM.
	agenttest.Eventually(t, grace+10*time.Second, "the replica on a node cut off from its cluster stopped itself", func() bool {
		ok, err := n.Sessions.Exists(ctx(t), u, r.Session)
		return err == nil && !ok
	})
}

// loneCut is a gossip.Faults that, once cut is set, drops everything the
// node sends when it is the node cut off (lone), and everything others
// send to the lone node's address.
type loneCut struct {
	lone bool
	cut  *atomic.Bool
	addr *atomic.Pointer[string]
}

func (f loneCut) Packet(addr string) gossip.PacketFate {
	return gossip.PacketFate{Drop: f.blocked(addr)}
}

func (f loneCut) Stream(addr string) error {
	if f.blocked(addr) {
		return fmt.Errorf("dial %s: no route to host (test partition)", addr)
	}
	return nil
}

func (f loneCut) blocked(addr string) bool {
	if !f.cut.Load() {
		return false
	}
	if f.lone {
		return true
	}
	a := f.addr.Load()
	return a != nil && *a == addr
}

// TestLoneNodeStopsTouchingItsHeartbeatWithinSeconds: node01 of three is
// cut off from the other two. memberlist goes on listing them through
// its drawn-out suspicion (no other member confirms it: about 10 s here),
// and node01's view showed them alive again each time its own suspect
// mark lapsed, so it touched its heartbeat on and off all that while and
// its replicas outlived the grace by as much (the nemesis, watching a
// node cut off alone, saw its view flap for 10 s before it called its
// peers dead; with a 5 s grace its replicas then ran about twice that
// beside the copies moved). A member not heard
// from for heardWithin (5 s here) counts as gone for the fence: node01
// stops touching its heartbeat by then and never touches it again while
// it is cut off.
func TestLoneNodeStopsTouchingItsHeartbeatWithinSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three agents and waits out a partition")
	}
	key := make([]byte, 32)
	cut, addr := &atomic.Bool{}, &atomic.Pointer[string]{}
	var nodes []*agenttest.Node
	for i := range 3 {
		cs := &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "lone", Key: key, Fast: true,
			Faults: loneCut{lone: i == 0, cut: cut, addr: addr}}
		if i > 0 {
			cs.Join = []string{nodes[0].Agent.GossipAddr()}
		}
		nodes = append(nodes, agenttest.Start(t, agenttest.Options{Name: fmt.Sprintf("node%02d", i+1), Quiet: true, Cluster: cs}))
	}
	a := nodes[0].Agent.GossipAddr()
	addr.Store(&a)
	agenttest.WaitConverged(t, nodes, 45*time.Second)
	hb := filepath.Join(filepath.Dir(nodes[0].Socket), "heartbeat")
	touched := func() time.Time {
		st, err := os.Stat(hb)
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime()
	}
	agenttest.Eventually(t, 5*time.Second, "node01 touching its heartbeat", func() bool { return time.Since(touched()) < 2*time.Second })
	cut.Store(true)
	t.Cleanup(func() { cut.Store(false) })
	cutAt := time.Now()
	// heardWithin (5 s for three nodes), and a beat's second.
	time.Sleep(time.Until(cutAt.Add(6500 * time.Millisecond))) // the time the fence is given to notice; what it did then is checked below
	last := touched()
	// An absence check, up to 12 s after the cut: past memberlist's own
	// verdict of dead, when the old code stopped touching too.
	poll.Never(t, time.Until(cutAt.Add(12*time.Second)), "node01, cut off alone, touched its heartbeat again", func() bool {
		return touched().After(last)
	})
	if since := last.Sub(cutAt); since > 6*time.Second {
		t.Errorf("node01 last touched its heartbeat %s after it was cut off; want within heardWithin (5 s) and a beat", since.Round(100*time.Millisecond))
	}
}
