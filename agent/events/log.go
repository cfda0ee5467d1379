// Package events is what a node records of what happens on it, and how the
// people concerned hear of it: the event log (recorded in memory at once,
// written to the store in batches by one writer, kept for a configured
// time, read by filter and followed through a signal), the fan-out of a
// person's notices to every node, and the webhooks people set for
// themselves.
//
// Recording never waits for a disk or a network: the parts that record (the
// node's single writer, the queue's origin) call Record under their own
// locks, and the claim path pays for an append to a slice. The writing
// costs no fsync of its own either: a store that can (event.EventRider)
// carries the events in the next transaction it makes anyway (a release's,
// never a claim's); the log writes what is left itself after flushDelay, so
// an event reaches the disk within that time.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
)

// maxPending bounds the events held in memory while the store cannot take
// them (a full disk): past it the oldest are dropped, with a warning.
const maxPending = 10000

// pruneEvery is how often old events are forgotten.
const pruneEvery = time.Hour

// flushDelay is how long events wait for a lease change's transaction to
// carry them before the log writes them itself.
const flushDelay = time.Second

// DefaultPerUserHour is how many events one person's doings (claims,
// releases, extensions, submissions, and what they lead to: sessions'
// ends, warnings, queue starts and finishes) may add to a node's log in an
// hour: one every five seconds, far above a person's work and far below a
// claim/release loop's hundred a second.
const DefaultPerUserHour = 720

// Config is what the log is told.
type Config struct {
	Node string
	// Keep is how long events are kept (default event.DefaultEventKeep).
	Keep time.Duration
	// PerUserHour caps the events of a person's doings kept per hour
	// (default DefaultPerUserHour; chargedTo says whose an event is); past
	// it they are counted, not kept, their notices still go out, one
	// warning says the cap was reached and another, after the hour, how
	// many were not kept.
	PerUserHour int
	Log         *slog.Logger
}

// userBudget is one person's events in the current hour.
type userBudget struct {
	start   time.Time
	kept    int
	dropped int
}

// Deps are what the log drives.
type Deps struct {
	// Store keeps the events; nil keeps them in memory (bounded).
	Store event.EventStore
	Clock clock.Clock
	// Notice is called (from the log's own goroutine, never the
	// recorder's) with each event's notice, for the ones that have one.
	Notice func(event.Notice)
}

