package tui

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

// TestQueueViewShowsAnArrayCompactly: the board's queue shows a job array
// as one row saying which tasks run and how many wait and are done.
func TestQueueViewShowsAnArrayCompactly(t *testing.T) {
	h := newHarness(t, 100, 24, Options{})
	h.be.queue.Entries = append(h.be.queue.Entries, api.QueuedEntry{ID: "node01-q7", User: "alice", Nodes: 1, GPUsPerNode: 1,
		Kind: "batch", Duration: "4h", Running: true, Array: &api.ArrayView{Spec: "0-19%4", RunningTasks: []int{3, 4, 5}, Waiting: 12, Done: 3}})
	h.keys("2")
	if s := h.screen(); !strings.Contains(s, "node01-q7[3-5] running, 12 waiting, 3 done") {
		t.Errorf("the queue view does not show the array compactly:\n%s", s)
	}
}
