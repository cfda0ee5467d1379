package tui

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
)

// lockedBuffer is the program's output, written by its renderer while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var alertRE = regexp.MustCompile("\a\x1b\\]9;[^\a\x1b]*\a\x1b\\]777;notify;dibs;[^\a\x1b]*\a")

// TestNoticeRingsTheBell runs the board as a program writing to a buffer
// (what a terminal, local or over SSH, receives): a notice that arrives
// while it is open rings the bell and asks for a desktop notification (OSC
// 9 and OSC 777); the notices already there when it opened do not, and a
// hostile notice cannot break out of the sequence.
func TestNoticeRingsTheBell(t *testing.T) {
	var out lockedBuffer
	m := New(Options{Now: nowFunc})
	p := tea.NewProgram(m, tea.WithOutput(&out), tea.WithInput(nil), tea.WithWindowSize(80, 24), tea.WithoutSignalHandler())
	done := make(chan error, 1)
	go func() { _, err := p.Run(); done <- err }()
	t.Cleanup(func() { p.Kill() })

	b := testBoard()
	b.Notices = []string{"15:58 an old notice, there when the board opened"}
	p.Send(BoardMsg(b))
	b.GeneratedAt = fixedNow.Add(time.Second)
	b.Notices = []string{"16:00 lease node01-42 ends in 10m (at 16:10 UTC; GPUs 1,2 on node01): `dibs extend node01-42 --for 1h` keeps it", b.Notices[0]}
	p.Send(BoardMsg(b))
	b.GeneratedAt = fixedNow.Add(2 * time.Second)
	b.Notices = []string{"16:01 hostile\x07\x1b]0;pwned\x07\u202e text", b.Notices[0]}
	p.Send(BoardMsg(b))
	poll.Wait(5*time.Second, func() bool { return len(alertRE.FindAllString(out.String(), -1)) >= 2 })
	p.Quit()
	<-done
	alerts := alertRE.FindAllString(out.String(), -1)
	// Each board's alert is written by a command of its own, and
	// bubbletea runs commands concurrently: two notices a moment apart may
	// ring in either order. What is checked is that each rings once, escaped.
	slices.Sort(alerts)
	var got strings.Builder
	for _, a := range alerts {
		got.WriteString(strconv.Quote(a) + "\n")
	}
	requireGolden(t, "alert", got.String())
	if len(alerts) != 2 {
		t.Errorf("%d alerts, want 2 (the old notice rings nothing):\n%s", len(alerts), got.String())
	}
	if strings.Contains(out.String(), "\x1b]0;pwned") {
		t.Errorf("a notice set the terminal's title")
	}
}

