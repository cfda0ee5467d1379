package event_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func TestEventNotices(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{3}, User: "alice", UID: 1001, Kind: lease.KindBatch,
		StartedAt: at.Add(-time.Hour), ExpiresAt: at.Add(10 * time.Minute), Session: "dibs-node01-7"}
	queued := l
	queued.Entry = "node01-q3#0"
	booked := l
	booked.Booked, booked.StartedAt, booked.ExpiresAt = true, at.Add(time.Hour), at.Add(3*time.Hour)
	q := queue.QueueEntry{ID: "node01-q3", Origin: "node01", User: "alice", Nodes: 2, GPUsPerNode: 4,
		Job: &job.Job{Command: []string{"python", "train.py"}}, Restarts: 1, MaxRestarts: 3}
	retrying := q
	retrying.RetryAt = at.Add(20 * time.Second)
	tests := []struct {
		name string
		e    event.Event
		want string // "" for no notice
	}{
		{"own claim", event.LeaseEvent(event.EventClaim, l, at), ""},
		{"own release", event.EndEvent(l, lease.EndReleased, "", at), ""},
		{"ten minutes left", event.WarnEvent(l, "10m", at), "lease node01-7 ends in 10m"},
		{"a minute left", event.WarnEvent(l, "1m", at), "ends in 1m"},
		{"expired", event.EndEvent(l, lease.EndExpired, "", at), "your lease node01-7 ended at its time limit"},
		{"ended by an admin", event.EndEvent(l, lease.EndByAdmin, "root", at), "your lease node01-7 ended by admin root"},
		{"a run failed", event.EndEvent(l, lease.ExitReason(3), "", at), "your run in lease node01-7 failed (exit 3): `dibs logs node01-7`"},
		{"a run finished", event.EndEvent(l, lease.ExitReason(0), "", at), "your run in lease node01-7 finished (exit 0)"},
		{"a shell left", event.EndEvent(l, lease.EndSessionEnded, "", at), ""},
		{"a queued run's lease: its origin tells", event.EndEvent(queued, lease.ExitReason(1), "", at), ""},
		{"queued run started", event.EntryEvent(event.EventStart, q, "", at), "your queued request node01-q3 started"},
		{"job finished", event.EntryEvent(event.EventFinish, q, "exit 0", at), "your job node01-q3 finished (exit 0)"},
		{"job failed", event.EntryEvent(event.EventFail, q, "lease node02-4 ended: exit-2", at), "your job node01-q3 failed: lease node02-4 ended: exit-2"},
		{"job requeued", event.EntryEvent(event.EventRequeue, q, "node node02 is down", at), "your job node01-q3 failed (node node02 is down); back in the queue (restart 1 of 3)"},
		{"job requeued, its retry spaced", event.EntryEvent(event.EventRequeue, retrying, "lease node02-4 ended: exit-2", at), "your job node01-q3 failed (lease node02-4 ended: exit-2); back in the queue (restart 1 of 3), tries again in 20s"},
		{"own cancel", event.EntryEvent(event.EventCancel, q, "", at), ""},
		{"squatter", event.SquatterEvent("node01", 3, "dave", 6300, "python hack.py", &l, at), "dave's process 6300 (python hack.py) runs on your GPU 3 on node01"},
		{"squatter on a free GPU tells nobody", event.SquatterEvent("node01", 5, "dave", 6300, "python hack.py", nil, at), ""},
		{"idle: the board shows it, a reclaim is told", event.IdleEvent(l, 3, 30*time.Minute, at), ""},
		{"idle reclaim", event.PreemptEvent(l, lease.PreemptIdle, 5*time.Minute, at), "your GPU 3 on node01 has been idle and someone is waiting: lease node01-7 is reclaimed in 5m"},
		{"agent join", event.AgentEvent(event.EventAgentJoin, "node01", "node02", "joined", at), ""},
		{"own booking", event.BookingEvent(booked, at), ""},
		{"own unbook", event.EndEvent(booked, lease.EndUnbooked, "", at), ""},
		{"a booking began", event.BookingStartEvent(l, "", at), "your booking node01-7 has begun: GPU 3 on node01 until"},
		{"a booking began, its command did not", event.BookingStartEvent(l, "no such file\x1b[2J", at), "its command could not start (no such file"},
		{"a booking lapsed", event.EndEvent(booked, lease.EndBookingLapsed, "", at), "your lease node01-7 ended because its booked time passed"},
		{"a lease past its end when a booking began", event.EndEvent(l, lease.EndBooked, "", at), "your lease node01-7 ended because a booking of its GPUs began"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.e.Seq = 1
			if err := tt.e.Validate(); err != nil {
				t.Fatalf("Validate: %v (event %+v)", err, tt.e)
			}
			n, ok := tt.e.Notice()
			switch {
			case tt.want == "" && ok:
				t.Errorf("Notice = %q, want none", n.Text)
			case tt.want != "" && !ok:
				t.Errorf("no notice, want one containing %q (event text %q)", tt.want, tt.e.Text)
			case ok && !strings.Contains(n.Text, tt.want):
				t.Errorf("Notice = %q, want it to contain %q", n.Text, tt.want)
			case ok && n.User != "alice":
				t.Errorf("notice for %q, want alice", n.User)
			}
			if ok {
				if err := n.Validate(); err != nil {
					t.Errorf("notice does not validate: %v", err)
				}
			}
		})
	}
}