// Log is one node's event log. Safe for concurrent use.
type Log struct {
	cfg  Config
	deps Deps

	mu       sync.Mutex
	seq      uint64
	written  uint64        // highest sequence the store has
	pending  []event.Event // recorded, not yet handed to a writer, in order
	inflight []event.Event // handed to a writer, not yet known written
	notices  []event.Notice
	wake     chan struct{}
	riding   bool // the store carries events in its own transactions
	armed    bool // the writer was woken for what is pending

	changed notify.Signal
	budgets map[string]*userBudget

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds a log; Open loads where it left off, Run starts its writer.
func New(cfg Config, deps Deps) *Log {
	if cfg.Keep <= 0 {
		cfg.Keep = event.DefaultEventKeep
	}
	if cfg.PerUserHour <= 0 {
		cfg.PerUserHour = DefaultPerUserHour
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Store == nil {
		deps.Store = NewMemStore(maxPending)
	}
	if deps.Clock == nil {
		deps.Clock = clock.Real()
	}
	return &Log{cfg: cfg, deps: deps, wake: make(chan struct{}, 1), budgets: map[string]*userBudget{}}
}

// Open reads the last sequence written and forgets what is past keeping.
func (l *Log) Open() error {
	last, err := l.deps.Store.LastEventSeq()
	if err != nil {
		// A damaged log must not keep the node from serving leases: start
		// numbering past anything a clock-ordered key could hold.
		l.cfg.Log.Warn("event log: read the last event; numbering from the clock", "err", err)
		last = uint64(l.deps.Clock.Now().UnixNano())
	}
	l.startAt(last)
	l.prune()
	if r, ok := l.deps.Store.(event.EventRider); ok {
		r.RideEvents(l.take, l.settle)
		l.riding = true
	}
	return nil
}

// take hands the waiting events to a writer.
func (l *Log) take() []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.pending
	l.pending = nil
	l.inflight = append(l.inflight, batch...)
	return batch
}

// settle hears how a writer fared with a batch take handed it: written, they
// are the store's; not, they wait again.
func (l *Log) settle(batch []event.Event, written bool) {
	if len(batch) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	in := map[uint64]bool{}
	for _, e := range batch {
		in[e.Seq] = true
	}
	l.inflight = slices.DeleteFunc(l.inflight, func(e event.Event) bool { return in[e.Seq] })
	if written {
		l.written = max(l.written, batch[len(batch)-1].Seq)
		return
	}
	l.pending = append(slices.Clone(batch), l.pending...)
	slices.SortFunc(l.pending, func(a, b event.Event) int { return cmpSeq(a.Seq, b.Seq) })
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Run starts the writer; Close stops it after writing what is pending.
func (l *Log) Run() {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.done = make(chan struct{})
	go l.loop()
}

// Close writes what is pending and stops the writer.
func (l *Log) Close() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
	l.flush()
}

// Record adds an event: it gets this node's name, the time (when unset)
// and the next sequence number, and is written to the store soon after.
// It never blocks on the disk. An event over its person's hourly budget
// is counted, not kept, and its notice still goes out (budgetLocked).
func (l *Log) Record(e event.Event) {
	if e.Node == "" {
		e.Node = l.cfg.Node
	}
	if e.At.IsZero() {
		e.At = l.deps.Clock.Now().Round(0)
	}
	r := l.enqueue(e)
	if r.over != "" {
		l.cfg.Log.Warn("event log: a person is over their events for the hour; counting the rest", "user", r.over, "max", l.cfg.PerUserHour)
	}
	if r.dropped > 0 {
		l.cfg.Log.Warn("event log: the store has not taken events for a while; dropping the oldest", "dropped", r.dropped)
	}
	if r.wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	if r.added {
		l.changed.Notify()
	}
}

// chargedTo names the person whose hourly budget e counts against: the
// person whose doing it is, or whose lease, run or request it is about.
// Everything a person's actions lead to counts, not only the actions: a
// `dibs run -- true` loop makes a claim, a session's end and a "1m" warning
// per run, an array a submission, a start and a finish per element, and
// capping the first of each alone left the rest (11 events a second) free.
// An admin's action on someone's lease is the admin's doing; a process
// on a GPU without its lease is its owner's (Reason), not the holder's,
// so a squatter cannot spend the budget of the person it squats on. The
// cluster's own events (agents joining and leaving) are nobody's.
func chargedTo(e event.Event) string {
	if e.By != "" && e.By != e.User && e.By != event.ByCluster && words.ValidUserName(e.By) {
		return e.By
	}
	if e.Kind == event.EventSquatter {
		if words.ValidUserName(e.Reason) {
			return e.Reason
		}
		return ""
	}
	return e.User
}

// budgetLocked decides whether e is kept under its person's hourly budget.
// When it is the first not kept this hour, summary is the warning that
// says so (kept, and a notice to the person); when an hour in which some
// were not kept is over, summary is the warning that says how many. A
// person thus keeps at most PerUserHour events and two warnings an hour
// on each node. over names the person when e is the first over their
// budget this hour, for the caller to log once mu is released. Call with mu
// held.
func (l *Log) budgetLocked(e event.Event) (summary *event.Event, keep bool, over string) {
	who := chargedTo(e)
	if who == "" {
		return nil, true, ""
	}
	b := l.budgets[who]
	if b == nil || e.At.Sub(b.start) >= time.Hour || e.At.Before(b.start) {
		if b != nil && b.dropped > 0 {
			summary = &event.Event{Node: l.cfg.Node, At: e.At, Kind: event.EventWarn, User: who, Reason: "events-not-kept",
				Text: fmt.Sprintf("%d events of %s's runs, leases and requests on %s in the hour from %s were not kept in the event log: over %d an hour (events.per_user_hour)",
					b.dropped, who, l.cfg.Node, b.start.UTC().Format("15:04"), l.cfg.PerUserHour)}
		}
		if len(l.budgets) > 10000 { // forget everyone rather than grow
			clear(l.budgets)
		}
		b = &userBudget{start: e.At}
		l.budgets[who] = b
	}
	if b.kept >= l.cfg.PerUserHour {
		if b.dropped == 0 {
			over = who
			summary = &event.Event{Node: l.cfg.Node, At: e.At, Kind: event.EventWarn, User: who, Reason: "events-not-kept",
				Text: fmt.Sprintf("%s's runs, leases and requests made %d events on %s in the hour from %s (events.per_user_hour): until %s the rest are counted, not kept; notices still go out, and dibs logs finds runs by their own record",
					who, l.cfg.PerUserHour, l.cfg.Node, b.start.UTC().Format("15:04"), b.start.Add(time.Hour).UTC().Format("15:04"))}
		}
		b.dropped++
		return summary, false, over
	}
	b.kept++
	return summary, true, ""
}

// noticeLocked queues e's notice, if it has one, and says whether it did.
// Call with mu held.
func (l *Log) noticeLocked(e event.Event) bool {
	n, ok := e.Notice()
	if ok && l.deps.Notice != nil {
		l.notices = append(l.notices, n)
		return true
	}
	return false
}

// Changes returns a channel closed at the next recorded event.
func (l *Log) Changes() <-chan struct{} { return l.changed.Wait() }

// Last is the sequence of the newest event recorded.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// startAt numbers events on from last, the newest the store holds.
func (l *Log) startAt(last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq, l.written = last, last
}

// enqueued is what recording one event did, for Record to act on once the
// lock is released: added, some event was queued (e may only be counted);
// wake, the writer should be woken; dropped, how many of the oldest queued
// events were let go because the store has not taken them; over, the person
// who just went over their hourly budget, if any.
type enqueued struct {
	added, wake bool
	dropped     int
	over        string
}

// enqueue numbers e (and the summary its budget may add) and queues them for
// the writer, under the lock and with no I/O.
func (l *Log) enqueue(e event.Event) (r enqueued) {
	l.mu.Lock()
	defer l.mu.Unlock()
	summary, keep, over := l.budgetLocked(e)
	r.over = over
	var add []event.Event
	if summary != nil {
		add = append(add, *summary)
	}
	notice := false
	if keep {
		add = append(add, e)
	} else {
		notice = l.noticeLocked(e)
	}
	for _, e := range add {
		l.seq++
		e.Seq = l.seq
		l.pending = append(l.pending, e)
		notice = l.noticeLocked(e) || notice
	}
	if len(l.pending) > maxPending {
		r.dropped = len(l.pending) - maxPending
		l.pending = slices.Delete(l.pending, 0, r.dropped)
	}
	// The writer wakes once per batch (it then waits for a transaction to
	// carry the events), and at once for a notice: a claim's path wakes
	// nobody else.
	r.added = len(add) > 0
	r.wake = notice || (r.added && !l.armed)
	l.armed = l.armed || r.added
	return r
}

// Events returns the events f matches, oldest first, at most limit; more
// says whether there are others past them. Events recorded and not yet
// written are included.
func (l *Log) Events(f event.EventFilter, limit int) ([]event.Event, bool, error) {
	written, pending := l.unwritten()
	slices.SortFunc(pending, func(a, b event.Event) int { return cmpSeq(a.Seq, b.Seq) })
	var out []event.Event
	more := false
	if f.After < written {
		var err error
		if out, more, err = l.deps.Store.Events(f, limit); err != nil {
			return nil, false, err
		}
	}
	last := f.After
	if len(out) > 0 {
		last = out[len(out)-1].Seq
	}
	for i := range pending {
		e := &pending[i]
		if e.Seq <= last || !f.Match(e) {
			continue
		}
		if more || len(out) >= limit {
			more = true
			break
		}
		out = append(out, *e)
	}
	return out, more, nil
}

func (l *Log) loop() {
	defer close(l.done)
	prune := l.deps.Clock.NewTicker(pruneEvery)
	defer prune.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.wake:
			l.dispatch()
			if l.riding {
				l.await()
			}
			l.flush()
		case <-prune.C():
			l.prune()
		}
	}
}

