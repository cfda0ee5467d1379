package tui

import (
	"errors"
	"image/color"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dibs-gpu/dibs/api"
)

// TestKeys drives every key of the board through Update and checks what
// the board did and what it asked the agent.
func TestKeys(t *testing.T) {
	type check func(t *testing.T, h *harness)
	cursorAt := func(node string, gpu int) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			if n, g := h.cursor(); n != node || g != gpu {
				t.Errorf("cursor at %s/%d, want %s/%d", n, g, node, gpu)
			}
		}
	}
	statusHas := func(want string) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			if !strings.Contains(h.m.status, want) {
				t.Errorf("status = %q, want it to contain %q", h.m.status, want)
			}
			if !strings.Contains(h.screen(), want) {
				t.Errorf("screen does not show %q:\n%s", want, h.screen())
			}
		}
	}
	claims := func(want ...api.ClaimRequest) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			if !slices.EqualFunc(h.be.claims, want, claimEqual) {
				t.Errorf("claims = %+v, want %+v", h.be.claims, want)
			}
		}
	}
	formOpen := func(open bool) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			if (h.m.form != nil) != open {
				t.Errorf("form open = %v, want %v", h.m.form != nil, open)
			}
		}
	}
	quits := func(want bool) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			if h.quit != want {
				t.Errorf("quit = %v, want %v", h.quit, want)
			}
		}
	}
	showsNodes := func(want ...string) check {
		return func(t *testing.T, h *harness) {
			t.Helper()
			var got []string
			for _, v := range h.m.grid.views {
				got = append(got, v.name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("nodes shown = %v, want %v", got, want)
			}
		}
	}

	tests := []struct {
		name  string
		at    [2]any // node, gpu to start from; zero: node01/0
		keys  []string
		text  string   // typed after keys
		then  []string // keys after text
		check []check
	}{
		{name: "l moves right", keys: []string{"l", "l"}, check: []check{cursorAt("node01", 2)}},
		{name: "right arrow moves right", keys: []string{"right"}, check: []check{cursorAt("node01", 1)}},
		{name: "h moves left and stops at 0", keys: []string{"l", "h", "h", "left"}, check: []check{cursorAt("node01", 0)}},
		{name: "j moves down keeping the column", keys: []string{"l", "l", "j"}, check: []check{cursorAt("node02", 2)}},
		{name: "down arrow moves down", keys: []string{"down", "down"}, check: []check{cursorAt("node03", 0)}},
		{name: "k and up move up and stop at the top", keys: []string{"j", "j", "k", "up", "up"}, check: []check{cursorAt("node01", 0)}},
		{name: "moving to a smaller node clamps the column", at: [2]any{"node02", 7}, keys: []string{"j"}, check: []check{cursorAt("node03", 3)}},
		{name: "l stops at the last GPU", at: [2]any{"node03", 3}, keys: []string{"l", "l"}, check: []check{cursorAt("node03", 3)}},
		{
			name: "space selects free GPUs on one node", keys: []string{"space", "l", "l", "l", "l", "l", "l", "l", "space"},
			check: []check{func(t *testing.T, h *harness) {
				if h.m.grid.selNode != "node01" || !slices.Equal(h.m.grid.sel, []int{0, 7}) {
					t.Errorf("selection = %s %v, want node01 [0 7]", h.m.grid.selNode, h.m.grid.sel)
				}
				if !strings.Contains(h.screen(), "✓free") {
					t.Errorf("screen does not mark the selection:\n%s", h.screen())
				}
			}},
		},
		{
			name: "space twice unselects", keys: []string{"space", "space"},
			check: []check{func(t *testing.T, h *harness) {
				if len(h.m.grid.sel) != 0 {
					t.Errorf("selection = %v, want none", h.m.grid.sel)
				}
			}},
		},
		{
			name: "space on a held GPU refuses", keys: []string{"l", "space"},
			check: []check{statusHas("GPU 1 on node01 is not free"), func(t *testing.T, h *harness) {
				if len(h.m.grid.sel) != 0 {
					t.Errorf("selection = %v, want none", h.m.grid.sel)
				}
			}},
		},
		{
			name: "space on another node starts a new selection", keys: []string{"space", "j", "space"},
			check: []check{func(t *testing.T, h *harness) {
				if h.m.grid.selNode != "node02" || !slices.Equal(h.m.grid.sel, []int{0}) {
					t.Errorf("selection = %s %v, want node02 [0]", h.m.grid.selNode, h.m.grid.sel)
				}
			}},
		},
		{
			name: "esc clears the selection", keys: []string{"space", "esc"},
			check: []check{func(t *testing.T, h *harness) {
				if len(h.m.grid.sel) != 0 {
					t.Errorf("selection = %v, want none", h.m.grid.sel)
				}
			}},
		},
		{
			name: "c claims the selected GPUs", keys: []string{"space", "l", "l", "l", "l", "l", "l", "l", "space", "c"},
			text: "llama eval\t2h", then: []string{"enter"},
			check: []check{
				claims(api.ClaimRequest{Node: "node01", GPUs: []int{0, 7}, Duration: "2h", Note: "llama eval"}),
				statusHas("claimed node01-50: GPUs 0,7 until 18:40 — CUDA_VISIBLE_DEVICES=0,7"),
				formOpen(false),
				func(t *testing.T, h *harness) {
					if len(h.m.grid.sel) != 0 {
						t.Errorf("selection after claim = %v, want none", h.m.grid.sel)
					}
				},
			},
		},
		{
			// The fix of issue 14: it claimed GPU 0 when the cursor was on GPU 3.
			name: "c on a free GPU claims the GPU under the cursor", at: [2]any{"node02", 3}, keys: []string{"c", "enter"},
			check: []check{claims(api.ClaimRequest{Node: "node02", GPUs: []int{3}}), statusHas("claimed node02-50: GPU 3 until 18:40 — CUDA_VISIBLE_DEVICES=3"),
				func(t *testing.T, h *harness) {
					if n, g := h.cursor(); n != "node02" || g != 3 {
						t.Errorf("after the claim the cursor is on %s/%d, want the claimed GPU", n, g)
					}
				}},
		},
		{
			name: "the claim form names the GPU under the cursor", at: [2]any{"node03", 3}, keys: []string{"c"},
			check: []check{formOpen(true), func(t *testing.T, h *harness) {
				if !strings.Contains(h.screen(), "claim on node03: GPU 3") {
					t.Errorf("form does not name GPU 3:\n%s", h.screen())
				}
			}},
		},
		{
			name: "c on a held GPU claims a count on the cursor's node", at: [2]any{"node02", 4}, keys: []string{"c", "ctrl+u"},
			text: "3", then: []string{"enter"},
			check: []check{claims(api.ClaimRequest{Node: "node02", Count: 3}), statusHas("claimed node02-50: GPUs 6,7,8")},
		},
		{
			name: "c with the default count of 1", at: [2]any{"node02", 4}, keys: []string{"c", "enter"},
			check: []check{claims(api.ClaimRequest{Node: "node02", Count: 1}), statusHas("claimed node02-50: GPU 6 until 18:40 — CUDA_VISIBLE_DEVICES=6")},
		},
		{
			name: "c refuses a count that is not a number", at: [2]any{"node01", 1}, keys: []string{"c", "ctrl+u"}, text: "two", then: []string{"enter"},
			check: []check{claims(), statusHas("GPUs must be a whole number"), formOpen(true)},
		},
		{
			name: "c refuses a duration it cannot read", keys: []string{"c", "tab"}, text: "soon", then: []string{"enter"},
			check: []check{claims(), formOpen(true), func(t *testing.T, h *harness) {
				if h.m.statusKind != statusErr {
					t.Errorf("status kind = %v, want error (status %q)", h.m.statusKind, h.m.status)
				}
			}},
		},
		{
			name: "c on a dead node says so", at: [2]any{"node04", 0}, keys: []string{"c"},
			check: []check{claims(), formOpen(false), statusHas("node04 is dead")},
		},
		{
			name: "esc cancels the claim form", keys: []string{"c", "esc"},
			check: []check{claims(), formOpen(false)},
		},
		{
			name: "shift+tab goes back a field", at: [2]any{"node01", 1}, keys: []string{"c", "tab", "tab", "shift+tab"},
			check: []check{func(t *testing.T, h *harness) {
				if h.m.form == nil || h.m.form.fields[h.m.form.focus].name != "note" {
					t.Errorf("focus is not on note")
				}
			}},
		},
		{
			name: "r runs a command in a new session", at: [2]any{"node02", 4}, keys: []string{"r", "tab"},
			text: "python train.py | tee log", then: []string{"tab", "tab"},
			check: []check{
				func(t *testing.T, h *harness) {
					h.typeText("4h")
					h.keys("enter")
				},
				claims(api.ClaimRequest{Node: "node02", Count: 1, Duration: "4h", Run: &api.RunSpec{Command: []string{"python train.py | tee log"}}}),
				statusHas("started node02-50 in tmux dibs-node02-50"),
			},
		},
		{
			name: "r with no command starts a shell", at: [2]any{"node02", 4}, keys: []string{"r", "enter"},
			check: []check{claims(api.ClaimRequest{Node: "node02", Count: 1, Run: &api.RunSpec{}})},
		},
		{
			name: "r on a free GPU runs on exactly that GPU", at: [2]any{"node02", 3}, keys: []string{"r"}, text: "make", then: []string{"enter"},
			check: []check{claims(api.ClaimRequest{Node: "node02", GPUs: []int{3}, Run: &api.RunSpec{Command: []string{"make"}}})},
		},
		{
			name: "e extends the lease under the cursor", at: [2]any{"node01", 1}, keys: []string{"e", "ctrl+u"},
			text: "4h", then: []string{"enter"},
			check: []check{
				func(t *testing.T, h *harness) {
					want := []api.ExtendRequest{{ID: "node01-42", Duration: "4h"}}
					if !slices.Equal(h.be.extends, want) {
						t.Errorf("extends = %+v, want %+v", h.be.extends, want)
					}
				},
				statusHas("extended node01-42 until 22:40 (6h40m left)"),
			},
		},
		{
			name: "e on a free GPU says there is nothing to extend", keys: []string{"e"},
			check: []check{formOpen(false), statusHas("GPU 0 on node01 has no lease to extend")},
		},
		{
			name: "x then y releases", at: [2]any{"node01", 2}, keys: []string{"x", "y"},
			check: []check{
				func(t *testing.T, h *harness) {
					want := []api.ReleaseRequest{{IDs: []string{"node01-42"}}}
					if !slices.EqualFunc(h.be.releases, want, func(a, b api.ReleaseRequest) bool { return slices.Equal(a.IDs, b.IDs) && a.All == b.All }) {
						t.Errorf("releases = %+v, want %+v", h.be.releases, want)
					}
				},
				statusHas("released node01-42"),
			},
		},
		{
			name: "x then n keeps the lease", at: [2]any{"node01", 2}, keys: []string{"x", "n"},
			check: []check{
				func(t *testing.T, h *harness) {
					if len(h.be.releases) != 0 || h.m.confirm != nil {
						t.Errorf("releases = %+v, confirm open = %v; want none, closed", h.be.releases, h.m.confirm != nil)
					}
				},
				statusHas("kept node01-42"),
			},
		},
		{
			name: "x asks before releasing", at: [2]any{"node01", 2}, keys: []string{"x"},
			check: []check{func(t *testing.T, h *harness) {
				s := h.screen()
				for _, want := range []string{"release node01-42?", "GPUs 1,2 on node01, yours", "its tmux session dibs-node01-42 ends too", "y releases"} {
					if !strings.Contains(s, want) {
						t.Errorf("screen lacks %q:\n%s", want, s)
					}
				}
				if len(h.be.releases) != 0 {
					t.Errorf("released before the answer")
				}
			}},
		},
		{
			name: "x on a free GPU says there is nothing to release", keys: []string{"x"},
			check: []check{statusHas("GPU 0 on node01 has no lease to release")},
		},
		{
			name: "m shows only nodes where I hold GPUs", keys: []string{"m"},
			check: []check{showsNodes("node01"), func(t *testing.T, h *harness) {
				if !strings.Contains(h.screen(), "only mine") {
					t.Errorf("header does not say only mine")
				}
			}},
		},
		{name: "m twice shows all again", keys: []string{"m", "m"}, check: []check{showsNodes("node01", "node02", "node03", "node04")}},
		{name: "/ filters by user", keys: []string{"/"}, text: "erin", then: []string{"enter"}, check: []check{showsNodes("node02"), formOpen(false)}},
		{name: "/ filters by model as typed", keys: []string{"/"}, text: "a100", check: []check{showsNodes("node03", "node04"), formOpen(true)}},
		{name: "/ filters by node", keys: []string{"/"}, text: "node03", then: []string{"enter"}, check: []check{showsNodes("node03")}},
		{name: "/ then esc clears the filter", keys: []string{"/"}, text: "erin", then: []string{"esc"}, check: []check{showsNodes("node01", "node02", "node03", "node04")}},
		{name: "esc clears a kept filter", keys: []string{"/"}, text: "bob", then: []string{"enter", "esc"}, check: []check{showsNodes("node01", "node02", "node03", "node04")}},
		{
			name: "? shows the full help, ? again hides it", keys: []string{"?"},
			check: []check{
				func(t *testing.T, h *harness) {
					s := h.screen()
					for _, want := range []string{"previous node", "next GPU", "release", "only mine", "used without the lease"} {
						if !strings.Contains(s, want) {
							t.Errorf("help lacks %q:\n%s", want, s)
						}
					}
					h.keys("?")
					if h.m.showHelp || strings.Contains(h.screen(), "previous node") {
						t.Errorf("? did not close the help")
					}
				},
			},
		},
		{name: "q quits", keys: []string{"q"}, check: []check{quits(true)}},
		{name: "ctrl+c quits", keys: []string{"ctrl+c"}, check: []check{quits(true)}},
		{name: "ctrl+c quits from a form", keys: []string{"c", "ctrl+c"}, check: []check{quits(true)}},
		{name: "q in a form is text", keys: []string{"/", "q"}, check: []check{quits(false), formOpen(true)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 80, 24, Options{})
			if tc.at[0] != nil {
				h.moveTo(tc.at[0].(string), tc.at[1].(int))
			}
			h.keys(tc.keys...)
			// Tab moves between fields; type the rest as text.
			for i, part := range strings.Split(tc.text, "\t") {
				if i > 0 {
					h.keys("tab")
				}
				h.typeText(part)
			}
			h.keys(tc.then...)
			for _, c := range tc.check {
				c(t, h)
			}
		})
	}
}

