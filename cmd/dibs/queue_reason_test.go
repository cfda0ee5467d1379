package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/queue"
)

// TestPrintQueueReasons: a run held by a dependency shows "dep", not
// position 0; a long reason is whole into a pipe; -v lists every node's.
func TestPrintQueueReasons(t *testing.T) {
	long := "it would borrow beyond its quota, so na-q2 (within quota) gets GPU 1 of na first, then it waits for bob's lease"
	q := api.Queue{Scheduler: "na", Entries: []api.QueuedEntry{
		{ID: "na-q3", Position: 1, User: "ana", Nodes: 1, GPUsPerNode: 2, Duration: "1h", Waiting: long,
			Reason: &queue.Reason{Code: queue.WaitQuota, Node: "na", Words: long},
			NodeReasons: []queue.Reason{
				{Code: queue.WaitQuota, Node: "na", Words: long},
				{Code: queue.WaitMIG, Node: "nb", Words: "nb has no MIG instance 3g.40gb"},
			}},
		{ID: "na-q4", User: "ana", Nodes: 1, GPUsPerNode: 1, Duration: "1h", Waiting: "waits for na-q3 to succeed",
			Reason: &queue.Reason{Code: queue.WaitDependency, Words: "waits for na-q3 to succeed"}},
	}}
	var b bytes.Buffer
	printQueueWith(&b, q, time.Now(), true)
	out := b.String()
	for _, want := range []string{"\n    " + long + "\n", "      na quota: " + long + "\n", "      nb mig: nb has no MIG instance 3g.40gb\n", "\ndep "} {
		if !strings.Contains(out, want) {
			t.Errorf("dibs queue -v lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "~") || strings.Contains(out, "\n0 ") {
		t.Errorf("dibs queue into a pipe cut a reason or shows position 0:\n%s", out)
	}
}
