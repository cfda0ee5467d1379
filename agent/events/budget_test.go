package events

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// Weak 3 of the third round: a claim/release loop wrote events without
// limit (kept 14 days). A person's own actions keep at most PerUserHour
// events an hour; the rest are counted, others' events and what happens to
// their work are kept, and the next hour starts with a warning saying how
// many were not kept.
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
	count := func(f event.EventFilter) map[event.EventKind]int {
		evs, _, err := l.Events(f, 100000)
		if err != nil {
			t.Fatal(err)
		}
		n := map[event.EventKind]int{}
		for _, e := range evs {
			n[e.Kind]++
		}
		return n
	}
	got := count(event.EventFilter{User: "alice"})
	if kept := got[event.EventClaim] + got[event.EventRelease] + got[event.EventEnd]; kept != 100 {
		t.Errorf("alice's 2000 claims and releases in 17 minutes kept %d events (%v), want 100", kept, got)
	}
	if got[event.EventWarn] != 10 {
		t.Errorf("alice's warnings kept: %d, want all 10 (what happens to her work is not hers to spend)", got[event.EventWarn])
	}
	if b := count(event.EventFilter{User: "bob"}); b[event.EventClaim] != 10 {
		t.Errorf("bob's claims kept: %d, want all 10", b[event.EventClaim])
	}
	// The next hour: her next claim is kept, after a warning with the count.
	alice.ID = "node01-5000"
	l.Record(event.LeaseEvent(event.EventClaim, alice, t0.Add(2*time.Hour)))
	evs, _, _ := l.Events(event.EventFilter{User: "alice"}, 100000)
	last := evs[len(evs)-2]
	if !strings.Contains(last.Text, "1900 of alice's") || !strings.Contains(last.Text, "over 100 an hour") {
		t.Errorf("the warning after the hour says %q, want the 1900 not kept and the limit", last.Text)
	}
	if n, ok := last.Notice(); !ok || n.User != "alice" {
		t.Errorf("the warning is no notice to alice: %+v", n)
	}
}
