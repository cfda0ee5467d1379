package agent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestCPUsPerGPUWaitsForEveryNode: beside a node of the previous release
// (agent protocol 7), --cpus-per-gpu is refused with the node named, at a
// claim and at a submit, since that node would grant the GPUs and drop the
// cores without a word; a plain claim still crosses. Once every node
// speaks this release, the cores are chosen on the node that owns the GPUs
// and every board shows them.
func TestCPUsPerGPUWaitsForEveryNode(t *testing.T) {
	t.Parallel()
	old := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S,sockets=2x4", "2xL40S,sockets=2x4"}, Quiet: true,
		Protocols: []int{0, 7}})
	want := "--cpus-per-gpu needs every node at agent protocol 8 or newer, and node02 runs an older dibs (protocol 7): upgrade it first"
	_, err := old[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 1, CPUsPerGPU: 2})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("claim with --cpus-per-gpu beside protocol 7: %v, want %q", err, want)
	}
	_, err = old[0].Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, CPUsPerGPU: 2, Duration: "1h"}})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("submit with --cpus-per-gpu beside protocol 7: %v, want %q", err, want)
	}
	if _, err := old[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1}); err != nil {
		t.Errorf("a plain claim on the older node: %v", err)
	}

	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S,sockets=2x4", "2xL40S,sockets=2x4"}, Quiet: true})
	r, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", GPUs: []int{1}, CPUsPerGPU: 2})
	if err != nil {
		t.Fatalf("claim with --cpus-per-gpu on node02: %v", err)
	}
	if r.CPUs != "4-5" {
		t.Errorf("grant's cores = %q, want 4-5 (node02's second socket)", r.CPUs)
	}
	agenttest.Eventually(t, 10*time.Second, "node01's board to show node02's lease with its cores", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				if l := g.Lease; l != nil && l.ID == r.ID {
					return slices.Equal(l.CPUs, []string{"4-5"}) && g.CPUs == "4-7"
				}
			}
		}
		return false
	})
}
