package nemesis

import (
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
)

// nodeClock is one node's time: the system's, plus a wall-clock step the
// nemesis may set (as a bad NTP server or an administrator would), and a
// pause that freezes it. While paused, the node's timers and tickers do
// not fire and its clocks stand still; on resume both jump to the present,
// as a process stopped with SIGSTOP finds CLOCK_BOOTTIME moved on.
type nodeClock struct {
	sys clock.Clock

	mu     sync.Mutex
	step   time.Duration
	paused bool
	wall   time.Time     // the wall time frozen at the pause
	mono   time.Duration // the monotonic time frozen at the pause
	resume chan struct{} // closed when the pause ends
	boot   string        // the boot id after a reboot ("": the system's)
}

func newNodeClock(sys clock.Clock) *nodeClock {
	c := &nodeClock{sys: sys, resume: make(chan struct{})}
	close(c.resume)
	return c
}

// Now implements clock.Clock.
func (c *nodeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return c.wall
	}
	return c.sys.Now().Add(c.step)
}

// Mono implements clock.Clock: a step leaves it alone.
func (c *nodeClock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return c.mono
	}
	return c.sys.Mono()
}

// Boot implements clock.Clock: the system's boot id until the nemesis
// reboots the node, then the boot id Reboot gave it. (The monotonic clock
// goes on counting across a reboot here, where a real one restarts near
// zero: a lease's limits written under another boot are measured again
// from the wall clock either way.)
func (c *nodeClock) Boot() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.boot != "" {
		return c.boot
	}
	return c.sys.Boot()
}

// Reboot gives the node a new kernel boot id, as a reboot does.
func (c *nodeClock) Reboot(boot string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boot = boot
}

// Step moves the wall clock by d from the system's (0 puts it right).
func (c *nodeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

// Pause freezes the clock and holds every timer and tick until Resume.
func (c *nodeClock) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return
	}
	c.wall, c.mono = c.sys.Now().Add(c.step), c.sys.Mono()
	c.paused = true
	c.resume = make(chan struct{})
}

// Resume lets the clock go on from the present.
func (c *nodeClock) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		return
	}
	c.paused = false
	close(c.resume)
}

// running is closed whenever the clock is not paused.
func (c *nodeClock) running() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resume
}

// After implements clock.Clock: a timer that comes due during a pause
// fires when the pause ends.
func (c *nodeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-c.sys.After(d)
		<-c.running()
		ch <- c.Now()
	}()
	return ch
}

// NewTicker implements clock.Clock: ticks that fall in a pause are lost,
// as a stopped process misses them, and one is delivered at resume.
func (c *nodeClock) NewTicker(d time.Duration) clock.Ticker {
	t := &nodeTicker{c: c, sys: c.sys.NewTicker(d), ch: make(chan time.Time, 1), stop: make(chan struct{})}
	go t.pump()
	return t
}

type nodeTicker struct {
	c    *nodeClock
	sys  clock.Ticker
	ch   chan time.Time
	stop chan struct{}
	once sync.Once
}

func (t *nodeTicker) pump() {
	for {
		select {
		case <-t.stop:
			return
		case <-t.sys.C():
		}
		select {
		case <-t.c.running():
		case <-t.stop:
			return
		}
		select {
		case t.ch <- t.c.Now():
		default: // a slow reader misses ticks, as with time.Ticker
		}
	}
}

func (t *nodeTicker) C() <-chan time.Time { return t.ch }

func (t *nodeTicker) Stop() {
	t.once.Do(func() {
		t.sys.Stop()
		close(t.stop)
	})
}