func TestAlertText(t *testing.T) {
	for in, want := range map[string]string{
		"16:00 plain":                 "plain",
		"a\x07b\x1bc\u009bd\u202ee":   "a b c d e",
		strings.Repeat("x", 300):      strings.Repeat("x", maxAlert-1) + "…",
		"line one\nline two\r\nthree": "line one line two three",
	} {
		if got := alertText(noticeText(in)); got != want {
			t.Errorf("alertText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestViews drives the views of issue 14 with keys and checks what the
// board asked the agent and shows.
func TestViews(t *testing.T) {
	t.Run("2 shows the queue and why each request waits", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.keys("2")
		s := h.screen()
		for _, want := range []string{"queue · scheduler node01", "node01-q3", "next to start", "its origin node04 is down", "running"} {
			if !strings.Contains(s, want) {
				t.Errorf("queue view lacks %q:\n%s", want, s)
			}
		}
	})
	t.Run("x withdraws my queued request after y", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.keys("2", "x", "y")
		if !slices.Equal(h.be.cancels, []string{"node01-q3"}) || !strings.Contains(h.m.status, "withdrew node01-q3") {
			t.Errorf("cancels %v, status %q", h.be.cancels, h.m.status)
		}
	})
	t.Run("x on someone else's request refuses", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.keys("2", "j", "x")
		if len(h.be.cancels) != 0 || h.m.confirm != nil || !strings.Contains(h.m.status, "bob's request") {
			t.Errorf("cancels %v, status %q", h.be.cancels, h.m.status)
		}
	})
	t.Run("3 shows usage with fair-share", func(t *testing.T) {
		h := newHarness(t, 160, 48, Options{})
		h.keys("3")
		if s := h.screen(); !strings.Contains(s, "0.870") || !strings.Contains(s, "96.0") {
			t.Errorf("usage view:\n%s", s)
		}
	})
	t.Run("4 lists my sessions; e extends, x releases, a attaches from there", func(t *testing.T) {
		var argv []string
		h := newHarness(t, 80, 24, Options{Attach: func(a []string) tea.Cmd { argv = a; return nil }})
		h.be.board = mineIdleBoard() // what a refresh after an action fetches
		h.send(BoardMsg(mineIdleBoard()))
		h.keys("4")
		s := h.screen()
		if !strings.Contains(s, "node03-5") || !strings.Contains(s, "idle") || !strings.Contains(s, "95%") {
			t.Errorf("sessions view:\n%s", s)
		}
		h.keys("a")
		if !slices.Equal(h.be.attaches, []string{"node01-42"}) || len(argv) == 0 {
			t.Errorf("attach from my sessions: %v %v", h.be.attaches, argv)
		}
		h.keys("j", "e", "enter")
		if !slices.Equal(h.be.extends, []api.ExtendRequest{{ID: "node03-5", Duration: "1h"}}) {
			t.Errorf("extend from my sessions: %+v", h.be.extends)
		}
		h.keys("x", "y")
		if len(h.be.releases) != 1 || !slices.Equal(h.be.releases[0].IDs, []string{"node03-5"}) {
			t.Errorf("release from my sessions: %+v", h.be.releases)
		}
	})
	t.Run("5 shows the events; m keeps only mine", func(t *testing.T) {
		h := newHarness(t, 160, 48, Options{})
		h.keys("5")
		s := h.screen()
		if !strings.Contains(s, "dave's process 6300") || !strings.Contains(s, "bob extended node01-43") {
			t.Errorf("events view:\n%s", s)
		}
		h.keys("m")
		s = h.screen()
		if strings.Contains(s, "bob extended") || !strings.Contains(s, "alice queued request node01-q3") {
			t.Errorf("only my events:\n%s", s)
		}
	})
	t.Run("tab cycles the views, 1 goes back to the board", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.keys("tab", "tab")
		if h.m.view != viewUsage {
			t.Errorf("two tabs: view %v, want usage", h.m.view)
		}
		h.keys("shift+tab", "1")
		if h.m.view != viewBoard || !strings.Contains(h.screen(), "·free") {
			t.Errorf("1 did not bring the board back")
		}
	})
	t.Run("my idle GPU stays marked mine", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.send(BoardMsg(mineIdleBoard()))
		b := mineIdleBoard()
		if k := classify(&b.Nodes[2], &b.Nodes[2].GPUs[0], b.You); k != kindMineIdle {
			t.Errorf("my idle GPU is %v, want kindMineIdle", k)
		}
		if k := classify(&b.Nodes[0], &b.Nodes[0].GPUs[4], b.You); k != kindIdle {
			t.Errorf("carol's idle GPU is %v, want kindIdle", k)
		}
		if !strings.Contains(h.screen(), labelMineIdle) {
			t.Errorf("the board does not show %s:\n%s", labelMineIdle, h.screen())
		}
	})
	t.Run("the views refresh when the board changes", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.keys("5")
		h.be.mu.Lock()
		h.be.events.Events = append(h.be.events.Events, event.Event{Seq: 99, Node: "node02", At: fixedNow, Kind: event.EventClaim, User: "erin", Text: "erin claimed something new"})
		h.be.mu.Unlock()
		h.m.events.state.at = fixedNow.Add(-time.Minute) // what it has is old
		b := testBoard()
		b.GeneratedAt = fixedNow.Add(time.Second)
		h.send(BoardMsg(b))
		if !strings.Contains(h.screen(), "erin claimed something new") {
			t.Errorf("the events view did not refresh on a new board:\n%s", h.screen())
		}
	})
}
