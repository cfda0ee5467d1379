package agent_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestLeaseChangeReachesEveryAgentInItsFirstSeconds starts three agents at
// the same moment (node02 and node03 join node01, with the production
// gossip timings), waits only until every agent lists
// all three, then claims on node02 from node01: node03 must show the lease
// within a second, as it does in steady state — a node's first seconds in a
// cluster are when people look at the board.
//
// The five trials are five clusters of their own (key, seed port, tmux
// directory) and run at once.
func TestLeaseChangeReachesEveryAgentInItsFirstSeconds(t *testing.T) {
	t.Parallel()
	seeds := freeLoopbackPorts(t, 5)
	for trial, seed := range seeds {
		t.Run(fmt.Sprint("trial", trial), func(t *testing.T) {
			t.Parallel()
			key := make([]byte, 32)
			key[0] = byte(trial)
			tmux := agenttest.TmuxDir(t)
			var opts []agenttest.Options
			for i, name := range []string{"node01", "node02", "node03"} {
				cs := &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "f", Key: key}
				if i == 0 {
					cs.BindPort = seed
				} else {
					cs.Join = []string{fmt.Sprintf("127.0.0.1:%d", seed)}
				}
				opts = append(opts, agenttest.Options{Name: name, Sim: "2xL40S", TmuxTmpDir: tmux, Quiet: true, Cluster: cs})
			}
			nodes := agenttest.StartTogether(t, opts...)
			n1 := nodes[0]
			agenttest.Eventually(t, 10*time.Second, "every agent to list three nodes", func() bool {
				for _, n := range nodes {
					if len(n.Board().Nodes) != 3 {
						return false
					}
				}
				return true
			})
			r, err := n1.Me().Claim(context.Background(), api.ClaimRequest{Node: "node02", Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			agenttest.Eventually(t, 5*time.Second, "node03 to show the lease", func() bool {
				return leaseOn(nodes[2].Board(), "node02", r.GPUs[0]) != nil
			})
			if d := time.Since(start); d > time.Second {
				t.Errorf("node03 showed node02's new lease %s after the claim, over 1s", d.Round(time.Millisecond))
			}
		})
	}
}

// freeLoopbackPorts finds n distinct ports nobody listens on (TCP and
// UDP), for agents others must join before they are up.
func freeLoopbackPorts(t *testing.T, n int) []int {
	var ports []int
	var held []net.PacketConn
	defer func() {
		for _, u := range held {
			u.Close()
		}
	}()
	for range 20 * n {
		if len(ports) == n {
			return ports
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			held = append(held, u) // held until all are found, so they differ
			ports = append(ports, port)
		}
	}
	t.Fatal("no free ports")
	return nil
}
