package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestPausedAgentLetsGoOfTheRankItLost: SIGSTOP (not kill) the agent of one
// rank's node in the middle of a two-node gang started with --requeue, for
// longer than the failure detector and lost_after allow. The gang is
// requeued and runs again on the nodes that are up. When the paused agent
// goes on (SIGCONT), it must not act on the lease of the lost rank as if it
// still held it: it ends it (and its session) at once, and every board
// shows only the new attempt.
func TestPausedAgentLetsGoOfTheRankItLost(t *testing.T) {
	agenttest.RequireTmux(t)
	procs := startClusterProcs(t, 3, "[queue]\nlost_after = \"2s\"\npreempt_grace = \"1s\"\n[leases]\nsignal_grace = \"1s\"\n")
	// One client per agent: each keeps its connections, and an agent caps
	// how many one user may hold.
	clients := map[string]*api.Client{}
	for _, p := range procs {
		clients[p.name] = api.NewClient(p.socket)
	}
	cl := clients[procs[0].name]
	out, errOut, code := dibs(t, procs[0].socket, nil, "run", "--nodes", "2", "--gpus-per-node", "2", "--requeue", "--max-restarts", "2", "--json", "--", "sleep", "600")
	if code != 0 {
		t.Fatalf("gang: %s", errOut)
	}
	var sub api.Submitted
	json.Unmarshal([]byte(out), &sub)
	// ranks is every committed rank of the gang a board shows: node →
	// attempt key, on live nodes only unless all is set.
	ranks := func(c *api.Client, all bool) map[string]string {
		b, _ := c.Board(context.Background())
		out := map[string]string{}
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, sub.ID+"#") && l.ReservedUntil.IsZero() && (all || n.State == api.NodeAlive) {
					out[n.Name] = l.Entry
				}
			}
		}
		return out
	}
	var first map[string]string
	agenttest.Eventually(t, 10*time.Second, "both ranks to run", func() bool {
		first = ranks(cl, false)
		return len(first) == 2
	})
	var victim *clusterProc
	for _, p := range procs[1:] {
		if _, ok := first[p.name]; ok {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("no rank outside node01: %v", first)
	}
	victim.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { victim.cmd.Process.Signal(syscall.SIGCONT) })
	agenttest.Eventually(t, 30*time.Second, "the gang to run again on the nodes that are up", func() bool {
		now := ranks(cl, false)
		if len(now) != 2 {
			return false
		}
		for node, entry := range now {
			if node == victim.name || entry == first[node] {
				return false
			}
		}
		return true
	})
	t.Logf("the gang ran again %s after %s was stopped", time.Since(stopped).Round(10*time.Millisecond), victim.name)
	victim.cmd.Process.Signal(syscall.SIGCONT)
	resumed := time.Now()
	// The paused agent's own word first, then every board.
	agenttest.Eventually(t, 10*time.Second, "the paused agent to end the rank it lost", func() bool {
		_, held := ranks(clients[victim.name], true)[victim.name]
		return !held
	})
	t.Logf("the paused agent let go of its lost rank %s after it went on", time.Since(resumed).Round(10*time.Millisecond))
	agenttest.Eventually(t, 10*time.Second, "every board to show only the new attempt", func() bool {
		for _, p := range procs {
			now := ranks(clients[p.name], true)
			if len(now) != 2 {
				return false
			}
			for node, entry := range now {
				if node == victim.name || entry == first[node] {
					return false
				}
			}
		}
		return true
	})
	t.Logf("every board converged %s after the paused agent went on", time.Since(resumed).Round(10*time.Millisecond))
}
