// Package storetest is an in-memory queue.Store for tests of the packages
// above the store, with the disk's ways of failing on demand: an fsync that
// fails, a full disk, a slow disk, and a crash that keeps only what was
// durably written. It answers as the bbolt store does (same order, same
// refusals, same messages), and its tests run one sequence of operations
// against both to keep it so.
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
)

// Fault is a way a write to the disk goes wrong.
type Fault int

const (
	// NoFault writes normally.
	NoFault Fault = iota
	// SyncError fails the fsync that makes a write durable: the write
	// returns the error (EIO, or Options.SyncErr) and nothing of it is kept,
	// as bbolt rolls back a transaction whose fsync failed.
	SyncError
	// DiskFull refuses the write as the bbolt store does on a full disk:
	// a refusal.Error with CodeUnavailable saying what to free.
	DiskFull
)

func (f Fault) String() string {
	switch f {
	case NoFault:
		return "no fault"
	case SyncError:
		return "fsync error"
	case DiskFull:
		return "disk full"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Options configure a fake store.
type Options struct {
	// Path names the fake file in messages, as the bbolt store names its
	// dibs.db. Default "/var/lib/dibs/dibs.db".
	Path string
	// Sleep takes each write's delay (SetDelay): a fake clock's advance,
	// or a function that blocks until the test lets the write go on. Nil:
	// the delay is only counted (Slept), never slept.
	Sleep func(time.Duration)
	// SyncErr is what a SyncError fault returns. Default syscall.EIO, what
	// fdatasync reports when the disk lost the write.
	SyncErr error
}

// ErrCrashed is what a store answers once Crash has replaced it: a process
// that crashed does not go on writing.
var ErrCrashed = errors.New("the store crashed (storetest): use the store Crash returned")

// Store is an in-memory queue.Store with injectable faults. Safe for
// concurrent use: writes are serialised as bbolt's are (one writer, readers
// alongside), and a write becomes visible and durable at once, when it
// returns nil.
type Store struct {
	opts Options

	// writeMu is held for a whole write, delay included, as bbolt holds
	// its writer lock for a whole transaction; mu guards the rest and is
	// never held across Sleep.
	writeMu sync.Mutex
	mu      sync.Mutex
	data    data
	fault   Fault
	next    []Fault
	delay   time.Duration
	slept   time.Duration
	writes  int
	closed  bool
	crashed bool
}

var _ queue.Store = (*Store)(nil)

// data is what the file would hold.
type data struct {
	leases    map[string]lease.Lease
	lastToken uint64
	ledger    []lease.LedgerEntry
	entries   map[string]queue.QueueEntry
	queueSeq  uint64
}

func (d *data) clone() data {
	return data{
		leases:    clone(d.leases),
		lastToken: d.lastToken,
		ledger:    slices.Clone(d.ledger),
		entries:   clone(d.entries),
		queueSeq:  d.queueSeq,
	}
}

func clone[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// New returns an empty fake store.
func New(opts Options) *Store {
	if opts.Path == "" {
		opts.Path = "/var/lib/dibs/" + store.FileName
	}
	if opts.SyncErr == nil {
		opts.SyncErr = syscall.EIO
	}
	return &Store{opts: opts, data: data{leases: map[string]lease.Lease{}, entries: map[string]queue.QueueEntry{}}}
}

// Path is the file the fake stands for, as the bbolt store's Path.
func (s *Store) Path() string { return s.opts.Path }

// SetFault makes every write from now on suffer f, until SetFault(NoFault).
func (s *Store) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// FailNext makes only the next n writes suffer f; later ones get whatever
// SetFault says. Calls queue up: FailNext(DiskFull, 1) then FailNext(SyncError,
// 1) fails the next write for a full disk and the one after at fsync.
func (s *Store) FailNext(f Fault, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.next = append(s.next, f)
	}
}

// SetDelay makes each write take d, through Options.Sleep, before it lands
// (or fails): a slow disk.
func (s *Store) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Slept is the delay all writes have taken so far.
func (s *Store) Slept() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slept
}

// Writes counts the writes that were made durable.
func (s *Store) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Crash is the process dying: it returns a new store holding only what was
// durably written (every write that returned nil, none that failed, none
// still in flight), with the same options and no faults, as the agent finds
// the file when it starts again. The old store answers ErrCrashed from then
// on, and a write in flight when it crashed fails and is lost.
func (s *Store) Crash() *Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashed = true
	return &Store{opts: s.opts, data: s.data.clone()}
}

