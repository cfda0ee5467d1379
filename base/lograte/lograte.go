// Package lograte keeps refusal logs readable under attack. Every refusal
// path of the agent (a connection over a cap, a key refused, a stream
// dropped) logs a line, and an attacker who can make a refusal can make
// thousands a second: 14,744 lines in three seconds from one host without
// an SSH key. A Limiter lets one line of a kind from a source through per
// interval, and a bounded number of sources per kind; the next line that
// passes says how many were held back, so the count is never lost.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults for New's zero arguments.
const (
	// DefaultEvery is how long a kind of line from one source stays quiet
	// after it was logged.
	DefaultEvery = 10 * time.Second
	// DefaultSourcesPerKind is how many different sources may log one kind
	// of line per interval; the rest (a flood from a whole subnet) share
	// one count.
	DefaultSourcesPerKind = 8
	// maxKeys bounds the memory a flood from many sources can take.
	maxKeys = 4096
)

// Limiter decides which refusal lines are logged. It is safe for
// concurrent use; Allow never blocks on I/O.
type Limiter struct {
	every   time.Duration
	perKind int
	now     func() time.Time
	mu      sync.Mutex
	sources map[key]*held
	kinds   map[string]*kindBudget
}

type key struct{ kind, source string }

// held is one kind of line from one source: when it last passed and how
// many were held back since.
type held struct {
	last time.Time
	n    int
}

// kindBudget counts, per kind, the sources that logged in the current
// interval and the lines held back because the budget was spent.
type kindBudget struct {
	start   time.Time
	sources int
	n       int
}

// New makes a Limiter that passes one line per kind and source every
// interval (DefaultEvery when zero), at most perKind sources per kind and
// interval (DefaultSourcesPerKind when zero), on the clock now (time.Now
// when nil).
func New(every time.Duration, perKind int, now func() time.Time) *Limiter {
	if every <= 0 {
		every = DefaultEvery
	}
	if perKind <= 0 {
		perKind = DefaultSourcesPerKind
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, perKind: perKind, now: now, sources: map[key]*held{}, kinds: map[string]*kindBudget{}}
}

// Allow reports whether a line of kind from source may be logged now and,
// when it may, how many lines like it were held back since the last one
// (from this source, plus those of sources past the kind's budget).
func (l *Limiter) Allow(kind, source string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	kb := l.kinds[kind]
	if kb == nil {
		kb = &kindBudget{start: now}
		l.kinds[kind] = kb
	}
	if now.Sub(kb.start) >= l.every || now.Before(kb.start) {
		kb.start, kb.sources = now, 0
	}
	k := key{kind, source}
	h := l.sources[k]
	if h != nil && now.Sub(h.last) < l.every && !now.Before(h.last) {
		h.n++
		return false, 0
	}
	if kb.sources >= l.perKind {
		kb.n++
		return false, 0
	}
	if h == nil {
		if len(l.sources) >= maxKeys {
			l.forget(now)
		}
		if len(l.sources) >= maxKeys {
			kb.n++
			return false, 0
		}
		h = &held{}
		l.sources[k] = h
	}
	kb.sources++
	suppressed = h.n + kb.n
	h.last, h.n, kb.n = now, 0, 0
	return true, suppressed
}

// forget drops sources quiet for a whole interval; what they held back is
// moved to their kind's count, so it is still reported.
func (l *Limiter) forget(now time.Time) {
	for k, h := range l.sources {
		if now.Sub(h.last) >= l.every || now.Before(h.last) {
			if h.n > 0 {
				if kb := l.kinds[k.kind]; kb != nil {
					kb.n += h.n
				}
			}
			delete(l.sources, k)
		}
	}
}

// Log writes msg at level to log when the Limiter allows a line of that
// kind (msg is the kind) from source, with "suppressed" set to how many
// were held back since the last one.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, source, msg string, args ...any) {
	ok, n := l.Allow(msg, source)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, args...)
}
