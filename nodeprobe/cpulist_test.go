package nodeprobe

import (
	"slices"
	"testing"
)

// TestCPUListRoundTrip: the kernel's list form reads and writes back the
// same, and what is not a list is refused with words.
func TestCPUListRoundTrip(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{" 3,1,2 ,2", []int{1, 2, 3}, "1-3"},
		{"0-1,1-2", []int{0, 1, 2}, "0-2"},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if err != nil {
			t.Fatalf("ParseCPUList(%q): %v", tt.in, err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if s := FormatCPUList(got); s != tt.out {
			t.Errorf("FormatCPUList(%v) = %q, want %q", got, s, tt.out)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "0-99999", "1,,2"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) gave no error", bad)
		}
		if CleanCPUList(bad) != "" {
			t.Errorf("CleanCPUList(%q) kept it", bad)
		}
	}
}