func claimEqual(a, b api.ClaimRequest) bool {
	if (a.Run == nil) != (b.Run == nil) {
		return false
	}
	if a.Run != nil && (!slices.Equal(a.Run.Command, b.Run.Command) || a.Run.Name != b.Run.Name || a.Run.Dir != b.Run.Dir) {
		return false
	}
	return a.Node == b.Node && a.Count == b.Count && slices.Equal(a.GPUs, b.GPUs) &&
		a.Duration == b.Duration && a.Note == b.Note && a.Kind == b.Kind && a.Force == b.Force
}

func TestAttach(t *testing.T) {
	t.Run("mine runs Options.Attach with the agent's argv", func(t *testing.T) {
		var got []string
		h := newHarness(t, 80, 24, Options{Attach: func(argv []string) tea.Cmd {
			got = argv
			return nil
		}})
		h.moveTo("node01", 1)
		h.keys("a")
		if want := []string{"node01-42"}; !slices.Equal(h.be.attaches, want) {
			t.Errorf("Backend.Attach calls = %q, want %q", h.be.attaches, want)
		}
		if want := []string{"tmux", "attach-session", "-t", "=dibs-node01-42"}; !slices.Equal(got, want) {
			t.Errorf("Options.Attach argv = %q, want %q", got, want)
		}
		if want := "back from dibs-node01-42"; h.m.status != want {
			t.Errorf("status after the attach returned = %q, want %q", h.m.status, want)
		}
	})
	t.Run("without Options.Attach the command is shown", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.moveTo("node01", 1)
		h.keys("a")
		if want := "to attach, run: tmux attach-session -t =dibs-node01-42"; h.m.status != want {
			t.Errorf("status = %q, want %q", h.m.status, want)
		}
	})
	t.Run("elsewhere asks for my latest session", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{Attach: func([]string) tea.Cmd { return nil }})
		h.moveTo("node01", 3) // bob's
		h.keys("a")
		if want := []string{""}; !slices.Equal(h.be.attaches, want) {
			t.Errorf("Backend.Attach calls = %q, want %q", h.be.attaches, want)
		}
	})
	t.Run("a lease without a session says so", func(t *testing.T) {
		b := testBoard()
		b.Nodes[0].GPUs[1].Lease.Session = ""
		h := newHarness(t, 80, 24, Options{})
		h.send(BoardMsg(b))
		h.moveTo("node01", 1)
		h.keys("a")
		if len(h.be.attaches) != 0 || !strings.Contains(h.m.status, "has no tmux session") {
			t.Errorf("attaches = %q, status = %q; want none and an explanation", h.be.attaches, h.m.status)
		}
	})
}

