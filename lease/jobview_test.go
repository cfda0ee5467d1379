package lease_test

import (
	"testing"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// What travels and shows of a job to others: its public part only.
func TestJobPublicAndShownTo(t *testing.T) {
	j := &job.Job{Command: []string{"train.py", "--key=sk-1"}, Dir: "/srv/p", Name: "t", Torchrun: true, Env: map[string]string{"PATH": "/v"}}
	e := queue.QueueEntry{User: "mallory", Job: j}
	for _, tc := range []struct {
		who  lease.Caller
		full bool
	}{
		{lease.Caller{User: "mallory", UID: 7}, true},
		{lease.Caller{User: "carol", UID: 8}, false},
		{lease.Caller{User: "root", Admin: true}, true},
		{lease.Caller{UID: 9}, false},
	} {
		got := e.ShownTo(tc.who).Job
		if full := len(got.Command) > 0; full != tc.full || !got.RunsCommand() || got.Name != "t" || !got.Torchrun {
			t.Errorf("%s sees %+v; want whole %v, and always its name, torchrun and that it runs a command", tc.who, got, tc.full)
		}
		if !tc.full && (got.Dir != "" || got.Env != nil || !got.Kept) {
			t.Errorf("%s sees %+v; want no directory or environment", tc.who, got)
		}
	}
	if p := e.Published(); p.Job == j || len(j.Command) == 0 {
		t.Error("Published changed the entry's own job")
	}
	if (queue.QueueEntry{}).Published().Job != nil {
		t.Error("a queued claim grew a job")
	}
}
