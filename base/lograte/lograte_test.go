package lograte

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// A flood from one source logs one line per interval, and the next line
// says how many were held back.
func TestOneLinePerSourcePerInterval(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := New(10*time.Second, 8, c.now)
	passed := 0
	for range 1000 {
		if ok, _ := l.Allow("refused", "10.0.0.1"); ok {
			passed++
		}
		c.t = c.t.Add(time.Millisecond)
	}
	if passed != 1 {
		t.Fatalf("got %d lines for 1000 refusals in one second, want 1", passed)
	}
	c.t = c.t.Add(10 * time.Second)
	ok, n := l.Allow("refused", "10.0.0.1")
	if !ok || n != 999 {
		t.Fatalf("after the interval: got ok=%v suppressed=%d, want true and 999", ok, n)
	}
}

// Sources past the kind's budget share one count, reported by the next
// line of that kind; other kinds are not held back by them.
func TestSourcesPerKindAreBounded(t *testing.T) {
	tests := []struct {
		name      string
		sources   int
		perKind   int
		wantLines int
		wantNext  int
	}{
		{"under the budget", 5, 8, 5, 0},
		{"a subnet", 640, 8, 8, 632},
		{"past the memory bound", maxKeys + 100, 8, 8, maxKeys + 92},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			l := New(10*time.Second, tt.perKind, c.now)
			lines := 0
			for i := range tt.sources {
				if ok, _ := l.Allow("refused", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)); ok {
					lines++
				}
			}
			if lines != tt.wantLines {
				t.Errorf("got %d lines, want %d", lines, tt.wantLines)
			}
			if ok, _ := l.Allow("other kind", "10.0.0.1"); !ok {
				t.Error("another kind of line was held back by this one's flood")
			}
			c.t = c.t.Add(11 * time.Second)
			ok, n := l.Allow("refused", "192.0.2.1")
			if !ok || n != tt.wantNext {
				t.Errorf("next line: got ok=%v suppressed=%d, want true and %d", ok, n, tt.wantNext)
			}
		})
	}
}

// Log writes through slog with the count of lines held back.
func TestLogCarriesTheCount(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := New(time.Second, 0, c.now)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	for range 5 {
		l.Log(log, slog.LevelWarn, "127.0.0.1", "ssh: refused", "from", "127.0.0.1")
	}
	c.t = c.t.Add(2 * time.Second)
	l.Log(log, slog.LevelWarn, "127.0.0.1", "ssh: refused", "from", "127.0.0.1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=4") {
		t.Fatalf("got %q, want two lines, the second with suppressed=4", lines)
	}
}
