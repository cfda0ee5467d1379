package columns

import "testing"

func TestCells(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		dash string
		clip string
	}{
		{"", 4, "-", ""},
		{"node01", 8, "node01", "node01"},
		{"node01", 6, "node01", "node01"},
		{"node001", 6, "node001", "node0~"},
		{"GPU·é·x", 4, "GPU·é·x", "GPU~"},
	} {
		if got := OrDash(tc.in); got != tc.dash {
			t.Errorf("OrDash(%q) = %q, want %q", tc.in, got, tc.dash)
		}
		if got := Clip(tc.in, tc.n); got != tc.clip {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.clip)
		}
	}
}
