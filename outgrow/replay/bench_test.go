package replay

import (
	"testing"
	"time"
)

// BenchmarkWeek is `dibs replay --trace week`: the bundled week under
// every policy. The bound is 10 s; it takes well under one.
func BenchmarkWeek(b *testing.B) {
	w := Week(1)
	for b.Loop() {
		for _, p := range Policies() {
			if _, err := Run(w, p, Config{Seed: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestWeekIsQuick holds the bound in the ordinary test run, with room for
// the race detector and a slow machine.
func TestWeekIsQuick(t *testing.T) {
	start := time.Now()
	w := Week(1)
	for _, p := range Policies() {
		if _, err := Run(w, p, Config{Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the bundled week took %s to replay, over the 10 s bound", d)
	}
}
