package tui

import (
	"strings"
	"testing"
)

// TestFooterKeepsHelpAndQuit: whatever the width, the bottom line of every
// view ends with `? help • q quit` — the way to every other key — and
// drops other keys instead, marking that it did (issue 30: the board's key
// line needed 137 columns, so at 80, 100 and 120 its help was cut off).
func TestFooterKeepsHelpAndQuit(t *testing.T) {
	for _, w := range []int{80, 100, 120, 160} {
		for _, view := range []string{"1", "2", "3", "4", "5", "6"} {
			h := newHarness(t, w, 24, Options{})
			h.send(BoardMsg(testBoard()))
			h.keys(view)
			lines := strings.Split(strings.TrimRight(h.screen(), "\n"), "\n")
			last := strings.TrimRight(lines[len(lines)-1], " ")
			if !strings.HasSuffix(last, "? help • q quit") {
				t.Errorf("view %s at %d columns: bottom line %q does not end with `? help • q quit`", view, w, last)
			}
		}
	}
}
