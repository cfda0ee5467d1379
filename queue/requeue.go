package queue

import (
	"strings"
	"time"
)

// A run that failed (or was preempted for someone else) goes back in line
// when it asked to, a restart at a time, spaced by a growing delay.

// AfterRun is the entry after its attempt ended: back in the queue for
// another attempt when it failed and asked for it (requeue true), else
// finished for good. A requeued entry waits until RetryAt (zero: at once;
// see RequeueDelay), and carries why it failed.
func (e QueueEntry) AfterRun(failed bool) (next QueueEntry, requeue bool) {
	if !failed || !e.Requeue || e.Restarts >= e.MaxRestarts {
		return e, false
	}
	e.Running = false
	e.Restarts++
	e.Attempt++
	e.Placer = ""
	return e, true
}

// RequeueDelay is how long a run requeued for its restart'th time waits
// before it may start again: base, doubled for every restart before it, at
// most limit, then scaled by a jitter in [0.75, 1.25) drawn from rnd (a
// number in [0, 1)), so gangs that failed together do not all retry in the
// same second. A rank that cannot start no longer uses up every restart in
// seconds.
func RequeueDelay(restart int, base, limit time.Duration, rnd float64) time.Duration {
	d := base
	for i := 1; i < restart && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return time.Duration(float64(d) * (0.75 + rnd/2))
}

// MaxRetryWhy bounds QueueEntry.RetryWhy, as it travels in every node's
// gossiped state.
const MaxRetryWhy = 200

// ClipRetryWhy makes a failure's reason fit QueueEntry.RetryWhy: one line,
// at most MaxRetryWhy bytes, cut on a rune boundary.
func ClipRetryWhy(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= MaxRetryWhy {
		return s
	}
	cut := MaxRetryWhy - len("…")
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// Backoff reports whether a requeued entry still waits to retry at now.
func (e *QueueEntry) Backoff(now time.Time) bool { return !e.RetryAt.IsZero() && now.Before(e.RetryAt) }

// AfterPreempt is the entry after its attempt was preempted for someone
// else: back in the queue unless it was submitted with NoRequeue. It is not
// a restart (the run did not fail), so MaxRestarts does not bound it.
func (e QueueEntry) AfterPreempt() (next QueueEntry, requeue bool) {
	if e.NoRequeue {
		return e, false
	}
	e.Running = false
	e.Attempt++
	e.Placer = ""
	return e, true
}
