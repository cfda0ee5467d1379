// Package poll is how the module's tests wait for what another goroutine,
// process or agent will do: check a condition every few milliseconds until
// it holds or a deadline passes (serf's testutil/retry), or watch for the
// whole of a window that something never happens. No test sleeps a fixed
// time and hopes; the one sleep between checks lives here.
package poll

import (
	"testing"
	"time"
)

// Period is how often Wait, Until and Never check: short enough that a test
// goes on soon after its condition holds, long enough not to spin.
const Period = 10 * time.Millisecond

// Wait checks cond every Period until it holds (true) or within has passed
// (false), checking once more at the deadline. For a caller that fails with
// its own message; Until fails for it.
func Wait(within time.Duration, cond func() bool) bool {
	return WaitEvery(Period, within, cond)
}

// WaitEvery is Wait checking every period instead: a latency benchmark
// waits on a finer grain than a test needs.
func WaitEvery(period, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(period, left))
	}
}

// Until checks cond every Period until it holds, and fails tb, saying what
// it waited for, once within has passed.
func Until(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Wait(within, cond) {
		tb.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Never checks bad every Period for the whole of during and fails tb the
// first time it holds: for what must not happen while a test watches (a job
// that must not start, a line that must not repeat). what says what
// happened, as the failure reads it.
func Never(tb testing.TB, during time.Duration, what string, bad func() bool) {
	tb.Helper()
	start := time.Now()
	if WaitEvery(Period, during, bad) {
		tb.Fatalf("%s, %s into a %s watch: it must not happen", what, time.Since(start).Round(time.Millisecond), during)
	}
}
