package main

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
// move): startSampling asks every URL of a list at a fixed pace, each
// sample asking all of them at once, and records what answered; stop says
// how many samples were taken and when none answered. It is for any test
// that must show an address never went without an answer (the replicas'
// own URLs here; a proxy's one address elsewhere).

// sampler samples urls every `every` with get until stop.
type sampler struct {
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

// startSampling samples urls every `every` until the sampler's stop
// (called by t.Cleanup too). get is one GET: the body and whether it
// answered 2xx.
func startSampling(t *testing.T, urls []string, every time.Duration, get func(url string) (string, bool)) *sampler {
	t.Helper()
	s := &sampler{urls: urls, get: get, every: every, quit: make(chan struct{}), done: make(chan struct{}), bodies: map[string]int{}}
	go s.loop()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *sampler) loop() {
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

func (s *sampler) sample() {
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

// samplingReport is what a sampler saw.
type samplingReport struct {
	Samples int
	// Empty are the times of the samples at which no URL answered.
	Empty  []time.Time
	Bodies map[string]int
}

// stop ends the sampling (once; later calls return the same report).
func (s *sampler) stop() samplingReport {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return samplingReport{Samples: s.samples, Empty: s.empty, Bodies: s.bodies}
}

// nsGet is a GET from inside network namespace ns (as ip netns names it),
// a new connection each time, for a sampler: the body trimmed and
// whether it answered 2xx within a second.
func nsGet(ns string) func(url string) (string, bool) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: nsDialer(ns)}}
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

// nsDialer dials from inside network namespace ns: the socket is made on
// a thread moved into ns (a socket stays in the namespace it was made
// in), and the thread is moved back, or never reused when that fails.
func nsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
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
