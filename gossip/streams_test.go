package gossip

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// closedBy reports when the agent closed c (a read returning EOF or a
// reset), or the zero time if it held it until the deadline.
func closedBy(c net.Conn, deadline time.Time) time.Time {
	c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, c)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return time.Time{}
	}
	return time.Now()
}

// Weak 7 of the third round: idle TCP connections to the gossip port from
// one host without the key took the agent to its file limit. Inbound
// streams are capped per source and in total (the rest closed at accept),
// a stream that sends nothing is closed after TCPTimeout, and the cluster
// goes on working.
func TestIdleStreamsAreCappedAndClosed(t *testing.T) {
	const perSource, total, timeout = 8, 24, time.Second
	nodes := startCluster(t, 2, func(c *Config) {
		c.TCPTimeout = timeout
		c.MaxInboundStreams = total
		c.MaxInboundStreamsPerSource = perSource
	})
	target := nodes[0].LocalAddr()
	start := time.Now()
	var conns []net.Conn
	for src := 2; src < 8; src++ { // six hosts, 12 connections each
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", src))}, Timeout: time.Second}
		for range 12 {
			c, err := d.Dial("tcp", target)
			if err != nil {
				t.Fatalf("dial %s: %v", target, err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, c)
		}
	}
	closedAt := make([]time.Time, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { closedAt[i] = closedBy(c, start.Add(4*timeout)) })
	}
	wg.Wait()
	early, late := 0, 0
	for i, at := range closedAt {
		switch {
		case at.IsZero():
			t.Errorf("connection %d (from %s) was held open for %v with nothing sent", i, conns[i].LocalAddr(), 4*timeout)
		case at.Sub(start) < timeout/2:
			early++
		case at.Sub(start) > timeout+timeout/2:
			late++
		}
	}
	if want := len(conns) - total; early < want {
		t.Errorf("%d of %d idle connections closed at once, want at least %d (over the caps of %d per host, %d in all)", early, len(conns), want, perSource, total)
	}
	if late > 0 {
		t.Errorf("%d silent connections stayed open past %v, want every one closed after TCPTimeout (%v)", late, timeout+timeout/2, timeout)
	}
	if got := nodes[0].Stats().StreamsRefused; got < uint64(len(conns)) {
		t.Errorf("StreamsRefused = %d, want %d (each of the flood's streams)", got, len(conns))
	}
	// The cluster still works: a change reaches the attacked node.
	v := nodes[1].agent.setLeases("alice", "after the flood", 0)
	nodes[1].Publish(true)
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, ok := nodes[0].Peer(nodes[1].cfg.NodeName)
		return ok && p.HasState && p.NodeState.Version >= v, fmt.Sprintf("node00 sees %+v", p.NodeState.Version)
	})
}

// A peer that sends undecodable messages in a loop writes one log line per
// interval, with the count, not one per message.
func TestDroppedMessagesAreLoggedRarely(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	cfg := testConfig(t, "node00")
	cfg.Logf = func(f string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(f, args...))
		mu.Unlock()
	}
	n := startNode(t, cfg)
	d := &delegate{n.Cluster}
	for range 1000 {
		d.NotifyMsg([]byte{0xEE, 1, 2, 3})
	}
	mu.Lock()
	defer mu.Unlock()
	dropped := 0
	for _, l := range lines {
		if strings.Contains(l, "dropped a message") {
			dropped++
		}
	}
	if dropped != 1 || n.Stats().Dropped < 1000 {
		t.Errorf("1000 undecodable messages: %d log lines, %d counted; want 1 line and every one counted", dropped, n.Stats().Dropped)
	}
}

// flood holds n idle connections to target from each of the loopback
// addresses 127.0.0.1 … 127.0.0.<hosts>, the first being the members' own,
// re-dialling each one the agent closes, until the test ends. It returns
// once every connection has been dialled once.
func flood(t *testing.T, target string, hosts, n int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	var dialed sync.WaitGroup
	for h := 1; h <= hosts; h++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", h))}, Timeout: time.Second}
		for range n {
			dialed.Add(1)
			wg.Go(func() {
				first := true
				for {
					c, err := d.Dial("tcp", target)
					if first {
						dialed.Done()
						first = false
					}
					if err == nil {
						go func() { <-stop; c.Close() }()
						_, _ = io.Copy(io.Discard, c) // until the agent closes it
						c.Close()
					}
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond): // a stranger re-dials at once; this keeps the test's own CPU use sane
					}
				}
			})
		}
	}
	dialed.Wait()
}

// Finding 4 of the fourth round: 64 idle connections from each of 8
// loopback addresses (the 512 cap), re-dialled as they are closed, made the
// agent refuse its real peer's streams. A stream must now prove it holds
// the key (its first frame decrypts) to keep its slot; unproven ones are
// pushed out to make room, so every request of the peer gets through.
func TestStrangersDoNotCrowdOutMembers(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	flood(t, nodes[0].LocalAddr(), 8, 64)
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := nodes[1].Request(ctx, nodes[0].cfg.NodeName, Request{Op: "ping"})
		cancel()
		if err != nil {
			t.Fatalf("request %d of 20 from node01 to node00 while strangers hold 512 connections: %v", i+1, err)
		}
	}
	if got := nodes[0].Stats().StreamsRefused; got == 0 {
		t.Errorf("StreamsRefused = 0 under a flood of 512 connections, want the strangers' streams counted")
	}
}

// provesKey accepts a first frame only a key holder can make: memberlist's
// encrypted frame, under the cluster key, with this cluster's label as its
// authenticated data; whatever it read is still there for memberlist.
func TestProvesKey(t *testing.T) {
	label := "test"
	frame := func(key []byte, ad string, body []byte) []byte {
		n := 1 + 12 + len(body) + 16
		head := []byte{encryptFrame, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		block, _ := aes.NewCipher(key)
		gcm, _ := cipher.NewGCM(block)
		nonce := make([]byte, 12)
		sealed := gcm.Seal(nil, nonce, body, append(append([]byte(nil), head...), ad...))
		return append(append(append(head, 1), nonce...), sealed...)
	}
	hdr := append([]byte{labelMsg, byte(len(label))}, label...)
	other := []byte("fedcba9876543210fedcba9876543210")
	big := make([]byte, maxProofFrame)
	cases := []struct {
		name string
		send []byte
		want bool
	}{
		{"a member's frame", append(hdr, frame(testKey, label, []byte("hello"))...), true},
		{"another key", append(hdr, frame(other, label, []byte("hello"))...), false},
		{"another label sealed in", append(hdr, frame(testKey, "other", []byte("hello"))...), false},
		{"not encrypted", append(hdr, 8, 0, 0, 0, 5, 1, 2, 3, 4, 5), false},
		{"larger than checked", append(hdr, frame(testKey, label, big)...), false},
		{"cut short", append(hdr, frame(testKey, label, []byte("hello"))[:20]...), false},
		{"no label", frame(testKey, label, []byte("hello")), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			go func() { b.Write(tc.send); b.Close() }()
			sc, ok := screen(context.Background(), a, label, time.Second)
			if !ok {
				t.Fatal("screen: not ok")
			}
			if got := provesKey(sc, [][]byte{testKey}, label, time.Second); got != tc.want {
				t.Errorf("provesKey = %v, want %v", got, tc.want)
			}
			rest, _ := io.ReadAll(sc)
			if !bytes.Equal(rest, tc.send) {
				t.Errorf("memberlist would read %d bytes, want the %d sent", len(rest), len(tc.send))
			}
		})
	}
}
