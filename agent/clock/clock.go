// Package clock is the daemon's time: now, tickers and timers behind one
// interface, so every loop of the agent runs on a clock a test can move by
// hand instead of sleeping. Real is the wall clock with its monotonic
// reading; Fake moves only when told.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes tickers and timers. Implementations are
// safe for concurrent use.
type Clock interface {
	// Now is the current time. In production it carries a monotonic
	// reading, so durations between two readings survive a wall-clock step.
	Now() time.Time
	// NewTicker delivers the time every d on C until Stop.
	NewTicker(d time.Duration) Ticker
	// After delivers the time once, d from now.
	After(d time.Duration) <-chan time.Time
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Fake is a clock that moves only by Advance and Set. Tickers fire (at most
// once per Advance, as a time.Ticker drops ticks a slow reader misses) and
// timers fire when the fake time passes their deadline. Its zero value is
// not usable; make one with NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

type fakeWaiter struct {
	at     time.Time
	period time.Duration // 0 for a one-shot timer
	ch     chan time.Time
	done   bool
}

// NewFake starts a fake clock at t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTicker implements Clock.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{at: f.now.Add(d), period: d, ch: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, w)
	return &fakeTicker{f: f, w: w}
}

// After implements Clock.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		w.ch <- f.now
		return w.ch
	}
	f.waiters = append(f.waiters, w)
	return w.ch
}

// Advance moves the clock forward by d and fires what came due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t — backwards too, as a wall-clock step would.
// Tickers and timers fire when t is at or past their deadline.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if w.done {
			continue
		}
		if !t.Before(w.at) {
			select {
			case w.ch <- t:
			default:
			}
			if w.period == 0 {
				w.done = true
				continue
			}
			for !t.Before(w.at) {
				w.at = w.at.Add(w.period)
			}
		}
		keep = append(keep, w)
	}
	f.waiters = keep
}

type fakeTicker struct {
	f *Fake
	w *fakeWaiter
}

func (t *fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	t.w.done = true
	t.f.mu.Unlock()
}
