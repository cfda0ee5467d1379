package poll

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that notes a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestUntilGoesOnOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	r := &recorder{TB: t}
	start := time.Now()
	Until(r, 5*time.Second, "three steps", func() bool { return n.Load() == 3 })
	if r.failed != "" {
		t.Fatalf("Until failed: %s", r.failed)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Until took %s for a condition that held at once", d)
	}
}

func TestUntilFailsSayingWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	checks := 0
	Until(r, 50*time.Millisecond, "the moon", func() bool { checks++; return false })
	if !strings.Contains(r.failed, "timed out after 50ms waiting for the moon") {
		t.Errorf("failure = %q, want it to name what it waited for and how long", r.failed)
	}
	if checks < 2 {
		t.Errorf("checked %d times in 50ms, want several", checks)
	}
}

func TestWaitChecksOnceMoreAtTheDeadline(t *testing.T) {
	calls := 0
	got := Wait(0, func() bool { calls++; return calls == 1 })
	if !got || calls != 1 {
		t.Errorf("Wait(0) = %v after %d calls, want true after 1 (a condition that already holds)", got, calls)
	}
}

func TestNeverWatchesTheWholeWindow(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	Never(r, 60*time.Millisecond, "it happened", func() bool { return false })
	if r.failed != "" {
		t.Fatalf("Never failed: %s", r.failed)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("Never returned after %s of a 60ms watch", d)
	}
}

func TestNeverFailsAtOnceWhenItHappens(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	Never(r, 10*time.Second, "the job started", func() bool { return time.Since(start) > 30*time.Millisecond })
	if !strings.Contains(r.failed, "the job started") || !strings.Contains(r.failed, "must not happen") {
		t.Errorf("failure = %q, want what happened and that it must not", r.failed)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Never watched on for %s after the bad thing happened", d)
	}
}
