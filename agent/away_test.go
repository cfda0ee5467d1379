package agent_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/gossip"
)

// cutOff is a network a test can cut: while cut, nothing an agent sends
// arrives.
type cutOff struct{ cut atomic.Bool }

func (c *cutOff) Packet(string) gossip.PacketFate { return gossip.PacketFate{Drop: c.cut.Load()} }
func (c *cutOff) Stream(string) error {
	if c.cut.Load() {
		return errors.New("no route to host (test partition)")
	}
	return nil
}

// TestRunThatEndedWhileItsOriginWasAwayFinishes: a queued run ends on
// node02 while its origin, node01, cannot hear; then node02's agent
// restarts before they meet again. node02 must still tell how the run
// ended (from its ledger), so node01 finishes the entry instead of keeping
// it "running" for ever.
func TestRunThatEndedWhileItsOriginWasAwayFinishes(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	wire := &cutOff{}
	key := []byte(strings.Repeat("k", 32))
	tmux := agenttest.TmuxDir(t)
	cs := func(join ...string) *agent.ClusterSettings {
		return &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "away", Key: key, Fast: true, Join: join, Faults: wire}
	}
	n1 := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "1xL40S", Cluster: cs(), TmuxTmpDir: tmux, Quiet: true})
	n2 := agenttest.Start(t, agenttest.Options{Name: "node02", Sim: "1xL40S", Cluster: cs(n1.Agent.GossipAddr()), TmuxTmpDir: tmux, Quiet: true})
	agenttest.WaitConverged(t, []*agenttest.Node{n1, n2}, 15*time.Second)
	sub, err := n1.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Node: "node02", Count: 1, Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sleep", "1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		q, err := n1.Client.Queue(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range q.Entries {
			if e.ID == sub.ID {
				return e.Position == 0
			}
		}
		return false
	}
	agenttest.Eventually(t, 10*time.Second, "the run to start on node02", running)
	wire.cut.Store(true)
	agenttest.Eventually(t, 10*time.Second, "the run to end on node02", func() bool {
		b, err := n2.Client.Board(ctx(t))
		if err != nil {
			return false
		}
		for _, n := range b.Nodes {
			if n.Name == "node02" {
				return n.GPUs[0].Lease == nil
			}
		}
		return false
	})
	// node02 comes back where it was, as an agent restarted by systemd does.
	_, port, _ := net.SplitHostPort(n2.Agent.GossipAddr())
	n2.Opts.Cluster.BindPort, _ = strconv.Atoi(port)
	n2.Restart()
	wire.cut.Store(false)
	agenttest.Eventually(t, 20*time.Second, "node01 to finish the entry", func() bool {
		q, err := n1.Client.Queue(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range q.Entries {
			if e.ID == sub.ID {
				return false
			}
		}
		return true
	})
}
