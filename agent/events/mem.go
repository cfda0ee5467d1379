package events

import (
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/event"
)

// MemStore is a event.EventStore in memory, bounded to its newest events:
// what an agent whose lease store keeps no events (a test's fake store)
// uses, and what tests of this package read.
type MemStore struct {
	mu       sync.Mutex
	max      int
	evs      []event.Event
	settings map[string]event.NotifySetting
}

var _ event.EventStore = (*MemStore)(nil)

// NewMemStore keeps at most max events.
func NewMemStore(max int) *MemStore {
	return &MemStore{max: max, settings: map[string]event.NotifySetting{}}
}

// AppendEvents implements event.EventStore.
func (m *MemStore) AppendEvents(evs []event.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evs = append(m.evs, evs...)
	if len(m.evs) > m.max {
		m.evs = slices.Delete(m.evs, 0, len(m.evs)-m.max)
	}
	return nil
}

// Events implements event.EventStore.
func (m *MemStore) Events(f event.EventFilter, limit int) ([]event.Event, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []event.Event
	for i := range m.evs {
		if !f.Match(&m.evs[i]) {
			continue
		}
		if len(out) >= limit {
			return out, true, nil
		}
		out = append(out, m.evs[i])
	}
	return out, false, nil
}

// LastEventSeq implements event.EventStore.
func (m *MemStore) LastEventSeq() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.evs) == 0 {
		return 0, nil
	}
	return m.evs[len(m.evs)-1].Seq, nil
}

// PruneEvents implements event.EventStore.
func (m *MemStore) PruneEvents(before time.Time, max int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for n < len(m.evs) && n < max && m.evs[n].At.Before(before) {
		n++
	}
	m.evs = slices.Delete(m.evs, 0, n)
	return n, nil
}

// PutSetting implements event.EventStore.
func (m *MemStore) PutSetting(s event.NotifySetting) error {
	if err := s.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settings[s.User] = s
	return nil
}

// DeleteSetting implements event.EventStore.
func (m *MemStore) DeleteSetting(user string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.settings, user)
	return nil
}

// Settings implements event.EventStore.
func (m *MemStore) Settings() ([]event.NotifySetting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]event.NotifySetting, 0, len(m.settings))
	for _, s := range m.settings {
		out = append(out, s)
	}
	return out, nil
}
