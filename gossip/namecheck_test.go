package gossip

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// joinLines collects the join warnings an agent logs.
type joinLines struct {
	mu    sync.Mutex
	lines []string
}

func (j *joinLines) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(line, "gossip: join ") {
		return
	}
	j.mu.Lock()
	j.lines = append(j.lines, line)
	j.mu.Unlock()
}

func (j *joinLines) last() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.lines) == 0 {
		return ""
	}
	return j.lines[len(j.lines)-1]
}

// TestJoinSaysNameOrKey starts a real agent and tries to join it from an
// agent of another cluster name and from one with another key: each says
// which of the two is wrong, in one line, and neither gets in.
func TestJoinSaysNameOrKey(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	for _, tc := range []struct {
		name   string
		tune   func(*Config)
		want   string
		unwant string
	}{
		{"other cluster name", func(c *Config) { c.ClusterName = "prod" },
			`that agent's cluster name is "test", this one's is "prod": give every agent the same cluster name`, "key"},
		{"other key", func(c *Config) { c.Key = []byte("another key of thirty-two bytes!") },
			"that agent's cluster key differs from this one's (its answer did not decrypt): give every node the same key file", "cluster name"},
		{"other name and key", func(c *Config) {
			c.ClusterName = "prod"
			c.Key = []byte("another key of thirty-two bytes!")
		}, `that agent's cluster name is "test", this one's is "prod"`, "key differs"},
		{"insecure joiner", func(c *Config) { c.Key, c.Insecure = nil, true },
			"that agent has a cluster key and this one runs without (insecure): give this node the cluster's key file", "cluster name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got joinLines
			cfg := testConfig(t, "joiner")
			tc.tune(&cfg)
			cfg.Join = []string{nodes[0].LocalAddr()}
			cfg.RejoinInterval = 200 * time.Millisecond
			cfg.Logf = got.logf
			n := startNode(t, cfg)
			waitFor(t, 10*time.Second, func() (bool, string) {
				return got.last() != "", "no join warning logged"
			})
			line := got.last()
			wantPrefix := "gossip: join " + nodes[0].LocalAddr() + ": "
			if !strings.HasPrefix(line, wantPrefix) || !strings.Contains(line, tc.want) || strings.Contains(line, tc.unwant) {
				t.Errorf("join warning = %q, want %q followed by %q", line, wantPrefix, tc.want)
			}
			if strings.Contains(line, "\n") || strings.Contains(line, "EOF") {
				t.Errorf("join warning is not one plain line: %q", line)
			}
			if v := n.View(); len(v) != 1 {
				t.Errorf("the joiner sees %d nodes", len(v))
			}
			if _, ok := nodes[0].Peer("joiner"); ok {
				t.Errorf("the cluster let the joiner in")
			}
		})
	}
	// The cluster still takes an agent with its name and key.
	var got joinLines
	cfg := testConfig(t, "friend")
	cfg.Join = []string{nodes[0].LocalAddr()}
	cfg.Logf = got.logf
	startNode(t, cfg)
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, ok := nodes[0].Peer("friend")
		return ok && p.State == StateAlive, "friend did not join"
	})
	if l := got.last(); l != "" {
		t.Errorf("a good join logged %q", l)
	}
}

func TestNoticeRoundTrip(t *testing.T) {
	for _, name := range []string{"dibs", "a-b.c_d", strings.Repeat("x", 64), `q"uote`} {
		b := encodeNotice(name)
		if len(b) > maxNotice {
			t.Errorf("notice for %q is %d bytes, over %d", name, len(b), maxNotice)
		}
		got, ok := parseNotice(b)
		if !ok || got != name {
			t.Errorf("parseNotice(encodeNotice(%q)) = %q, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"", "\xf5", "\xf5dibs cluster \"x\"", "\xf5dibs cluster x\n", "\xf4dibs cluster \"x\"\n", "\xf5dibs cluster \"a b\"\n"} {
		if got, ok := parseNotice([]byte(bad)); ok {
			t.Errorf("parseNotice(%q) = %q, want refused", bad, got)
		}
	}
}

func TestJoinProblemIsOneLine(t *testing.T) {
	wrap := func(s string) error {
		return errors.New("1 error occurred:\n\t* failed to join 10.0.0.2:7946: " + s + "\n\n")
	}
	for _, tc := range []struct{ in, want string }{
		{"EOF", "the other side closed the connection without an answer: an older dibs with another cluster name, or not a dibs agent"},
		{"dial tcp 10.0.0.2:7946: connect: connection refused", "nothing listens there (connection refused): is its agent running, on that port, and does its firewall let gossip in (TCP and UDP)?"},
		{"dial tcp 10.0.0.2:7946: i/o timeout", "dial tcp 10.0.0.2:7946: i/o timeout: no answer; is the node up, and does a firewall between them let gossip through (TCP and UDP)?"},
		{"Encryption is configured but remote state is not encrypted", "that agent runs without a cluster key (insecure) and this one has one: give every node the same key file"},
		{"something\n new", "something new"},
	} {
		if got := joinProblem(wrap(tc.in)); got != tc.want {
			t.Errorf("joinProblem(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
