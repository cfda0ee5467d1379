// Package clock is the daemon's time: the wall clock, a monotonic clock,
// tickers and timers behind one interface, so every loop of the agent runs
// on a clock a test can move by hand instead of sleeping, and a nemesis can
// step one node's wall clock without touching its monotonic one. Real reads
// the system; Fake moves only when told.
package clock

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Clock tells the time and makes tickers and timers. Implementations are
// safe for concurrent use.
type Clock interface {
	// Now is the wall-clock time (with Go's monotonic reading in
	// production).
	Now() time.Time
	// Mono is time on a clock that never steps: since boot, in production,
	// so it keeps counting across an agent restart.
	Mono() time.Duration
	// Boot names what Mono counts from (the kernel's boot id).
	Boot() string
	// NewTicker delivers the time every d on C until Stop; ticks follow
	// the monotonic clock.
	NewTicker(d time.Duration) Ticker
	// After delivers the time once, d from now on the monotonic clock.
	After(d time.Duration) <-chan time.Time
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock: Mono is CLOCK_BOOTTIME, Boot the kernel's boot
// id (both fall back to the process's own monotonic clock where missing).
func Real() Clock { return RealBootFrom(BootIDFile) }

// BootIDFile is where the kernel tells its boot id, new at every boot.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// processBoot begins the boot id of a clock that could not read the
// kernel's: it names the process, not the boot.
const processBoot = "process-"

// RealBootFrom is Real with the boot id read from path instead of
// BootIDFile: a test hook, for nodes that share one kernel (network
// namespaces) but must each seem to reboot on their own. Production uses
// Real.
func RealBootFrom(path string) Clock {
	c := realClock{start: time.Now()}
	if b, err := os.ReadFile(path); err == nil {
		c.boot = strings.TrimSpace(string(b))
	}
	if c.boot == "" {
		c.boot = processBoot + c.start.Format(time.RFC3339Nano)
	}
	return c
}

// KnownBoot reports whether boot (a Clock's Boot) names the kernel's boot,
// so that a different one means the node rebooted; a clock that could not
// read it names only its process, new at every agent start.
func KnownBoot(boot string) bool { return boot != "" && !strings.HasPrefix(boot, processBoot) }

type realClock struct {
	start time.Time
	boot  string
}

func (c realClock) Now() time.Time { return time.Now() }
func (c realClock) Boot() string   { return c.boot }
func (c realClock) Mono() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	return time.Since(c.start)
}
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Fake is a clock that moves only when told: Advance moves both clocks (and
// fires the tickers and timers that came due, a ticker at most once per
// call, as a time.Ticker drops the ticks a slow reader misses); StepWall
// moves only the wall clock, as an administrator or a bad NTP server would.
// Make one with NewFake.
type Fake struct {
	mu      sync.Mutex
	wall    time.Time
	mono    time.Duration
	boot    string
	waiters []*fakeWaiter
}

type fakeWaiter struct {
	at     time.Duration // on the monotonic clock
	period time.Duration // 0 for a one-shot timer
	ch     chan time.Time
	done   bool
}

// NewFake starts a fake clock at wall time t, an hour after a fake boot.
func NewFake(t time.Time) *Fake { return &Fake{wall: t, mono: time.Hour, boot: "fake-boot"} }

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

// Mono implements Clock.
func (f *Fake) Mono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// Boot implements Clock.
func (f *Fake) Boot() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boot
}

// Reboot starts a new boot: the monotonic clock restarts near zero, as after
// a machine restart.
func (f *Fake) Reboot(boot string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boot, f.mono = boot, time.Minute
	f.waiters = nil
}

// NewTicker implements Clock.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{at: f.mono + d, period: d, ch: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, w)
	return &fakeTicker{f: f, w: w}
}

// After implements Clock.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{at: f.mono + d, ch: make(chan time.Time, 1)}
	if d <= 0 {
		w.ch <- f.wall
		return w.ch
	}
	f.waiters = append(f.waiters, w)
	return w.ch
}

// Advance moves both clocks forward by d and fires what came due.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Advance backwards; use StepWall to step the wall clock back")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall, f.mono = f.wall.Add(d), f.mono+d
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if w.done {
			continue
		}
		if f.mono >= w.at {
			select {
			case w.ch <- f.wall:
			default:
			}
			if w.period == 0 {
				continue
			}
			for f.mono >= w.at {
				w.at += w.period
			}
		}
		keep = append(keep, w)
	}
	f.waiters = keep
}

// StepWall moves only the wall clock by d (back when negative): tickers and
// timers, which follow the monotonic clock, do not notice.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
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
