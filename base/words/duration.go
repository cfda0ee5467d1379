// Package words holds what a person reads and types, beside the rules:
// durations and times as people write them (FormatDuration, ParseDuration,
// ParseWhen), input quoted for an error message (QuoteInput), GPU counts in
// words, and the bounds every text and name is checked against wherever it
// comes from (the Max* limits, CheckText, CheckNote, TextChecker). It stands
// on refusal and termsafe only, so every room may use it.
package words

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// FormatDuration prints a duration the way people write them: 3h20m, 45m, 30s.
func FormatDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	d = d.Round(time.Second)
	var s string
	switch {
	case d >= 24*time.Hour:
		days := d / (24 * time.Hour)
		h := (d % (24 * time.Hour)) / time.Hour
		s = fmt.Sprintf("%dd%dh", days, h)
		if h == 0 {
			s = fmt.Sprintf("%dd", days)
		}
	case d >= time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		s = fmt.Sprintf("%dh%02dm", h, m)
		if m == 0 {
			s = fmt.Sprintf("%dh", h)
		}
	case d >= time.Minute:
		s = fmt.Sprintf("%dm", d/time.Minute)
	default:
		s = fmt.Sprintf("%ds", d/time.Second)
	}
	if neg {
		return "-" + s
	}
	return s
}

// ToMinute rounds d to the minute for a sentence that needs no seconds,
// but not below one: under a minute it keeps its seconds, so 20 s of idle
// reads "20s", not the "0s" a plain Round(time.Minute) made of it.
func ToMinute(d time.Duration) time.Duration {
	if d > -time.Minute && d < time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// MaxDuration is the longest time limit ParseDuration accepts, ten years: far
// over any policy maximum, and short enough that every duration it accepts
// prints (FormatDuration) in a form it accepts again.
const MaxDuration = 3650 * 24 * time.Hour

// ParseDuration reads a time limit as a person types it: Go durations (90m,
// 1h30m) plus days (2d, 1d12h). Zero and negative limits are refused.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, refusal.Invalidf("empty duration: write it like 30m, 4h or 2d")
	}
	bad := refusal.Invalidf("cannot read duration %s: write it like 30m, 4h or 2d", QuoteInput(in))
	rest := in
	var days time.Duration
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 || n > int(MaxDuration/(24*time.Hour)) {
			return 0, bad
		}
		days = time.Duration(n) * 24 * time.Hour
		rest = rest[i+1:]
		// "1d-5h" is not a way to write 19h.
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, bad
		}
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, bad
		}
	}
	if d > 0 && d > MaxDuration-days {
		return 0, refusal.Invalidf("duration %s is longer than %s: ask for less", QuoteInput(in), FormatDuration(MaxDuration))
	}
	d += days
	if d <= 0 {
		return 0, refusal.Invalidf("duration must be positive, got %s: write it like 30m, 4h or 2d", FormatDuration(d))
	}
	return d, nil
}

// QuoteInput quotes what a person (or a program) sent for an error message,
// cut short: the input may come from the network and be of any length. The
// queue and the events quote their input the same way.
func QuoteInput(s string) string {
	const max = 32
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