func TestMouseClickSelectsGPU(t *testing.T) {
	tests := []struct {
		name string
		w, h int
		x, y int
		node string
		gpu  int
	}{
		// At 80 columns cells are 9 wide from column 1; the grid starts on
		// line 2 with the ruler, node01's header is line 3.
		{"80 cols, node02 GPU 5 label", 80, 24, 1 + 5*9 + 3, 7, "node02", 5},
		{"80 cols, node02 GPU 5 bar", 80, 24, 1 + 5*9, 8, "node02", 5},
		{"80 cols, node03 GPU 3", 80, 24, 1 + 3*9 + 8, 10, "node03", 3},
		{"160 cols, node01 GPU 7", 160, 48, 1 + 7*12 + 1, 4, "node01", 7},
		{"80 cols, node header keeps the column", 80, 24, 20, 12, "node04", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{})
			h.m.View() // the frame the person clicked on
			h.send(tea.MouseClickMsg{X: tc.x, Y: tc.y, Button: tea.MouseLeft})
			if n, g := h.cursor(); n != tc.node || g != tc.gpu {
				t.Errorf("click at %d,%d: cursor %s/%d, want %s/%d\n%s", tc.x, tc.y, n, g, tc.node, tc.gpu, h.screen())
			}
		})
	}
	t.Run("a click outside the grid does nothing", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		h.moveTo("node02", 2)
		h.m.View()
		h.send(tea.MouseClickMsg{X: 5, Y: 20, Button: tea.MouseLeft})
		if n, g := h.cursor(); n != "node02" || g != 2 {
			t.Errorf("cursor moved to %s/%d", n, g)
		}
	})
	t.Run("the view asks for mouse events", func(t *testing.T) {
		h := newHarness(t, 80, 24, Options{})
		if got := h.m.View().MouseMode; got != tea.MouseModeCellMotion {
			t.Errorf("MouseMode = %v, want cell motion", got)
		}
	})
}

