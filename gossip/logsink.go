package gossip

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// counters are the Cluster's statistics, updated from any goroutine.
type counters struct {
	messagesIn, messagesOut     atomic.Uint64
	bytesIn, bytesOut           atomic.Uint64
	dropped, duplicates         atomic.Uint64
	decryptFailures, labelFails atomic.Uint64
	remoteRequests, remoteErrs  atomic.Uint64
	requestsServed              atomic.Uint64
	rejoins                     atomic.Uint64
	streamsRefused              atomic.Uint64
}

// Stats counts what a Cluster sent and received, so an operator can tell a
// healthy cluster from one that drops messages or holds the wrong key.
type Stats struct {
	// MessagesIn and MessagesOut count dibs messages (state, leave,
	// request, response, push/pull), one per packet or stream they ride in.
	MessagesIn  uint64
	MessagesOut uint64
	// BytesIn and BytesOut count every byte memberlist moved, probes and
	// membership gossip included, as it went on the wire (encrypted).
	BytesIn  uint64
	BytesOut uint64
	// Dropped counts messages refused: undecodable or oversize, stale (an
	// older revision than the one held), from an incompatible agent, or
	// requests beyond MaxConcurrentRequests and responses nobody waits for.
	Dropped uint64
	// Duplicates counts copies of a revision already held: the expected
	// redundancy of direct sends plus gossip, not a problem.
	Duplicates uint64
	// DecryptFailures counts packets and streams refused because they were
	// not from this cluster: they failed to decrypt (wrong key, or no
	// encryption) or carried another cluster's label.
	DecryptFailures uint64
	// LabelMismatches is the part of DecryptFailures that carried another
	// cluster's name.
	LabelMismatches uint64
	// RemoteRequests counts requests this agent sent to others, and
	// RemoteRequestErrs those that got no response (unreachable node,
	// timeout). A refusal the other agent sent back is a response, not an
	// error.
	RemoteRequests    uint64
	RemoteRequestErrs uint64
	// RequestsServed counts requests from other agents this agent handled.
	RequestsServed uint64
	// Rejoins counts join attempts after the first.
	Rejoins uint64
	// StreamsRefused counts inbound TCP streams closed unread: over
	// MaxInboundStreams or MaxInboundStreamsPerSource, or silent for
	// TCPTimeout after they opened.
	StreamsRefused uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		MessagesIn:        c.messagesIn.Load(),
		MessagesOut:       c.messagesOut.Load(),
		BytesIn:           c.bytesIn.Load(),
		BytesOut:          c.bytesOut.Load(),
		Dropped:           c.dropped.Load(),
		Duplicates:        c.duplicates.Load(),
		DecryptFailures:   c.decryptFailures.Load(),
		LabelMismatches:   c.labelFails.Load(),
		RemoteRequests:    c.remoteRequests.Load(),
		RemoteRequestErrs: c.remoteErrs.Load(),
		RequestsServed:    c.requestsServed.Load(),
		Rejoins:           c.rejoins.Load(),
		StreamsRefused:    c.streamsRefused.Load(),
	}
}

// decryptFailure reports whether a memberlist log line says a packet or
// stream could not be decrypted (the texts of security.go and net.go).
func decryptFailure(line string) bool {
	for _, m := range []string{
		"could decrypt the message",
		"Decrypt packet failed",
		"cannot decrypt empty payload",
		"payload is too small to decrypt",
		"unsupported encryption version",
		"remote state is encrypted and encryption is not configured",
		"encryption is configured but remote state is not encrypted",
	} {
		if strings.Contains(line, m) {
			return true
		}
	}
	return false
}

// labelFailure reports whether a memberlist log line says a packet or
// stream carried another cluster's label (label.go, net.go).
func labelFailure(line string) bool {
	for _, m := range []string{"unacceptable label", "label header", "cannot decode label"} {
		if strings.Contains(line, m) {
			return true
		}
	}
	return false
}

