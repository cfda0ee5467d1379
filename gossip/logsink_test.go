package gossip

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestLogSinkCountsAndForwards(t *testing.T) {
	var got []string
	c := &Cluster{peers: map[string]*peerRec{}, conflict: map[string]bool{}, changedCh: make(chan struct{}, 1)}
	c.bindJobs()
	c.cfg.SuspicionMult, c.cfg.ProbeInterval = 3, 500*time.Millisecond
	c.cfg.Logf = func(format string, args ...any) { got = append(got, format) }
	c.numMembers.Store(4)
	c.mem.memberUp(&memberlist.Node{Name: "node02"})
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
	c.mem.clearSuspect("node02")
	if p, _ := c.Peer("node02"); p.State != StateAlive {
		t.Errorf("node02 is %s after answering, want alive", p.State)
	}
	// Debug lines are dropped; the foreign-packet lines come once per
	// noisyEvery; the suspicion line comes through.
	if len(got) != 2 || !strings.Contains(strings.Join(got, "|"), "gossip: %s") {
		t.Errorf("forwarded %d lines: %q", len(got), got)
	}
}