func TestBoardMsgUpdatesView(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	h.moveTo("node02", 1)
	before := h.screen()
	if !strings.Contains(before, "9 free") {
		t.Fatalf("first board not shown:\n%s", before)
	}
	b := testBoard()
	b.GeneratedAt = fixedNow.Add(time.Second)
	g := &b.Nodes[1].GPUs[0]
	g.Lease = mkLease("node02-8", "node02", "frank", 1010, []int{0}, time.Hour)
	b.Notices = []string{"node01-42 ends in 10m: e extends it"}
	h.send(BoardMsg(b))
	after := h.screen()
	for _, want := range []string{"8 free", "frank", "⚑ node01-42 ends in 10m"} {
		if !strings.Contains(after, want) {
			t.Errorf("after the new board the screen lacks %q:\n%s", want, after)
		}
	}
	if n, gi := h.cursor(); n != "node02" || gi != 1 {
		t.Errorf("cursor moved to %s/%d with the new board", n, gi)
	}
	// An older board (a fetch that lost a race with the stream) is ignored.
	old := testBoard()
	old.GeneratedAt = fixedNow.Add(-time.Minute)
	h.send(BoardMsg(old))
	if !strings.Contains(h.screen(), "frank") {
		t.Errorf("an older board replaced a newer one")
	}
}

func TestBackendErrorShowsInStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		keys []string
		want string
	}{
		{"claim refused", errAgent, []string{"c", "enter"}, "✗ could not claim: GPU 3 on node01 is held by bob"},
		{"agent gone", errors.New("no dibs agent at /run/dibs/dibs.sock: start one"), []string{"c", "enter"}, "✗ could not claim: no dibs agent at"},
		{"release forbidden", &api.Error{Status: 403, Code: "forbidden", Msg: "node01-43 is bob's: only its holder or an admin can end it"}, []string{"l", "l", "l", "x", "y"}, "could not release node01-43: node01-43 is bob's"},
		{"extend refused", &api.Error{Status: 400, Msg: "4h is over the pool's limit of 24h"}, []string{"l", "e", "enter"}, "could not extend node01-42: 4h is over"},
		{"attach fails", errors.New("session dibs-node01-42 is gone"), []string{"l", "a"}, "could not attach to node01-42: session dibs-node01-42 is gone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 80, 24, Options{})
			h.be.err = tc.err
			h.keys(tc.keys...)
			if h.m.statusKind != statusErr {
				t.Errorf("status kind = %v, want error", h.m.statusKind)
			}
			if s := h.screen(); !strings.Contains(s, tc.want) {
				t.Errorf("screen lacks %q:\n%s", tc.want, s)
			}
		})
	}
}