// write runs one write as the disk would: the delay, then the fault, then
// apply, all or nothing. op names it for errors, as the bbolt store does.
func (s *Store) write(op string, apply func(d *data)) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%s: %w", op, err)
	}
	f := s.fault
	if len(s.next) > 0 {
		f, s.next = s.next[0], s.next[1:]
	}
	delay := s.delay
	s.slept += delay
	s.mu.Unlock()

	if delay > 0 && s.opts.Sleep != nil {
		s.opts.Sleep(delay)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch f {
	case SyncError:
		return fmt.Errorf("%s: %w", op, s.opts.SyncErr)
	case DiskFull:
		return fmt.Errorf("%s: %w", op, store.DiskFullError(s.opts.Path))
	}
	apply(&s.data)
	s.writes++
	return nil
}

// usable says why the store cannot be used, if it cannot. Call with mu held.
func (s *Store) usable() error {
	switch {
	case s.crashed:
		return ErrCrashed
	case s.closed:
		return errors.New("database not open")
	}
	return nil
}

// read runs fn on the data under the lock.
func (s *Store) read(fn func(d *data)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("read lease store %s: %w", s.opts.Path, err)
	}
	fn(&s.data)
	return nil
}

// copyOf hands out (and takes in) values the caller cannot change behind the
// store's back, the way the bbolt store does: through JSON, which also drops
// monotonic clock readings as the real file does.
func copyOf[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("storetest: encode %T: %v", v, err))
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("storetest: decode %T: %v", v, err))
	}
	return out
}

// Load implements lease.Store.
func (s *Store) Load() ([]lease.Lease, uint64, error) {
	var out []lease.Lease
	var last uint64
	err := s.read(func(d *data) {
		for _, id := range sortedKeys(d.leases) {
			out = append(out, copyOf(d.leases[id]))
		}
		last = d.lastToken
	})
	if err != nil {
		return nil, 0, err
	}
	return out, last, nil
}

// sortedKeys orders as bbolt's keys do: by bytes.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	return keys
}

// Put implements lease.Store.
func (s *Store) Put(l lease.Lease) error {
	op := "save lease " + l.ID
	if l.ID == "" || len(l.GPUs) == 0 && !l.IsService() {
		return fmt.Errorf("%s: a lease needs an id and at least one GPU (a service may hold none)", op)
	}
	l = copyOf(l)
	return s.write(op, func(d *data) {
		d.leases[l.ID] = l
		d.lastToken = max(d.lastToken, l.Token)
	})
}

// End implements lease.Store.
func (s *Store) End(id string, e lease.LedgerEntry) error {
	e = copyOf(e)
	return s.write("end lease "+id, func(d *data) {
		delete(d.leases, id)
		d.ledger = append(d.ledger, e)
	})
}

// Ledger implements lease.Store.
func (s *Store) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	var out []lease.LedgerEntry
	err := s.read(func(d *data) {
		for _, e := range d.ledger {
			if !e.End.Before(since) {
				out = append(out, copyOf(e))
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PutEntry implements lease.Store.
func (s *Store) PutEntry(e queue.QueueEntry, seq uint64) error {
	op := "save queue entry " + e.ID
	if e.ID == "" {
		return fmt.Errorf("%s: a queue entry needs an id", op)
	}
	e = copyOf(e)
	return s.write(op, func(d *data) {
		d.entries[e.ID] = e
		d.queueSeq = max(d.queueSeq, seq)
	})
}

// DeleteEntry implements lease.Store.
func (s *Store) DeleteEntry(id string) error {
	return s.write("remove queue entry "+id, func(d *data) {
		delete(d.entries, id)
	})
}

// Entries implements lease.Store.
func (s *Store) Entries() ([]queue.QueueEntry, uint64, error) {
	var out []queue.QueueEntry
	var seq uint64
	err := s.read(func(d *data) {
		for _, id := range sortedKeys(d.entries) {
			out = append(out, copyOf(d.entries[id]))
		}
		seq = d.queueSeq
	})
	if err != nil {
		return nil, 0, err
	}
	return out, seq, nil
}

// Close implements lease.Store. Like bbolt, a closed store refuses
// everything after, and a second Close is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
