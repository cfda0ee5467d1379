package tui

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current rendering")

// requireGolden compares got with testdata/<name>.golden, or rewrites the
// file with -update. (x/exp/golden is only in the module graph indirectly;
// this is the same 15 lines without touching go.mod.)
func requireGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the rendering (go test ./tui -run Golden -update rewrites it after checking by eye):\n--- want\n%s\n--- got\n%s\n--- first difference\n%s", path, want, got, firstDiff(string(want), got))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + itoa(i+1) + ":\n want " + x + "\n  got " + y
		}
	}
	return "(none)"
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestGolden renders the fixed cluster (4 nodes: 8, 8, 4 and 4 GPUs with
// every kind of cell, fixed clock) at 80×24 and 160×48, in the states a
// person sees most, ANSI-stripped.
func TestGolden(t *testing.T) {
	tests := []struct {
		name  string
		w, h  int
		board api.Board
		keys  []string
	}{
		{"board_80x24", 80, 24, testBoard(), nil},
		{"board_160x48", 160, 48, testBoard(), nil},
		// Issue 30: the key line keeps `? help • q quit` at these widths.
		{"board_100x30", 100, 30, testBoard(), nil},
		{"board_120x30", 120, 30, testBoard(), nil},
		{"mine_80x24", 80, 24, testBoard(), []string{"l"}},
		{"mine_160x48", 160, 48, testBoard(), []string{"l"}},
		{"squatted_160x48", 160, 48, testBoard(), []string{"l", "l", "l", "l", "l"}},
		{"dead_80x24", 80, 24, testBoard(), []string{"j", "j", "j"}},
		{"select_claim_80x24", 80, 24, testBoard(), []string{"space", "l", "l", "l", "l", "l", "l", "l", "space", "c"}},
		{"run_160x48", 160, 48, testBoard(), []string{"j", "r"}},
		{"release_80x24", 80, 24, testBoard(), []string{"l", "x"}},
		{"help_80x24", 80, 24, testBoard(), []string{"?"}},
		{"only_mine_80x24", 80, 24, testBoard(), []string{"m"}},
		{"filter_80x24", 80, 24, testBoard(), []string{"/", "b", "o", "b"}},
		{"big_80x24", 80, 24, bigBoard(32, 8), []string{"j", "j", "j", "j", "j", "j", "j", "j", "l", "l"}},
		{"big_200x50", 200, 50, bigBoard(32, 8), []string{"j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j"}},
		// The views of issue 14.
		{"queue_80x24", 80, 24, testBoard(), []string{"2"}},
		{"queue_160x48", 160, 48, testBoard(), []string{"2"}},
		{"queue_withdraw_80x24", 80, 24, testBoard(), []string{"2", "x"}},
		{"usage_80x24", 80, 24, testBoard(), []string{"3"}},
		{"usage_160x48", 160, 48, testBoard(), []string{"3"}},
		{"sessions_80x24", 80, 24, mineIdleBoard(), []string{"4"}},
		{"sessions_160x48", 160, 48, mineIdleBoard(), []string{"4"}},
		{"sessions_extend_80x24", 80, 24, mineIdleBoard(), []string{"4", "j", "e"}},
		{"events_80x24", 80, 24, testBoard(), []string{"5"}},
		{"events_160x48", 160, 48, testBoard(), []string{"5"}},
		{"mine_idle_80x24", 80, 24, mineIdleBoard(), []string{"j", "j"}},
		{"mine_idle_160x48", 160, 48, mineIdleBoard(), []string{"j", "j"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{})
			h.send(BoardMsg(tc.board))
			h.keys(tc.keys...)
			requireGolden(t, tc.name, h.screen())
		})
	}
}
