package gossip

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestLogSinkCountsAndForwards(t *testing.T) {
	var got []string
	c := &Cluster{peers: map[string]*peerRec{}, conflict: map[string]bool{}, changedCh: make(chan struct{}, 1)}
	c.cfg.SuspicionMult, c.cfg.ProbeInterval = 3, 500*time.Millisecond
	c.cfg.Logf = func(format string, args ...any) { got = append(got, format) }
	c.numMembers.Store(4)
	c.memberUp(&memberlist.Node{Name: "node02"})
	s := &logSink{c: c}
	for _, line := range []string{
		"[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:1234\n",
		"[ERR] memberlist: failed to receive: no installed keys could decrypt the message from=127.0.0.1:1234\n",
		"[ERR] memberlist: discarding packet with unacceptable label \"other\": from=127.0.0.1:1234\n",
		"[DEBUG] memberlist: Stream connection from=127.0.0.1:1234\n",
		"[INFO] memberlist: Suspect node02 has failed, no acks received\n",
		"[WARN] memberlist: handler queue full, dropping message (7) from=127.0.0.1:1234\n",
	} {
		if n, err := s.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	st := c.stats.snapshot()
	if st.DecryptFailures != 3 || st.LabelMismatches != 1 || st.Dropped != 1 {
		t.Errorf("stats = %+v, want 3 decrypt failures (1 a label) and 1 drop", st)
	}
	if p, _ := c.Peer("node02"); p.State != StateSuspect {
		t.Errorf("node02 is %s, want suspect", p.State)
	}
	c.clearSuspect("node02")
	if p, _ := c.Peer("node02"); p.State != StateAlive {
		t.Errorf("node02 is %s after answering, want alive", p.State)
	}
	// Debug lines are dropped; the foreign-packet lines come once per
	// noisyEvery; the suspicion line comes through.
	if len(got) != 2 || !strings.Contains(strings.Join(got, "|"), "gossip: %s") {
		t.Errorf("forwarded %d lines: %q", len(got), got)
	}
}

// A flood of empty datagrams at the gossip port writes a line now and then,
// not one per packet.
func TestEmptyDatagramsAreLoggedRarely(t *testing.T) {
	var lines atomic.Int64
	cfg := testConfig(t, "node00")
	cfg.Logf = func(format string, args ...any) { lines.Add(1) }
	c := startNode(t, cfg)
	conn, err := net.Dial("udp", c.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 2000 {
		conn.Write(nil)
	}
	// Then one byte from the same socket: memberlist reads datagrams in
	// order on one goroutine and refuses this one as foreign (counted), so
	// once it is counted every empty one before it has been read and
	// logged, or dropped by the kernel.
	conn.Write([]byte{0xff})
	waitFor(t, 5*time.Second, func() (bool, string) {
		return c.Stats().DecryptFailures > 0, "the byte after the flood to be read"
	})
	if n := lines.Load(); n > 5 {
		t.Errorf("2000 empty datagrams wrote %d log lines; want a few at most", n)
	}
}

// A restart's expected memberlist lines — refuting the last boot's verdict
// in the first minute, failing to send on the socket a stopping agent has
// closed — are not warnings; the same words at other times are.
func TestLogSinkKeepsARestartQuiet(t *testing.T) {
	refute := "[WARN] memberlist: Refuting a dead message (from: node02)\n"
	closed := "[ERR] memberlist: Failed to send gossip to 127.0.0.1:1: write udp 127.0.0.1:2->127.0.0.1:1: use of closed network connection\n"
	tests := []struct {
		name    string
		started time.Duration // how long ago the Cluster started
		leaving bool
		line    string
		logged  bool
	}{
		{"refutation just after start", time.Second, false, refute, false},
		{"refutation of an alive message just after start", time.Second, false, "[WARN] memberlist: Refuting an alive message for 'node01'\n", false},
		{"refutation long after start", 2 * time.Minute, false, refute, true},
		{"send on a closed socket while stepping out", time.Hour, true, closed, false},
		{"send on a closed socket while running", time.Hour, false, closed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			c := &Cluster{peers: map[string]*peerRec{}, conflict: map[string]bool{}, changedCh: make(chan struct{}, 1),
				stopCh: make(chan struct{}), startedAt: time.Now().Add(-tt.started)}
			c.cfg.Logf = func(format string, args ...any) { got = append(got, format) }
			c.leaving.Store(tt.leaving)
			s := &logSink{c: c}
			s.Write([]byte(tt.line))
			if logged := len(got) > 0; logged != tt.logged {
				t.Errorf("logged = %v (%q), want %v", logged, got, tt.logged)
			}
		})
	}
}
