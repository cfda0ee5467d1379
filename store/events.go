package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/event"
)

// The event log and the notification settings (issue 14) live in two more
// buckets of the same file, with the same record format (version byte,
// JSON, CRC-32C over bucket, key and body) and their own sums in meta:
//
//	events  key: 8-byte big-endian sequence  value: an event record
//	notify  key: user name                   value: a notification setting
//
// Both are optional: a schema-2 file written before them has neither, and
// the first write makes the bucket. A damaged event log or settings bucket
// does not stop the agent (like the ledger): Open warns, and reads of them
// fail with the damage named.
var (
	bucketEvents = []byte("events")
	bucketNotify = []byte("notify")
)

// optionalBuckets are the buckets a schema-2 file may lack.
func optionalBuckets() []string { return []string{string(bucketEvents), string(bucketNotify)} }

var (
	_ event.EventStore = (*Bolt)(nil)
	_ event.EventRider = (*Bolt)(nil)
)

// rider hands the store the events to carry in its transactions.
type rider struct {
	take func() []event.Event
	done func([]event.Event, bool)
}

// RideEvents implements event.EventRider.
func (s *Bolt) RideEvents(take func() []event.Event, done func([]event.Event, bool)) {
	s.rider.Store(&rider{take: take, done: done})
}

// ride writes events into the transaction the store makes anyway. It is
// best effort: a lease change never fails for its events, which then wait
// for the next transaction (false).
func (w *writer) ride(evs []event.Event) bool {
	b, err := w.tx.CreateBucketIfNotExists(bucketEvents)
	if err != nil {
		return false
	}
	d, err := w.digest(bucketEvents)
	if err != nil {
		return false
	}
	for _, e := range evs {
		if b.Get(u64(e.Seq)) != nil {
			continue // written already (a retry after a lost answer)
		}
		body, err := body(eventToRecord(e))
		if err != nil {
			return false
		}
		v := seal(bucketEvents, u64(e.Seq), body)
		if err := b.Put(u64(e.Seq), v); err != nil {
			return false
		}
		d.add(binary.BigEndian.Uint32(v[len(v)-sumSize:]))
	}
	return true
}

// eventRecord is how an event is stored (frozen, like leaseRecord).
type eventRecord struct {
	Seq     uint64    `json:"seq"`
	Node    string    `json:"node"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	User    string    `json:"user,omitempty"`
	By      string    `json:"by,omitempty"`
	Admin   bool      `json:"admin,omitempty"`
	Lease   string    `json:"lease,omitempty"`
	Entry   string    `json:"entry,omitempty"`
	Rank    int       `json:"rank,omitempty"`
	Session string    `json:"session,omitempty"`
	Log     string    `json:"log,omitempty"`
	GPUs    []int     `json:"gpus,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Text    string    `json:"text"`
	// Service and State came with the service events (protocol 8): an
	// older agent's store never holds them, and one reading them back
	// (a downgrade) ignores them.
	Service string `json:"service,omitempty"`
	State   string `json:"state,omitempty"`
}

func eventToRecord(e event.Event) eventRecord {
	return eventRecord{Seq: e.Seq, Node: e.Node, At: e.At, Kind: string(e.Kind), User: e.User, By: e.By, Admin: e.Admin,
		Lease: e.Lease, Entry: e.Entry, Rank: e.Rank, Session: e.Session, Log: e.Log, GPUs: e.GPUs, Reason: e.Reason,
		Subject: e.Subject, Text: e.Text, Service: e.Service, State: e.State}
}

func (r *eventRecord) event() event.Event {
	return event.Event{Seq: r.Seq, Node: r.Node, At: r.At, Kind: event.EventKind(r.Kind), User: r.User, By: r.By,
		Admin: r.Admin, Lease: r.Lease, Entry: r.Entry, Rank: r.Rank, Session: r.Session, Log: r.Log, GPUs: r.GPUs,
		Reason: r.Reason, Subject: r.Subject, Text: r.Text, Service: r.Service, State: r.State}
}

// settingRecord is how a notification setting is stored (frozen).
type settingRecord struct {
	User   string    `json:"user"`
	URL    string    `json:"url"`
	Format string    `json:"format"`
	SetAt  time.Time `json:"set_at"`
}

