package events

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// count returns the events of f in l, by kind, with the "events-not-kept"
// warnings apart.
func count(t *testing.T, l *Log, f event.EventFilter) (byKind map[event.EventKind]int, notKept []event.Event) {
	t.Helper()
	evs, _, err := l.Events(f, 100000)
	if err != nil {
		t.Fatal(err)
	}
	byKind = map[event.EventKind]int{}
	for _, e := range evs {
		if e.Reason == "events-not-kept" {
			notKept = append(notKept, e)
			continue
		}
		byKind[e.Kind]++
	}
	return byKind, notKept
}

// Weak 3 of the third round: a claim/release loop wrote events without
// limit (kept 14 days). Weak 6 of the fourth: the cap counted a person's
// claims and releases but not what they lead to (a session's end, a
// warning), so a loop still wrote 11 events a second. Everything about a
// person's leases counts; past the cap one warning says so at once,
// others' events are kept, and the next hour starts with a warning saying
// how many were not kept.
func TestEventsPerUserHourAreCapped(t *testing.T) {
	store := NewMemStore(100000)
	l := New(Config{Node: "node01", PerUserHour: 100}, Deps{Store: store})
	if err := l.Open(); err != nil {
		t.Fatal(err)
	}
	alice := testLease()
	bob := testLease()
	bob.User, bob.ID = "bob", "node01-8"
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * time.Second)
		alice.ID = fmt.Sprintf("node01-%d", 100+i)
		l.Record(event.LeaseEvent(event.EventClaim, alice, at))
		l.Record(event.EndEvent(alice, lease.EndReleased, "", at))
		if i%100 == 0 {
			l.Record(event.LeaseEvent(event.EventClaim, bob, at))
			l.Record(event.WarnEvent(alice, "10m", at))
		}
	}
	got, notKept := count(t, l, event.EventFilter{User: "alice"})
	if kept := got[event.EventClaim] + got[event.EventRelease] + got[event.EventEnd] + got[event.EventWarn]; kept != 100 {
		t.Errorf("alice's 2010 events in 17 minutes kept %d (%v), want 100", kept, got)
	}
	if len(notKept) != 1 || !strings.Contains(notKept[0].Text, "until 17:00 the rest are counted, not kept") {
		t.Errorf("warnings that alice is over her cap: %+v, want one that says until when", notKept)
	}
	if b, _ := count(t, l, event.EventFilter{User: "bob"}); b[event.EventClaim] != 10 {
		t.Errorf("bob's claims kept: %d, want all 10", b[event.EventClaim])
	}
	// The next hour: her next claim is kept, after a warning with the count.
	alice.ID = "node01-5000"
	l.Record(event.LeaseEvent(event.EventClaim, alice, t0.Add(2*time.Hour)))
	evs, _, _ := l.Events(event.EventFilter{User: "alice"}, 100000)
	last := evs[len(evs)-2]
	if !strings.Contains(last.Text, "1910 events of alice's") || !strings.Contains(last.Text, "over 100 an hour") {
		t.Errorf("the warning after the hour says %q, want the 1910 not kept and the limit", last.Text)
	}
	if n, ok := last.Notice(); !ok || n.User != "alice" {
		t.Errorf("the warning is no notice to alice: %+v", n)
	}
}

// Weak 6 of the fourth round: past the cap, a `dibs run -- true` loop (a
// claim, its session's end and a "1m" warning per run) and an array (a
// submission, a start and a finish per element) still added events, since
// only the first of each was counted. Each is bounded by the cap; an
// admin's ends of her leases are the admin's, and a squatter's process on
// her GPU is the squatter's, so neither spends her budget.
func TestEventsCapCountsWhatActionsLeadTo(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(i int, at time.Time) []event.Event
	}{
		{"run loop", func(i int, at time.Time) []event.Event {
			l := testLease()
			l.ID, l.Session = fmt.Sprintf("node01-%d", i), fmt.Sprintf("node01-%d", i)
			return []event.Event{event.LeaseEvent(event.EventClaim, l, at), event.WarnEvent(l, "1m", at),
				event.EndEvent(l, lease.EndSessionFailed, "", at), event.EndEvent(l, lease.EndExpired, "", at)}
		}},
		{"array", func(i int, at time.Time) []event.Event {
			q := queue.QueueEntry{ID: fmt.Sprintf("node01-q%d", i), Origin: "node01", User: "alice", Nodes: 1, GPUsPerNode: 1}
			return []event.Event{event.EntryEvent(event.EventSubmit, q, "", at), event.EntryEvent(event.EventStart, q, "", at),
				event.EntryEvent(event.EventFinish, q, "", at), event.EntryEvent(event.EventFail, q, "exit 1", at)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(Config{Node: "node01", PerUserHour: 100}, Deps{Store: NewMemStore(100000)})
			if err := l.Open(); err != nil {
				t.Fatal(err)
			}
			for i := range 1000 {
				for _, e := range tc.make(i, t0.Add(time.Duration(i)*time.Second)) {
					l.Record(e)
				}
			}
			got, notKept := count(t, l, event.EventFilter{User: "alice"})
			n := 0
			for _, c := range got {
				n += c
			}
			if n != 100 || len(notKept) != 1 {
				t.Errorf("4000 events of alice's %s kept %d (%v) and %d warnings, want 100 and 1", tc.name, n, got, len(notKept))
			}
		})
	}
	t.Run("others' doings", func(t *testing.T) {
		l := New(Config{Node: "node01", PerUserHour: 10}, Deps{Store: NewMemStore(100000)})
		if err := l.Open(); err != nil {
			t.Fatal(err)
		}
		alice := testLease()
		for i := range 50 {
			at := t0.Add(time.Duration(i) * time.Second)
			l.Record(event.EndEvent(alice, lease.EndByAdmin, "root", at))
			l.Record(event.SquatterEvent("node01", 0, "mallory", 100+i, "python", &alice, at))
		}
		l.Record(event.LeaseEvent(event.EventClaim, alice, t0.Add(time.Minute)))
		evs, _, _ := l.Events(event.EventFilter{}, 100000)
		by := map[string]int{}
		for _, e := range evs {
			switch {
			case e.Reason == "events-not-kept":
			case e.By == "root":
				by["root"]++
			case e.Kind == event.EventSquatter:
				by["mallory"]++
			default:
				by[e.User]++
			}
		}
		if by["root"] != 10 || by["mallory"] != 10 || by["alice"] != 1 {
			t.Errorf("kept, by whose doing: %v; want root's and mallory's capped at 10 and alice's own claim kept", by)
		}
	})
}
