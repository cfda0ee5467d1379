package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func TestQueueEntryCheck(t *testing.T) {
	p := lease.DefaultPolicy()
	tests := []struct {
		name string
		e    queue.QueueEntry
		want string // "" = accepted
	}{
		{"defaults", queue.QueueEntry{GPUsPerNode: 1}, ""},
		{"no size", queue.QueueEntry{}, "how many GPUs"},
		{"pinned gang", queue.QueueEntry{Nodes: 2, GPUsPerNode: 1, Node: "n1", Job: &job.Job{Command: []string{"x"}}}, "pinned"},
		{"gang without command", queue.QueueEntry{Nodes: 2, GPUsPerNode: 1}, "command on every node"},
		{"torchrun without command", queue.QueueEntry{GPUsPerNode: 1, Job: &job.Job{Torchrun: true}}, "torchrun"},
		{"over max", queue.QueueEntry{GPUsPerNode: 1, Duration: 30 * 24 * time.Hour}, "maximum"},
		{"escape in note", queue.QueueEntry{GPUsPerNode: 1, Note: "hi\x1b[2J"}, "plain text"},
		{"bidi override in note", queue.QueueEntry{GPUsPerNode: 1, Note: "x\u202ey"}, "note holds U+202E RIGHT-TO-LEFT OVERRIDE"},
		{"zero width in note", queue.QueueEntry{GPUsPerNode: 1, Note: "x\u200by"}, "note holds U+200B ZERO WIDTH SPACE"},
		{"escape in model", queue.QueueEntry{GPUsPerNode: 1, Model: "H100\x1b[2J"}, "model holds U+001B"},
		{"bidi in node", queue.QueueEntry{GPUsPerNode: 1, Node: "n\u202e1"}, "node name holds U+202E"},
		{"invisible in session name", queue.QueueEntry{GPUsPerNode: 1, Job: &job.Job{Name: "a\u2060b"}}, "session name holds U+2060 WORD JOINER"},
		{"restarts", queue.QueueEntry{GPUsPerNode: 1, MaxRestarts: 500}, "max-restarts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e
			err := e.Check(p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if tc.want == "" && (e.Nodes != 1 || e.Kind != lease.KindInteractive || e.Duration != p.DefaultInteractive) {
				t.Errorf("defaults not filled: %+v", e)
			}
		})
	}
	if o, ok := queue.OriginOfQueueID(queue.QueueID("gpu-q1.lab", 7)); !ok || o != "gpu-q1.lab" {
		t.Errorf("OriginOfQueueID round trip = %q %v", o, ok)
	}
	for _, bad := range []string{"node01-7", "node01-q", "-q3", "node01-qx"} {
		if _, ok := queue.OriginOfQueueID(bad); ok {
			t.Errorf("OriginOfQueueID(%q) accepted", bad)
		}
	}
}