// await gives a lease change's transaction flushDelay to carry the events
// (a busy node writes no event on its own), handing on notices meanwhile.
func (l *Log) await() {
	timer := l.deps.Clock.After(flushDelay)
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-timer:
			return
		case <-l.wake:
			l.dispatch()
		}
	}
}

// unwritten is the newest sequence the store holds and a copy of the events
// recorded past it (those a transaction carries now and those waiting).
func (l *Log) unwritten() (written uint64, pending []event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written, append(slices.Clone(l.inflight), l.pending...)
}

// takeNotices hands over the notices recorded so far, leaving none.
func (l *Log) takeNotices() []event.Notice {
	l.mu.Lock()
	defer l.mu.Unlock()
	notices := l.notices
	l.notices = nil
	return notices
}

// disarm lets the next recorded event wake the writer again.
func (l *Log) disarm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
}

// dispatch hands the notices of the events recorded on.
func (l *Log) dispatch() {
	for _, n := range l.takeNotices() {
		l.deps.Notice(n)
	}
}

// flush writes the events no transaction has carried, in one of its own.
func (l *Log) flush() {
	l.dispatch()
	l.disarm()
	batch := l.take()
	if len(batch) == 0 {
		return
	}
	err := l.deps.Store.AppendEvents(batch)
	if err != nil {
		l.cfg.Log.Warn("event log: save events", "events", len(batch), "err", err)
	}
	l.settle(batch, err == nil)
}

// prune forgets events older than Keep.
func (l *Log) prune() {
	before := l.deps.Clock.Now().Add(-l.cfg.Keep)
	for {
		n, err := l.deps.Store.PruneEvents(before, 5000)
		if err != nil {
			l.cfg.Log.Warn("event log: forget old events", "err", err)
			return
		}
		if n < 5000 {
			return
		}
	}
}