// TestWatch follows the live board: boards from the stream show, a broken
// stream shows in the status line and is retried.
func TestWatch(t *testing.T) {
	be := &fakeBackend{watch: make(chan api.Board, 1)}
	m := New(Options{Backend: be, Now: nowFunc})
	t.Cleanup(m.cancel)
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	if s := plainView(m); !strings.Contains(s, "connecting to the agent") {
		t.Errorf("before the first board:\n%s", s)
	}
	sub := m.subscribe()
	be.watch <- testBoard()
	msg := sub()
	_, next := m.Update(msg)
	if s := plainView(m); !strings.Contains(s, "9 free") {
		t.Fatalf("stream board not shown:\n%s", s)
	}
	if next == nil {
		t.Fatal("no command re-arms the stream")
	}
	b := testBoard()
	b.GeneratedAt = fixedNow.Add(time.Second)
	b.Nodes[1].GPUs[0].Lease = mkLease("node02-8", "node02", "frank", 1010, []int{0}, time.Hour)
	be.watch <- b
	_, next = m.Update(next())
	if s := plainView(m); !strings.Contains(s, "8 free") {
		t.Errorf("second stream board not shown:\n%s", s)
	}

	be.mu.Lock()
	be.watchErr = errors.New("the agent closed the board stream (did it stop?)")
	be.mu.Unlock()
	close(be.watch)
	msg = next()
	_, retry := m.Update(msg)
	if !strings.Contains(m.status, "lost the live board: the agent closed the board stream (did it stop?) — retrying in 1s") {
		t.Errorf("status = %q", m.status)
	}
	if retry == nil {
		t.Fatal("no retry scheduled")
	}
	// A second failure doubles the wait.
	m.Update(watchEndedMsg{err: errors.New("refused")})
	if !strings.Contains(m.status, "retrying in 2s") {
		t.Errorf("status after a second failure = %q", m.status)
	}
	// The retry subscribes again; a board from the new stream says so.
	be.mu.Lock()
	be.watch = make(chan api.Board, 1)
	be.mu.Unlock()
	_, resub := m.Update(watchRetryMsg{})
	be.watch <- b
	m.Update(resub())
	if m.status != "reconnected to the agent" || m.backoff != backoffMin {
		t.Errorf("after reconnecting: status %q, backoff %v", m.status, m.backoff)
	}
	// After quitting, a closed stream is not retried.
	m.cancel()
	if _, cmd := m.Update(watchEndedMsg{}); cmd != nil {
		t.Errorf("retrying after quit")
	}
}

func TestInitSubscribes(t *testing.T) {
	be := &fakeBackend{watch: make(chan api.Board, 1)}
	m := New(Options{Backend: be, Now: nowFunc})
	t.Cleanup(m.cancel)
	be.watch <- testBoard()
	batch, ok := m.Init()().(tea.BatchMsg)
	if !ok {
		t.Fatal("Init does not return a batch")
	}
	var got bool
	for _, c := range batch {
		if c == nil {
			continue
		}
		done := make(chan tea.Msg, 1)
		go func() { done <- c() }()
		select {
		case msg := <-done:
			if _, ok := msg.(watchBoardMsg); ok {
				got = true
			}
		case <-time.After(time.Second):
		}
	}
	if !got {
		t.Error("Init's commands never read the board stream")
	}
}

func TestNoColor(t *testing.T) {
	h := newHarness(t, 80, 24, Options{NoColor: true})
	frames := map[string]func(){
		"board":   func() {},
		"select":  func() { h.keys("space") },
		"claim":   func() { h.keys("c") },
		"cancel":  func() { h.keys("esc") },
		"help":    func() { h.keys("?") },
		"filter":  func() { h.keys("?", "/", "b") },
		"status":  func() { h.keys("esc", "l", "x") },
		"wide":    func() { h.send(tea.WindowSizeMsg{Width: 160, Height: 48}) },
		"release": func() { h.keys("n") },
	}
	for _, name := range []string{"board", "select", "claim", "cancel", "help", "filter", "status", "wide", "release"} {
		frames[name]()
		if c := h.m.View().Content; strings.Contains(c, "\x1b") {
			t.Errorf("%s: NO_COLOR frame has escape codes:\n%q", name, c)
		}
	}
	// Still readable: every state has its word.
	s := h.screen()
	for _, want := range []string{"·free", "★mine", "bob", "zz idle", "!squat", "⧖over", "? down", "✓free"} {
		if !strings.Contains(s, want) {
			t.Errorf("NO_COLOR board lacks %q:\n%s", want, s)
		}
	}
}

