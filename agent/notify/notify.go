// Package notify is the daemon's "something changed" signal: every part
// that changes what a board shows (the node's leases, the queue, the
// cluster) calls Notify, and every open board, watch stream and waiting
// command holds a channel that closes at the next change. Nobody polls.
package notify

import "sync"

// Signal broadcasts changes. The zero value is ready to use and safe for
// concurrent use.
type Signal struct {
	mu      sync.Mutex
	ch      chan struct{}
	version uint64
}

// Wait returns a channel closed at the next Notify.
func (s *Signal) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Notify wakes every waiter and counts a change.
func (s *Signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Version counts the changes so far.
func (s *Signal) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}
