package tui

import (
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// pwned is the process name that retitled and cleared an admin's terminal
// through the board's detail view; pwnedShown is the start of what the
// board must show instead.
const (
	pwned      = "\x1b]0;PWNED\x07\x1b[2J"
	pwnedShown = `\x1b]0;PWNED`
	// hostileText adds a C1 CSI, a bidi override and a zero-width space.
	hostileText = pwned + "\u009b2J\u202eevil\u200b"
)

// rawHostile are the pieces of hostileText that must never reach the
// terminal as themselves.
var rawHostile = []string{"\x1b]", "\x07", "\x1b[2J", "\u009b", "\u202e", "\u200b"}

// hostileBoard is the test board with outside text made hostile
// everywhere the board draws it: a squatter's process name and user, a
// holder's name, note and session, a GPU model, host facts, a node's
// name, and a notice.
func hostileBoard() api.Board {
	b := testBoard()
	b.GeneratedAt = fixedNow.Add(time.Second)
	b.Notices = []string{"16:00 " + hostileText}
	n1 := &b.Nodes[0]
	n1.Host.DriverVersion, n1.Host.CUDAVersion = hostileText, hostileText
	squat := &n1.GPUs[5]
	squat.Processes[0].Command = pwned
	squat.Processes[0].User = "dave" + hostileText
	squat.Model = "NVIDIA H100" + hostileText
	bob := n1.GPUs[3].Lease
	bob.User = "bob" + hostileText
	bob.Note, bob.Session = hostileText, "s"+hostileText
	b.Nodes[2].Name = "node03" + hostileText
	return b
}

// hostileServiceBoard is svcBoard with hostile text in what the services
// view and the grid draw of a service: its name (on a GPU and in the list),
// its owner, its node (and so its URL), its state, session and check. No
// correct agent lets such a name through (service.CheckName), but the
// board draws what peers send.
func hostileServiceBoard() api.Board {
	b := svcBoard()
	b.GeneratedAt = fixedNow.Add(time.Second)
	vllm := &b.Services[0] // alice's, on node02 GPUs 0 and 1
	vllm.Service.Name = "vllm" + hostileText
	vllm.Session = "svc-" + hostileText
	vllm.Service.Health = "/h" + hostileText
	bob := &b.Services[3] // bob's embed, on node01 GPU 7
	bob.User = "bob" + hostileText
	bob.Node = "node01" + hostileText
	bob.Service.State = "healthy" + hostileText
	for _, l := range []*lease.Lease{vllm, bob} {
		for _, g := range l.GPUs {
			for i := range b.Nodes {
				if strings.HasPrefix(l.Node, b.Nodes[i].Name) {
					c := *l
					b.Nodes[i].GPUs[g].Lease = &c
				}
			}
		}
	}
	return b
}

// TestServicesEscapeOutsideText: a service's name, owner, node, URL,
// state and session with escape codes reach neither the grid, the
// services view, the line under it, the stop question nor the status
// line raw; each shows visibly escaped.
func TestServicesEscapeOutsideText(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noColor bool
		w, h    int
	}{
		{"no colour wide", true, 160, 48},
		{"no colour 80x24", true, 80, 24},
		{"colour wide", false, 160, 48},
		{"colour 80x24", false, 80, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{NoColor: tc.noColor})
			board := hostileServiceBoard()
			h.send(BoardMsg(board))
			check := func(frame string, wants ...string) {
				t.Helper()
				c := h.m.View().Content
				if tc.noColor && strings.ContainsRune(c, 0x1b) {
					t.Errorf("%s: NO_COLOR frame holds an ESC byte: %q", frame, c)
				}
				for _, raw := range rawHostile {
					if strings.Contains(c, raw) {
						t.Errorf("%s: %q reached the frame raw", frame, raw)
					}
				}
				plain := ansi.Strip(c)
				for _, w := range wants {
					if !strings.Contains(plain, w) {
						t.Errorf("%s: frame does not show %q: %q", frame, w, plain)
					}
				}
			}
			check("grid", `★⚙vllm`)
			h.moveTo("node02", 0)
			check("detail of the service's GPU", `service ⚙vllm\x1b]0;PWNED`)
			h.keys("6")
			check("services view", `vllm\x1b]0;`, `bob\x1`)
			h.keys("j")
			check("the line under the list", `⚙vllm\x1b]0;PWNED`)
			h.keys("x")
			check("stop question", `stop service vllm\x1b]0;PWNED`)
			h.keys("y")
			check("status line", `stopped service vllm\x1b]0;PWNED`)
			if got := board.Services[0].Service.Name; got != "vllm"+hostileText {
				t.Errorf("the board passed in was changed: %q", got)
			}
		})
	}
}

// TestBoardEscapesOutsideText drives the board with hostile text through
// the grid, the detail view (beside and under the grid), the notice and
// the status line, and checks every frame: without colour not one ESC byte;
// with colour none of the hostile sequences; the visible escape in both.
func TestBoardEscapesOutsideText(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noColor bool
		w, h    int
	}{
		{"no colour wide", true, 160, 48},
		{"no colour 80x24", true, 80, 24},
		{"colour wide", false, 160, 48},
		{"colour 80x24", false, 80, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{NoColor: tc.noColor})
			board := hostileBoard()
			h.send(BoardMsg(board))
			check := func(frame string, wants ...string) {
				t.Helper()
				v := h.m.View()
				c := v.Content
				if tc.noColor && strings.Contains(c, "\x1b") {
					t.Errorf("%s: NO_COLOR frame holds an ESC byte: %q", frame, c)
				}
				for _, raw := range rawHostile {
					if strings.Contains(c, raw) {
						t.Errorf("%s: %q reached the frame raw", frame, raw)
					}
				}
				if strings.Contains(v.WindowTitle, "\x1b") || strings.Contains(v.WindowTitle, "PWNED") {
					t.Errorf("%s: window title %q", frame, v.WindowTitle)
				}
				plain := ansi.Strip(c)
				for _, w := range wants {
					if !strings.Contains(plain, w) {
						t.Errorf("%s: frame does not show %q: %q", frame, w, plain)
					}
				}
			}
			check("notice", `16:00 \x1b]0;PWNED`)
			h.moveTo("node01", 5)
			check("squatter's process", pwnedShown)
			h.moveTo("node01", 3)
			check("holder's lease", `bob\x1`)
			h.keys("?")
			check("help")
			h.keys("?")
			h.be.err = &api.Error{Status: 409, Code: string(refusal.CodeConflict), Msg: "GPU 3 has " + hostileText + " on it"}
			h.moveTo("node01", 0)
			h.keys("c", "enter")
			check("refusal in the status line", `GPU 3 has \x1b]0;PWNED`)
			h.send(tea.WindowSizeMsg{Width: 200, Height: 60})
			check("resized")
			if got := board.Nodes[0].GPUs[5].Processes[0].Command; got != pwned {
				t.Errorf("the board passed in was changed: %q", got)
			}
		})
	}
}
