package agenttest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sampling a service's addresses throughout a change (a rolling update, a
// move): StartSampling asks every URL of a list at a fixed pace, each
// sample asking all of them at once, and records what answered; Stop says
// how many samples were taken and when none answered. It is for any test
// that must show an address never went without an answer: a service's
// replicas' own URLs, or a proxy's one address. NetnsGet asks from inside
// a network namespace, where tests put separate hosts.

// Sampler samples a list of URLs at a fixed pace until Stop.
type Sampler struct {
	urls  []string
	get   func(url string) (body string, ok bool)
	every time.Duration
	quit  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	samples int
	// empty are the samples at which no URL answered.
	empty []time.Time
	// bodies counts, per body, the samples at which some URL answered it.
	bodies map[string]int
}

// StartSampling samples urls every `every` until the sampler's Stop
// (called by t.Cleanup too). get is one GET: the body and whether it
// answered 2xx (NetnsGet, or a plain HTTP client's).
func StartSampling(t testing.TB, urls []string, every time.Duration, get func(url string) (string, bool)) *Sampler {
	t.Helper()
	s := &Sampler{urls: urls, get: get, every: every, quit: make(chan struct{}), done: make(chan struct{}), bodies: map[string]int{}}
	go s.loop()
	t.Cleanup(func() { s.Stop() })
	return s
}

func (s *Sampler) loop() {
	defer close(s.done)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		s.sample()
		select {
		case <-s.quit:
			return
		case <-tick.C:
		}
	}
}

func (s *Sampler) sample() {
	at := time.Now()
	bodies := make([]string, len(s.urls))
	oks := make([]bool, len(s.urls))
	var wg sync.WaitGroup
	for i, u := range s.urls {
		wg.Go(func() { bodies[i], oks[i] = s.get(u) })
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	seen := map[string]bool{}
	for i := range oks {
		if oks[i] && !seen[bodies[i]] {
			seen[bodies[i]] = true
			s.bodies[bodies[i]]++
		}
	}
	if len(seen) == 0 {
		s.empty = append(s.empty, at)
	}
}

// SamplingReport is what a Sampler saw.
type SamplingReport struct {
	Samples int
	// Empty are the times of the samples at which no URL answered.
	Empty []time.Time
	// Bodies counts, per body, the samples at which some URL answered it.
	Bodies map[string]int
}

// Stop ends the sampling and says what it saw (later calls say the same).
func (s *Sampler) Stop() SamplingReport {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return SamplingReport{Samples: s.samples, Empty: s.empty, Bodies: s.bodies}
}

// NetnsGet is a GET from inside network namespace ns (as ip netns names
// it; "" for this one), a new connection each time, for a Sampler: the
// body trimmed and whether it answered 2xx within a second.
func NetnsGet(ns string) func(url string) (string, bool) {
	tr := &http.Transport{DisableKeepAlives: true}
	if ns != "" {
		tr.DialContext = netnsDialer(ns)
	}
	c := &http.Client{Timeout: time.Second, Transport: tr}
	return func(url string) (string, bool) {
		r, err := c.Get(url)
		if err != nil {
			return "", false
		}
		defer r.Body.Close()
		b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		return strings.TrimSpace(string(b)), err == nil && r.StatusCode/100 == 2
	}
}

// netnsDialer dials from inside network namespace ns: the socket is made on
// a thread moved into ns (a socket stays in the namespace it was made
// in), and the thread is moved back, or never reused when that fails.
func netnsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			back, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer back.Close()
			target, err := os.Open("/run/netns/" + ns)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread() // else the thread ends with this goroutine
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
