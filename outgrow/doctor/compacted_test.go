package doctor

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// A compacted ledger row (a person's leases of a day folded into one) names
// no GPUs: its GPU-hours come from its GPU-seconds, cut to the window.
func TestAnalyzeCountsCompactedRows(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	row := lease.LedgerEntry{LeaseID: "n1-5", Node: "n1", User: "alice", Start: now.Add(-10 * time.Hour), End: now.Add(-2 * time.Hour),
		GPUSeconds: 8 * 3600, Reason: lease.ReasonCompacted}
	tests := []struct {
		name   string
		window time.Duration
		want   float64
	}{
		{"the whole row in the window", 24 * time.Hour, 8},
		{"half of it in the window", 6 * time.Hour, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Analyze(History{Now: now, Window: tt.window, Ledger: []lease.LedgerEntry{row}})
			if f.HeldGPUHours < tt.want-0.01 || f.HeldGPUHours > tt.want+0.01 || f.TopUser != "alice" {
				t.Errorf("held %.2f GPU-hours (top %q), want %.2f by alice", f.HeldGPUHours, f.TopUser, tt.want)
			}
		})
	}
}

// weekNumber and weekStart agree with weekOf, the Monday of t's week.
func TestWeekNumberAgreesWithWeekOf(t *testing.T) {
	for _, tt := range []time.Time{
		time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), // a Monday
		time.Date(2026, 3, 8, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("x", 11*3600)),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 28, 5, 0, 0, 0, time.UTC),
	} {
		if got, want := weekStart(weekNumber(tt)), weekOf(tt); !got.Equal(want) {
			t.Errorf("week of %s: %s, want %s", tt, got, want)
		}
	}
}

// weekOf is the Monday of t's week, 00:00 UTC, by the calendar.
func weekOf(t time.Time) time.Time {
	d := t.UTC().Truncate(24 * time.Hour)
	back := (int(d.Weekday()) + 6) % 7
	return d.AddDate(0, 0, -back)
}
