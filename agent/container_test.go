package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// TestContainerStartedWithTheLeaseIsTheHolders: root's process in a
// container whose environment carries DIBS_LEASE_ID of the lease on its GPU
// (docker run -e DIBS_LEASE_ID from the lease's session) is the holder's on
// every node's board, without an adopt. The same process naming another
// lease, or on a GPU of another lease, is flagged.
func TestContainerStartedWithTheLeaseIsTheHolders(t *testing.T) {
	t.Parallel()
	users := agenttest.Users{"cana": 30101, "cbob": 30102}
	ana, bob := lease.Caller{UID: 30101, User: "cana"}, lease.Caller{UID: 30102, User: "cbob"}
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "1xL40S"}, Users: users, Quiet: true})
	n1 := nodes[0]
	la, err := n1.As(ana).Claim(ctx(t), api.ClaimRequest{Node: "node01", GPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n1.As(bob).Claim(ctx(t), api.ClaimRequest{Node: "node01", GPUs: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	root := 0
	const ctr = "3f2a9c1b7d4e"
	// flags is node01's GPU flags on each node's board, once both
	// processes show.
	flags := func(n *agenttest.Node) ([][]lease.Flag, bool) {
		for _, bn := range n.Board().Nodes {
			if bn.Name == "node01" && len(bn.GPUs) == 2 && len(bn.GPUs[0].Processes) == 1 && len(bn.GPUs[1].Processes) == 1 &&
				bn.GPUs[0].Processes[0].LeaseID != "" {
				return [][]lease.Flag{bn.GPUs[0].Flags, bn.GPUs[1].Flags}, true
			}
		}
		return nil, false
	}
	for _, tc := range []struct {
		name     string
		on0, on1 string // the DIBS_LEASE_ID of root's container process on GPU 0 and on GPU 1
		sq0, sq1 bool
	}{
		{"each names the lease of its GPU", la.ID, lb.ID, false, false},
		{"each names the other GPU's lease", lb.ID, la.ID, true, true},
	} {
		load := sim.Load{GPUs: map[int]sim.GPULoad{
			0: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 5000, UID: &root, Command: "python", UsedMemoryMiB: 1000, Container: ctr, LeaseID: tc.on0}}},
			1: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 5001, UID: &root, Command: "python", UsedMemoryMiB: 1000, Container: ctr, LeaseID: tc.on1}}},
		}}
		if err := n1.Probe.SetLoad(load); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			agenttest.Eventually(t, 10*time.Second, tc.name+" on "+n.Opts.Name+"'s board", func() bool {
				f, ok := flags(n)
				return ok && n.Board().Nodes != nil && slices.Contains(f[0], lease.FlagSquatted) == tc.sq0 && slices.Contains(f[1], lease.FlagSquatted) == tc.sq1 &&
					processLeaseIs(n, tc.on0)
			})
		}
	}
}

// processLeaseIs reports whether node01's GPU 0 process on n's board
// carries DIBS_LEASE_ID id, so a board judged from the previous load is
// not taken for the new one.
func processLeaseIs(n *agenttest.Node, id string) bool {
	for _, bn := range n.Board().Nodes {
		if bn.Name == "node01" && len(bn.GPUs) > 0 && len(bn.GPUs[0].Processes) == 1 {
			return bn.GPUs[0].Processes[0].LeaseID == id
		}
	}
	return false
}