func TestEventValidateRefuses(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	good := event.Event{Seq: 1, Node: "node01", At: at, Kind: event.EventClaim, User: "alice", Text: "alice claimed GPU 0"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*event.Event){
		"no sequence":      func(e *event.Event) { e.Seq = 0 },
		"unknown kind":     func(e *event.Event) { e.Kind = "nope" },
		"escape in text":   func(e *event.Event) { e.Text = "hi \x1b]0;owned\x07" },
		"two lines":        func(e *event.Event) { e.Text = "a\nb" },
		"bad user":         func(e *event.Event) { e.User = "al ice" },
		"bidi in text":     func(e *event.Event) { e.Text = "abc\u202edef" },
		"bad node":         func(e *event.Event) { e.Node = "-x" },
		"long text":        func(e *event.Event) { e.Text = strings.Repeat("x", 600) },
		"gpu out of range": func(e *event.Event) { e.GPUs = []int{-1} },
	} {
		e := good
		f(&e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, e)
		}
	}
}

func TestEventFilterAndOrder(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	evs := []event.Event{
		{Seq: 2, Node: "node02", At: at.Add(time.Second), User: "bob"},
		{Seq: 7, Node: "node01", At: at.Add(time.Second), User: "alice"},
		{Seq: 6, Node: "node01", At: at, User: "alice", By: "bob"},
	}
	event.SortEvents(evs)
	var got []uint64
	for _, e := range evs {
		got = append(got, e.Seq)
	}
	if want := []uint64{6, 7, 2}; !equalU(got, want) {
		t.Errorf("order %v, want %v (time, then node, then sequence)", got, want)
	}
	f := event.EventFilter{User: "bob"}
	if !f.Match(&evs[0]) || f.Match(&evs[1]) || !f.Match(&evs[2]) {
		t.Errorf("a user filter matches the events about them and the ones they did")
	}
	if (event.EventFilter{After: 6}).Match(&evs[0]) || !(event.EventFilter{Since: at.Add(time.Second)}).Match(&evs[1]) {
		t.Errorf("After and Since filters wrong")
	}
}

func equalU(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAgentAwayWords: an agent gone away is recorded in words for the state
// people see it in, saying what becomes of the work there — never "the
// agent on node02 is left".
func TestAgentAwayWords(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	for _, tt := range []struct{ shown, want string }{
		{queue.NodeRestarting, "the agent on node02 is restarting: its leases and gang ranks hold for the grace"},
		{queue.NodeLeft, "the agent on node02 left the cluster for good: its gang ranks are lost"},
		{queue.NodeSuspect, "the agent on node02 is not answering (suspect)"},
		{queue.NodeDead, "the agent on node02 is down past the grace: its gang ranks are lost"},
	} {
		e := event.AgentAwayEvent("node01", "node02", tt.shown, at)
		if e.Kind != event.EventAgentLeave || !strings.HasPrefix(e.Text, tt.want) || !strings.HasSuffix(e.Text, "its GPUs show as unknown") {
			t.Errorf("node02 shown %s: %s %q, want %s %q… its GPUs show as unknown", tt.shown, e.Kind, e.Text, event.EventAgentLeave, tt.want)
		}
		e.Seq = 1
		if err := e.Validate(); err != nil {
			t.Errorf("node02 shown %s: %v", tt.shown, err)
		}
	}
}
