package words_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

func TestParseWhen(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data on this machine: %v", err)
	}
	// Monday 2 March 2026, 10:30 in Berlin.
	now := time.Date(2026, 3, 2, 10, 30, 0, 0, berlin)
	at := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, berlin) }
	tests := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{"tomorrow 09:00", at(3, 9, 0), ""},
		{"Tomorrow 9am", at(3, 9, 0), ""},
		{"today 14:30", at(2, 14, 30), ""},
		{"today 2:30pm", at(2, 14, 30), ""},
		{"today noon", at(2, 12, 0), ""},
		{"11:00", at(2, 11, 0), ""},   // still ahead today
		{"09:00", at(3, 9, 0), ""},    // passed: tomorrow
		{"10:30", at(3, 10, 30), ""},  // now is not ahead
		{"midnight", at(3, 0, 0), ""}, // the next one
		{"mon 11:00", at(2, 11, 0), ""},
		{"monday 09:00", at(9, 9, 0), ""}, // passed today: next week
		{"fri 17:00", at(6, 17, 0), ""},
		{"Sunday 12am", at(8, 0, 0), ""},
		{"2026-03-10 08:15", at(10, 8, 15), ""},
		{"2026-03-10T08:15", at(10, 8, 15), ""},
		{"2026-03-10T08:15:00+01:00", at(10, 8, 15), ""},
		{"in 2h", now.Add(2 * time.Hour), ""},
		{"+90m", now.Add(90 * time.Minute), ""},
		{"in 1d", now.Add(24 * time.Hour), ""},
		{"", time.Time{}, "cannot read the time"},
		{"tomorrow", time.Time{}, `say the time of day too, like "tomorrow 09:00"`},
		{"2026-03-10", time.Time{}, "say the time of day too"},
		{"tomorrow 25:00", time.Time{}, "cannot read the time"},
		{"tomorrow 9", time.Time{}, "cannot read the time"},
		{"13pm", time.Time{}, "cannot read the time"},
		{"soon", time.Time{}, `write it like "tomorrow 09:00"`},
		{"in forever", time.Time{}, "cannot read the time"},
		{"2026-02-30 09:00", time.Time{}, "cannot read the time"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := words.ParseWhen(tt.in, now)
			if tt.wantErr != "" {
				checkRefusal(t, err, refusal.CodeInvalid, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("ParseWhen(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// Across a daylight-saving change "tomorrow 09:00" is still 09:00 on the
// clock, not 24 hours from now.
func TestParseWhenDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data on this machine: %v", err)
	}
	now := time.Date(2026, 3, 28, 9, 0, 0, 0, berlin) // clocks go forward on the 29th
	got, err := words.ParseWhen("tomorrow 09:00", now)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 29, 9, 0, 0, 0, berlin); !got.Equal(want) || got.Sub(now) != 23*time.Hour {
		t.Errorf("got %s (%s ahead), want %s, 23h ahead", got, got.Sub(now), want)
	}
}

// checkRefusal fails t unless err is a refusal of code whose message says
// every one of want (lease's tests have the same helper).
func checkRefusal(t *testing.T, err error, code refusal.Code, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %s refusal saying %q", code, want)
	}
	if got := refusal.CodeOf(err); got != code {
		t.Errorf("code = %q, want %q (message %q)", got, code, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q does not say %q", err, w)
		}
	}
}
