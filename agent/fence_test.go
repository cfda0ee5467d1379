package agent_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
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
