package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
)

// TestPrintQueueShowsAnArrayCompactly: an array is one row whose last
// column says which tasks run and how many wait and are done.
func TestPrintQueueShowsAnArrayCompactly(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	q := api.Queue{Scheduler: "node01", Entries: []api.QueuedEntry{
		{ID: "node01-q7", User: "ana", Nodes: 1, GPUsPerNode: 1, Duration: "4h", Running: true,
			Array: &api.ArrayView{Spec: "0-19%4", RunningTasks: []int{3, 4, 5}, Waiting: 12, Done: 3}},
		{ID: "node01-q9", Position: 1, User: "ana", Nodes: 1, GPUsPerNode: 1, Duration: "4h", Priority: 612,
			Waiting: "waits for node01-q7 to succeed", After: []string{"afterok:node01-q7"}},
	}}
	var b bytes.Buffer
	printQueue(&b, shownQueue(q), now)
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"node01-q7[3-5] running, 12 waiting, 3 done", "waits for node01-q7 to succeed"} {
		if !strings.Contains(out, want) {
			t.Errorf("dibs queue does not say %q:\n%s", want, out)
		}
	}
}