func TestNoColorFromEnvMsg(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	if !strings.Contains(h.m.View().Content, "\x1b") {
		t.Fatal("the colour board has no escape codes")
	}
	h.send(tea.EnvMsg{"TERM=xterm-256color", "NO_COLOR=1"})
	if c := h.m.View().Content; strings.Contains(c, "\x1b") {
		t.Errorf("NO_COLOR in the client's environment still draws colour")
	}
}

func TestLightBackground(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	dark := h.m.View().Content
	h.send(tea.BackgroundColorMsg{Color: color.White})
	if h.m.isDark {
		t.Fatal("a white background was taken as dark")
	}
	light := h.m.View().Content
	if light == dark {
		t.Error("the light palette draws the same as the dark one")
	}
	if plainView(h.m) != plainString(dark) {
		t.Error("the palette changed the text")
	}
}

func TestCursorStaysVisible(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	h.send(BoardMsg(bigBoard(32, 8)))
	for i := 0; i < 40; i++ {
		h.keys("j")
		n, _ := h.cursor()
		if s := h.screen(); !strings.Contains(s, "▸ "+n) {
			t.Fatalf("after %d×j the cursor's node %s is not drawn:\n%s", i+1, n, s)
		}
	}
	if s := h.screen(); !strings.Contains(s, "▲ 28 above") {
		t.Errorf("the ruler does not say how many nodes are above:\n%s", s)
	}
	for i := 0; i < 40; i++ {
		h.keys("k")
	}
	if s := h.screen(); !strings.Contains(s, "▼ 29 more nodes below") {
		t.Errorf("no more-below line:\n%s", s)
	}
}

func TestFrameFitsTheTerminal(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {100, 30}, {160, 48}, {220, 60}, {40, 12}} {
		for _, b := range []api.Board{testBoard(), bigBoard(32, 8), bigBoard(3, 16)} {
			h := newHarness(t, sz[0], sz[1], Options{})
			h.send(BoardMsg(b))
			for _, keys := range [][]string{nil, {"?"}, {"?", "c"}, {"esc", "x"}} {
				h.keys(keys...)
				lines := strings.Split(h.screen(), "\n")
				if len(lines) != sz[1] {
					t.Errorf("%dx%d: %d lines", sz[0], sz[1], len(lines))
				}
				for i, l := range lines {
					if w := ansi.StringWidth(l); w > sz[0] {
						t.Errorf("%dx%d: line %d is %d wide: %q", sz[0], sz[1], i, w, l)
					}
				}
			}
		}
	}
}

func TestGPUThatCannotBeReadShowsDown(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	b := testBoard()
	b.GeneratedAt = fixedNow.Add(time.Second)
	b.Nodes[1].GPUs[2].Error = "GPU is lost (Xid 79): reset it or reboot the node"
	h.send(BoardMsg(b))
	h.moveTo("node02", 2)
	s := h.screen()
	if !strings.Contains(s, "Xid 79") {
		t.Errorf("the detail pane does not say why GPU 2 is down:\n%s", s)
	}
	if got := classify(&b.Nodes[1], &b.Nodes[1].GPUs[2], b.You); got != kindDown {
		t.Errorf("a GPU the probe cannot read is classified %v, want down", got)
	}
}

// TestBoardShowsARestartingNode: a node whose agent is restarting (within
// the grace) is named so in its header and counted apart from the nodes
// that are down in the summary; its GPUs stay unknown, never free.
func TestBoardShowsARestartingNode(t *testing.T) {
	h := newHarness(t, 120, 40, Options{})
	b := testBoard()
	b.Nodes[2].State = api.NodeRestarting
	for i := range b.Nodes[2].GPUs {
		b.Nodes[2].GPUs[i].Flags = append(b.Nodes[2].GPUs[i].Flags, api.FlagUnknown)
	}
	h.send(BoardMsg(b))
	s := h.screen()
	for _, want := range []string{"node03  restarting", "1 restarting", "1 down"} {
		if !strings.Contains(s, want) {
			t.Errorf("the board lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "2 down") {
		t.Errorf("a restarting node is counted down:\n%s", s)
	}
}
