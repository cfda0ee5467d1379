package store_test

import (
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/store"
)

func mkEvent(seq uint64, at time.Time, user string) event.Event {
	l := mkLease(seq, 0)
	l.User = user
	e := event.LeaseEvent(event.EventClaim, l, at)
	e.Seq = seq
	return e
}

func TestEventsRoundTripFilterPrune(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if last, err := s.LastEventSeq(); err != nil || last != 0 {
		t.Fatalf("a new store's last event = %d, %v; want 0", last, err)
	}
	var evs []event.Event
	for i := uint64(1); i <= 10; i++ {
		user := "alice"
		if i%2 == 0 {
			user = "bob"
		}
		evs = append(evs, mkEvent(i, t0.Add(time.Duration(i)*time.Hour), user))
	}
	if err := s.AppendEvents(evs[:4]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(evs[4:]); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastEventSeq(); last != 10 {
		t.Errorf("last event = %d, want 10", last)
	}
	got, more, err := s.Events(event.EventFilter{}, 3)
	if err != nil || !more || len(got) != 3 || got[0].Seq != 1 || got[2].Seq != 3 {
		t.Errorf("first 3 events = %v (more %v, err %v); want 1..3 and more", seqs(got), more, err)
	}
	sameJSON(t, got[0], evs[0])
	got, _, _ = s.Events(event.EventFilter{After: 7}, 100)
	if want := []uint64{8, 9, 10}; !equalSeqs(got, want) {
		t.Errorf("after 7: %v, want %v", seqs(got), want)
	}
	got, _, _ = s.Events(event.EventFilter{Since: t0.Add(8 * time.Hour), User: "bob"}, 100)
	if want := []uint64{8, 10}; !equalSeqs(got, want) {
		t.Errorf("bob's since 8h: %v, want %v", seqs(got), want)
	}

	// Reopened, the log is whole; pruning forgets the oldest only.
	s.Close()
	s = open(t, dir)
	if n, err := s.PruneEvents(t0.Add(3*time.Hour+time.Minute), 100); err != nil || n != 3 {
		t.Errorf("prune before 3h01 forgot %d (%v), want 3", n, err)
	}
	got, _, _ = s.Events(event.EventFilter{}, 100)
	if len(got) != 7 || got[0].Seq != 4 {
		t.Errorf("after pruning: %v, want 4..10", seqs(got))
	}
	s.Close()
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("a pruned log reopens with warnings %v", w)
	}
}

func TestNotifySettings(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	st := event.NotifySetting{User: "alice", URL: "https://hooks.example.com/x", Format: event.WebhookJSON, SetAt: t0}
	if err := s.PutSetting(st); err != nil {
		t.Fatal(err)
	}
	st2 := event.NotifySetting{User: "bob", URL: "https://ntfy.sh/bob", Format: event.WebhookText, SetAt: t0}
	if err := s.PutSetting(st2); err != nil {
		t.Fatal(err)
	}
	st.URL = "https://hooks.example.com/y"
	if err := s.PutSetting(st); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSetting("bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSetting("carol"); err != nil {
		t.Errorf("forgetting a setting nobody set: %v", err)
	}
	s.Close()
	s = open(t, dir)
	got, err := s.Settings()
	if err != nil || len(got) != 1 || got[0].URL != st.URL {
		t.Fatalf("settings after reopening = %+v, %v; want alice's second", got, err)
	}
	if err := s.PutSetting(event.NotifySetting{User: "alice", URL: "has space", Format: "json", SetAt: t0}); err == nil {
		t.Errorf("a webhook with a space was kept")
	}
}

// TestEventDamageWarnsAndIsNamed flips a bit in a stored event: the store
// still opens (leases are whole) with a warning, and reading the log names
// the damage instead of returning a wrong event.
func TestEventDamageWarnsAndIsNamed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, mkLease(1, 0))
	if err := s.AppendEvents([]event.Event{mkEvent(1, t0, "alice"), mkEvent(2, t0, "alice")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bbolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("events"))
		k := binary.BigEndian.AppendUint64(nil, 2)
		v := append([]byte(nil), b.Get(k)...)
		v[10] ^= 0x04
		return b.Put(k, v)
	})
	db.Close()
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "event log") {
		t.Errorf("warnings = %v, want one about the event log", w)
	}
	if ls, _ := load(t, s); len(ls) != 1 {
		t.Errorf("leases after event damage: %d, want 1", len(ls))
	}
	if _, _, err := s.Events(event.EventFilter{}, 10); err == nil || !strings.Contains(err.Error(), "event 2") {
		t.Errorf("reading a damaged log: %v, want the damage named", err)
	}
}

// TestOlderFileGainsEventBuckets: a schema-2 file from before the event log
// opens without warnings and takes events.
func TestOlderFileGainsEventBuckets(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, mkLease(1, 0))
	s.Close()
	db, _ := bbolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
	db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket([]byte("events")) != nil {
			t.Errorf("a store with no events has an events bucket")
		}
		return nil
	})
	db.Close()
	s = open(t, dir)
	if err := s.AppendEvents([]event.Event{mkEvent(1, t0, "alice")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings %v", w)
	}
}

func seqs(evs []event.Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func equalSeqs(evs []event.Event, want []uint64) bool {
	got := seqs(evs)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestEventsRideLeaseWrites: events waiting when a lease is written go to
// disk in that lease's transaction, so they cost no fsync of their own.
func TestEventsRideLeaseWrites(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	waiting := []event.Event{mkEvent(1, t0, "alice"), mkEvent(2, t0, "alice")}
	var written []event.Event
	var ok bool
	s.RideEvents(func() []event.Event { w := waiting; waiting = nil; return w },
		func(evs []event.Event, wr bool) { written, ok = evs, wr })
	put(t, s, mkLease(1, 0))
	if written != nil {
		t.Fatalf("a new lease's transaction carried %d events: a claim must wait for nothing else", len(written))
	}
	l := mkLease(1, 0)
	l.Warned = true
	put(t, s, l)
	if !ok || len(written) != 2 {
		t.Fatalf("after a lease update: done(%d events, %v), want the 2 waiting, written", len(written), ok)
	}
	if evs, _, err := s.Events(event.EventFilter{}, 10); err != nil || len(evs) != 2 {
		t.Errorf("events in the store: %d (%v), want 2", len(evs), err)
	}
	s.Close()
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("a store with carried events reopens with warnings %v", w)
	}
	if ls, _ := load(t, s); len(ls) != 1 {
		t.Errorf("leases: %d, want 1", len(ls))
	}
}

// BenchmarkPutCarryingEvents measures a lease write (commit + fsync) alone
// and carrying the event it makes: what a claim costs with the event log.
func BenchmarkPutCarryingEvents(b *testing.B) {
	for _, carry := range []bool{false, true} {
		name := "alone"
		if carry {
			name = "carrying-an-event"
		}
		b.Run(name, func(b *testing.B) {
			s, err := store.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var seq uint64
			var waiting []event.Event
			if carry {
				s.RideEvents(func() []event.Event { w := waiting; waiting = nil; return w }, func([]event.Event, bool) {})
			}
			b.ResetTimer()
			l := mkLease(1, 0)
			if err := s.Put(l); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// An update (an extension, a warning): a grant's
				// transaction never carries events.
				l.Warned = i%2 == 0
				if carry {
					seq++
					waiting = []event.Event{mkEvent(seq, t0, "alice")}
				}
				if err := s.Put(l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
