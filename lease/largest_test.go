package lease_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// TestLargestNodeSaidOnce: a claim that no node can hold and a queued
// request that no node can hold name the same largest node, counting the
// GPUs that can be claimed whole (a GPU split into MIG instances is not
// one). The claim counted every GPU and said "largest has 3" where the
// queue said "largest has 2" (issue 30: 8 beside 6).
func TestLargestNodeSaidOnce(t *testing.T) {
	snap := migNode() // 3 GPUs, GPU 0 split into MIG instances
	_, claimErr := lease.ChooseNode([]lease.Candidate{{Node: "a100", Snap: snap}}, 3)
	queueErr := queue.CheckFeasible(queue.QueueEntry{Nodes: 1, GPUsPerNode: 3, User: "alice"}, []lease.SchedNode{{Name: "a100", Alive: true, Snap: snap}}, "", nil)
	for what, err := range map[string]error{"claim -g 3": claimErr, "queued -g 3": queueErr} {
		if err == nil || !strings.Contains(err.Error(), "(the largest has 2)") {
			t.Errorf("%s: %v, want a refusal saying the largest has 2", what, err)
		}
	}
}
