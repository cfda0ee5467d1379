package event_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// TestEventsNameThePartHeld: the events of a MIG lease or a budget name the
// part held, not the whole GPU, and a queued MIG run's start says it asked
// for an instance, not "(1 GPU)" (issue 30: "GPU 0 (1 GPU)").
func TestEventsNameThePartHeld(t *testing.T) {
	mig := held(3, alice, []int{0}, t0, time.Hour)
	mig.MIG = "MIG-5a3c2f1e-0000-0000-0000-000000000000"
	budget := held(4, alice, []int{1}, t0, time.Hour)
	budget.MemMiB = 20 << 10
	whole := held(5, alice, []int{2, 3}, t0, time.Hour)
	for _, tc := range []struct {
		name      string
		e         event.Event
		want, not string
	}{
		{"MIG claim", event.LeaseEvent(event.EventClaim, mig, t0), "alice claimed a MIG instance of GPU 0 on gpu-01 as gpu-01-3", ""},
		{"MIG release", event.LeaseEvent(event.EventRelease, mig, t0), "alice released gpu-01-3 (a MIG instance of GPU 0 on gpu-01)", ""},
		{"MIG preempt", event.PreemptEvent(mig, lease.PreemptQuota, time.Minute, t0), "lease gpu-01-3 (a MIG instance of GPU 0 on gpu-01)", ""},
		{"budget claim", event.LeaseEvent(event.EventClaim, budget, t0), "alice claimed 20 GiB of GPU 1 on gpu-01", ""},
		{"whole GPUs", event.LeaseEvent(event.EventClaim, whole, t0), "alice claimed GPUs 2,3 on gpu-01", ""},
		{"queued MIG start", event.EntryEvent(event.EventStart, queue.QueueEntry{ID: "gpu-01-q1", Origin: node, User: "alice", Nodes: 1, GPUsPerNode: 1, MIG: "3g.40gb"}, "", t0), "started (a MIG instance 3g.40gb)", "1 GPU"},
		{"queued budget start", event.EntryEvent(event.EventStart, queue.QueueEntry{ID: "gpu-01-q2", Origin: node, User: "alice", Nodes: 1, GPUsPerNode: 1, MemMiB: 10 << 10}, "", t0), "started (10 GiB of a GPU)", "1 GPU"},
		{"queued gang start", event.EntryEvent(event.EventStart, queue.QueueEntry{ID: "gpu-01-q3", Origin: node, User: "alice", Nodes: 2, GPUsPerNode: 4}, "", t0), "started (2 nodes × 4 GPUs)", ""},
		{"queued single GPU start", event.EntryEvent(event.EventStart, queue.QueueEntry{ID: "gpu-01-q4", Origin: node, User: "alice", Nodes: 1, GPUsPerNode: 1}, "", t0), "started (1 GPU)", ""},
	} {
		if !strings.Contains(tc.e.Text, tc.want) || tc.not != "" && strings.Contains(tc.e.Text, tc.not) {
			t.Errorf("%s: %q, want it to say %q (and not %q)", tc.name, tc.e.Text, tc.want, tc.not)
		}
	}
}
