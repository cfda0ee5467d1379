package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
)

func chartReport() api.DailyUsageReport {
	day := func(d int) time.Time { return time.Date(2026, 3, d, 0, 0, 0, 0, time.Local) }
	return api.DailyUsageReport{
		Since: day(2),
		Days: []api.UsageDay{
			{Start: day(2), GPUHours: map[string]float64{"alice": 40, "bob": 10}},
			{Start: day(3), GPUHours: map[string]float64{}},
			{Start: day(4), GPUHours: map[string]float64{"bob": 20, "eve\x1b[2J": 0.01}},
		},
		Missing: []string{"node04"},
	}
}

// TestUsageChart draws GPU-hours per person per day: bars scaled to the
// largest day, the same order of people each day, a day of nothing as a
// dash, names escaped; '#' under NO_COLOR; figures alone on a narrow
// terminal.
func TestUsageChart(t *testing.T) {
	var b strings.Builder
	printUsageChart(&b, chartReport(), 80, false)
	got := b.String()
	want := `GPU-hours per person per day, since Mon Mar 2 00:00
Mon Mar 2   alice       █████████████████████████████████████████████████   40.0
            bob         ████████████▎                                       10.0
Tue Mar 3   -
Wed Mar 4   bob         ████████████████████████▌                           20.0
            eve\x1b[2J  ▏                                                    0.0
not counted (no answer, or a dibs too old to split by day): node04
`
	if got != want {
		t.Errorf("chart:\n%s\nwant\n%s", got, want)
	}

	b.Reset()
	printUsageChart(&b, chartReport(), 80, true)
	for _, r := range b.String() {
		if r > 127 {
			t.Fatalf("plain chart has %q:\n%s", r, b.String())
		}
	}
	if !strings.Contains(b.String(), "alice       "+strings.Repeat("#", 49)+"   40.0") {
		t.Errorf("plain chart:\n%s\nwant alice's bar in '#'", b.String())
	}

	b.Reset()
	printUsageChart(&b, chartReport(), 30, false)
	if strings.ContainsAny(b.String(), "█▏#") || !strings.Contains(b.String(), "Mon Mar 2   alice          40.0") {
		t.Errorf("narrow chart:\n%s\nwant the figures without bars", b.String())
	}
}
