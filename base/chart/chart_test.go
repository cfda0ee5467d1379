package chart

import (
	"testing"
	"unicode/utf8"
)

func TestSpark(t *testing.T) {
	tests := []struct {
		name  string
		vals  []int
		max   int
		width int
		plain bool
		want  string
	}{
		{"ramp", []int{0, 50, 100}, 100, 3, false, "▁▄█"},
		{"ramp plain", []int{0, 50, 100}, 100, 3, true, "_=@"},
		{"padded left: no history is not idle", []int{100}, 100, 4, false, "   █"},
		{"not reported is a gap", []int{10, None, 90}, 100, 3, false, "▁·▇"},
		{"not reported plain is blank", []int{None, None}, 100, 2, true, "  "},
		{"folded to peaks", []int{0, 100, 0, 0, 0, 0}, 100, 3, false, "█▁▁"},
		{"over max is clamped", []int{250}, 100, 1, false, "█"},
		{"zero width", []int{1}, 100, 0, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Spark(tc.vals, tc.max, tc.width, tc.plain)
			if got != tc.want {
				t.Errorf("Spark(%v, %d, %d, %v) = %q, want %q", tc.vals, tc.max, tc.width, tc.plain, got, tc.want)
			}
			if n := utf8.RuneCountInString(got); n != tc.width && tc.width > 0 {
				t.Errorf("Spark drew %d cells, want %d", n, tc.width)
			}
		})
	}
}

func TestSparkPlainIsASCII(t *testing.T) {
	vals := []int{0, 7, 13, 25, 38, 50, 63, 75, 88, 100, None}
	for _, r := range Spark(vals, 100, len(vals), true) {
		if r > 127 {
			t.Fatalf("plain spark has %q, want ASCII only", r)
		}
	}
}

func TestFoldKeepsNoneOnlyWhereAllAreNone(t *testing.T) {
	got := Fold([]int{None, None, None, 5}, 2)
	if len(got) != 2 || got[0] != None || got[1] != 5 {
		t.Errorf("Fold = %v, want [%d 5]", got, None)
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		name       string
		value, max float64
		width      int
		plain      bool
		want       string
	}{
		{"full", 10, 10, 4, false, "████"},
		{"half", 5, 10, 4, false, "██"},
		{"eighths", 1, 8, 1, false, "▏"},
		{"three and a half", 7, 8, 4, false, "███▌"},
		{"a sliver shows", 0.001, 100, 10, false, "▏"},
		{"zero draws nothing", 0, 10, 4, false, ""},
		{"over max is clamped", 20, 10, 3, false, "███"},
		{"plain", 5, 10, 4, true, "##"},
		{"plain sliver", 0.001, 100, 10, true, "#"},
		{"no max", 1, 0, 4, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bar(tc.value, tc.max, tc.width, tc.plain); got != tc.want {
				t.Errorf("Bar(%v, %v, %d, %v) = %q, want %q", tc.value, tc.max, tc.width, tc.plain, got, tc.want)
			}
		})
	}
}