// AppendEvents implements event.EventStore: the events, in one transaction.
func (s *Bolt) AppendEvents(evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	bodies := make([][]byte, len(evs))
	for i, e := range evs {
		if e.Seq == 0 {
			return fmt.Errorf("save event: it has no sequence number")
		}
		b, err := body(eventToRecord(e))
		if err != nil {
			return fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		bodies[i] = b
	}
	return s.updateRiding(fmt.Sprintf("save %d events", len(evs)), false, func(w *writer) error {
		if _, err := w.tx.CreateBucketIfNotExists(bucketEvents); err != nil {
			return err
		}
		for i, e := range evs {
			if err := w.put(bucketEvents, u64(e.Seq), bodies[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// LastEventSeq implements event.EventStore.
func (s *Bolt) LastEventSeq() (last uint64, err error) {
	err = s.read(func(v view, schema int) error {
		return eachEvent(v, schema, 0, true, func(e event.Event) bool { last = e.Seq; return false })
	})
	return last, err
}

// Events implements event.EventStore: the events f matches, oldest first,
// at most limit of them; more says whether others matched past it.
func (s *Bolt) Events(f event.EventFilter, limit int) (out []event.Event, more bool, err error) {
	err = s.read(func(v view, schema int) error {
		from := f.After + 1
		if f.After == 0 && !f.Since.IsZero() {
			// Walk back from the newest to the first event before Since
			// (less a minute: a stepped clock may have written a few out
			// of order), then read forward from there.
			from = 1
			eachEvent(v, schema, 0, true, func(e event.Event) bool {
				if e.At.Before(f.Since.Add(-time.Minute)) {
					from = e.Seq + 1
					return false
				}
				return true
			})
		}
		return eachEvent(v, schema, from, false, func(e event.Event) bool {
			if !f.Match(&e) {
				return true
			}
			if len(out) >= limit {
				more = true
				return false
			}
			out = append(out, e)
			return true
		})
	})
	if err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// eachEvent calls fn for the events from sequence from on (or, backwards,
// from the newest), until fn returns false. A damaged record stops it with
// the damage named.
func eachEvent(v view, schema int, from uint64, backwards bool, fn func(event.Event) bool) error {
	tv, ok := v.(txView)
	if !ok {
		return errors.New("events are read from a transaction")
	}
	b := tv.tx.Bucket(bucketEvents)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	var k, val []byte
	if backwards {
		k, val = c.Last()
	} else {
		k, val = c.Seek(u64(from))
	}
	for ; k != nil; k, val = step(c, backwards) {
		e, err := decodeEvent(schema, k, val)
		if err != nil {
			return err
		}
		if !fn(e) {
			return nil
		}
	}
	return nil
}

func step(c *bbolt.Cursor, backwards bool) ([]byte, []byte) {
	if backwards {
		return c.Prev()
	}
	return c.Next()
}

func decodeEvent(schema int, k, val []byte) (event.Event, error) {
	if len(k) != 8 {
		return event.Event{}, fmt.Errorf("event key %x is not 8 bytes", k)
	}
	j, _, err := payload(schema, bucketEvents, k, val)
	if err != nil {
		return event.Event{}, fmt.Errorf("event %d: %w", binary.BigEndian.Uint64(k), err)
	}
	var r eventRecord
	if err := json.Unmarshal(j, &r); err != nil || r.Seq != binary.BigEndian.Uint64(k) {
		return event.Event{}, fmt.Errorf("event %d: record does not match its key", binary.BigEndian.Uint64(k))
	}
	return r.event(), nil
}

// PruneEvents implements event.EventStore: the events before t go, oldest
// first, at most max of them in one transaction (so a first prune of a
// long-neglected log does not hold the writer for long); it returns how
// many went.
func (s *Bolt) PruneEvents(before time.Time, max int) (n int, err error) {
	err = s.update("forget old events", func(w *writer) error {
		b := w.tx.Bucket(bucketEvents)
		if b == nil {
			return nil
		}
		var keys [][]byte
		c := b.Cursor()
		for k, val := c.First(); k != nil && len(keys) < max; k, val = c.Next() {
			e, err := decodeEvent(schemaVersion, k, val)
			if err != nil {
				return damage{err}
			}
			if !e.At.Before(before) {
				break
			}
			keys = append(keys, clone(k))
		}
		for _, k := range keys {
			if err := w.delete(bucketEvents, k); err != nil {
				return err
			}
		}
		n = len(keys)
		return nil
	})
	return n, err
}

// PutSetting implements event.EventStore.
func (s *Bolt) PutSetting(st event.NotifySetting) error {
	if err := st.Validate(); err != nil {
		return fmt.Errorf("save the notification setting of %s: %w", st.User, err)
	}
	b, err := body(settingRecord{User: st.User, URL: st.URL, Format: st.Format, SetAt: st.SetAt})
	if err != nil {
		return err
	}
	return s.update("save the notification setting of "+st.User, func(w *writer) error {
		if _, err := w.tx.CreateBucketIfNotExists(bucketNotify); err != nil {
			return err
		}
		return w.put(bucketNotify, []byte(st.User), b)
	})
}

// DeleteSetting implements event.EventStore.
func (s *Bolt) DeleteSetting(user string) error {
	return s.update("forget the notification setting of "+user, func(w *writer) error {
		if w.tx.Bucket(bucketNotify) == nil {
			return nil
		}
		return w.delete(bucketNotify, []byte(user))
	})
}

// Settings implements event.EventStore.
func (s *Bolt) Settings() (out []event.NotifySetting, err error) {
	err = s.read(func(v view, schema int) error {
		_, err := v.each(bucketNotify, func(k, val []byte) error {
			j, _, err := payload(schema, bucketNotify, k, val)
			if err != nil {
				return fmt.Errorf("notification setting %q: %w", k, err)
			}
			var r settingRecord
			if err := json.Unmarshal(j, &r); err != nil || !bytes.Equal([]byte(r.User), k) {
				return fmt.Errorf("notification setting %q: record does not match its key", k)
			}
			out = append(out, event.NotifySetting{User: r.User, URL: r.URL, Format: r.Format, SetAt: r.SetAt})
			return nil
		})
		return err
	})
	return out, err
}

// checkOptional checks the records and sums of the optional buckets, as
// checkLedger does the ledger's.
func checkOptional(v view, schema int) error {
	for _, name := range [][]byte{bucketEvents, bucketNotify} {
		var d digest
		present, err := v.each(name, func(k, val []byte) error {
			_, sum, err := payload(schema, name, k, val)
			if err != nil {
				return fmt.Errorf("%s %x: %w", name, k, err)
			}
			d.add(sum)
			return nil
		})
		if err == nil && present {
			err = checkDigest(v, schema, name, d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