// logSink is the io.Writer behind memberlist's logger. memberlist reports
// some events only by logging them, so the sink reads each line: it counts
// decryption and label failures, notes which node this agent's prober
// suspects, and passes warnings and errors on to Config.Logf (debug lines
// are dropped; a line like one already passed on within noisyEvery — the
// same words with other numbers and addresses, as a flood of empty or
// foreign packets produces — is counted and dropped, and the next one
// passed says how many were).
//
// memberlist logs while holding its node lock, so the sink must not call
// back into memberlist.
type logSink struct {
	c *Cluster

	mu    sync.Mutex
	kinds map[string]*lineKind
}

// lineKind is one kind of log line: when it was last passed on and how many
// like it were dropped since.
type lineKind struct {
	last       time.Time
	suppressed int
}

// maxKinds bounds the kinds remembered; past it they are forgotten at once.
const maxKinds = 256

const noisyEvery = 10 * time.Second

// budget counts line against its kind's budget: ok when it may be
// written now, with how many lines like it were held back since the last.
func (s *logSink) budget(line string, noisy bool) (n int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil || len(s.kinds) > maxKinds {
		s.kinds = map[string]*lineKind{}
	}
	key := kindOf(line)
	if noisy {
		key = "foreign packets" // every kind of them shares one budget
	}
	k := s.kinds[key]
	if k == nil {
		k = &lineKind{}
		s.kinds[key] = k
	}
	now := time.Now()
	if now.Sub(k.last) < noisyEvery {
		k.suppressed++
		return 0, false
	}
	n = k.suppressed
	k.last, k.suppressed = now, 0
	return n, true
}

func (s *logSink) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	noisy := false
	switch {
	case decryptFailure(line):
		s.c.stats.decryptFailures.Add(1)
		noisy = true
	case labelFailure(line):
		s.c.stats.decryptFailures.Add(1)
		s.c.stats.labelFails.Add(1)
		noisy = true
	}
	if strings.Contains(line, "handler queue full") {
		// memberlist dropped an incoming packet: this agent is overloaded.
		s.c.stats.dropped.Add(1)
		noisy = true
	}
	if name, ok := suspectedIn(line); ok {
		s.c.markSuspect(name)
	}
	if strings.Contains(line, "[DEBUG]") || s.restartNews(line) || s.closingNoise(line) {
		return len(p), nil
	}
	n, ok := s.budget(line, noisy)
	if !ok {
		return len(p), nil
	}
	if n > 0 {
		line += " (and " + strconv.Itoa(n) + " more like it"
		if noisy {
			line += ": check that every agent has the same cluster key and name"
		}
		line += ")"
	}
	s.c.cfg.Logf("gossip: %s", line)
	return len(p), nil
}

// restartWindow is how long after start a refutation is the expected end
// of a restart rather than a warning.
const restartWindow = time.Minute

// restartNews reports whether line is memberlist refuting a dead, left or
// suspect verdict about this node soon after this agent started: the others
// still held its last boot as gone (it stepped out to restart, or crashed),
// and a refutation is how memberlist takes the node back. A clean restart
// must log no warnings; later, a refutation means the others doubted a
// running agent, and stays a warning.
func (s *logSink) restartNews(line string) bool {
	return strings.Contains(line, "Refuting a") && time.Since(s.c.startedAt) < restartWindow
}

// closingNoise reports whether line is memberlist failing to send on the
// socket this agent has just closed: its gossip and probe loops race the
// shutdown of a stopping (restarting) agent, which must log no warnings.
func (s *logSink) closingNoise(line string) bool {
	return strings.Contains(line, "use of closed network connection") && (s.c.leaving.Load() || s.c.closed())
}

// kindOf is a log line without its numbers, addresses and names after
// "from=", so lines that differ only in those count as one kind.
func kindOf(line string) string {
	if i := strings.Index(line, "from="); i >= 0 {
		line = line[:i]
	}
	b := make([]byte, 0, len(line))
	for i := 0; i < len(line) && len(b) < 120; i++ {
		c := line[i]
		if c >= '0' && c <= '9' || c == '.' || c == ':' {
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// suspectedIn finds the node in memberlist's "Suspect <node> has failed, no
// acks received" line.
func suspectedIn(line string) (string, bool) {
	const pre, post = "Suspect ", " has failed"
	i := strings.Index(line, pre)
	if i < 0 {
		return "", false
	}
	rest := line[i+len(pre):]
	j := strings.Index(rest, post)
	if j <= 0 {
		return "", false
	}
	return rest[:j], true
}
