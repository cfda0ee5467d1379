package words

import (
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// ParseWhen reads a time a person types for a booking, in now's time zone:
//
//	09:00, 9am, 2:30pm, noon      the next time the clock shows it
//	today 14:00, tomorrow 09:00   that day
//	mon 09:00, friday 9am         the next such day (today if still ahead)
//	2025-06-03 09:00              that day (also 2025-06-03T09:00, RFC 3339)
//	in 2h, +90m                   from now
//
// Words are case-insensitive. It is pure: now is passed in.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	in := strings.ToLower(strings.Join(strings.Fields(s), " "))
	bad := refusal.Invalidf(`cannot read the time %s: write it like "tomorrow 09:00", "mon 14:30", "2025-06-03 09:00" or "in 2h"`, QuoteInput(strings.TrimSpace(s)))
	if in == "" {
		return time.Time{}, bad
	}
	if rest, ok := cutAny(in, "in ", "+", "now+", "now +"); ok {
		d, err := ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return time.Time{}, bad
		}
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339, strings.ToUpper(in)); err == nil {
		return t.In(now.Location()), nil
	}
	day, clock, _ := strings.Cut(in, " ")
	if clock == "" {
		day, clock = "", in
	}
	if d, c, ok := strings.Cut(in, "t"); ok && isDate(d) {
		day, clock = d, c
	}
	h, m, ok := parseClock(clock)
	if !ok {
		if isDate(in) || in == "today" || in == "tomorrow" || weekday(in) >= 0 {
			return time.Time{}, refusal.Invalidf("say the time of day too, like %q", in+" 09:00")
		}
		return time.Time{}, bad
	}
	y, mo, d := now.Date()
	at := func(y int, mo time.Month, d int) time.Time { return time.Date(y, mo, d, h, m, 0, 0, now.Location()) }
	switch {
	case day == "":
		t := at(y, mo, d)
		if !t.After(now) {
			t = at(y, mo, d+1)
		}
		return t, nil
	case day == "today":
		return at(y, mo, d), nil
	case day == "tomorrow":
		return at(y, mo, d+1), nil
	case weekday(day) >= 0:
		ahead := (int(weekday(day)) - int(now.Weekday()) + 7) % 7
		t := at(y, mo, d+ahead)
		if !t.After(now) {
			t = at(y, mo, d+ahead+7)
		}
		return t, nil
	case isDate(day):
		dt, err := time.ParseInLocation("2006-01-02", day, now.Location())
		if err != nil {
			return time.Time{}, bad
		}
		return at(dt.Year(), dt.Month(), dt.Day()), nil
	}
	return time.Time{}, bad
}

// cutAny cuts the first of prefixes that s starts with.
func cutAny(s string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return "", false
}

func isDate(s string) bool {
	_, err := time.Parse("2006-01-02", s)
	return err == nil
}

// weekday reads a day name or its first three letters; -1 when it is not one.
func weekday(s string) time.Weekday {
	if len(s) < 3 {
		return -1
	}
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := strings.ToLower(d.String())
		if s == name || s == name[:3] {
			return d
		}
	}
	return -1
}

// parseClock reads a time of day: 09:00, 9:00, 9, 9am, 9:30pm, 21:30,
// noon, midnight.
func parseClock(s string) (h, m int, ok bool) {
	switch s {
	case "noon":
		return 12, 0, true
	case "midnight":
		return 0, 0, true
	}
	pm, am := strings.HasSuffix(s, "pm"), strings.HasSuffix(s, "am")
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, "pm"), "am"))
	hs, ms, hasMin := strings.Cut(s, ":")
	h, err := strconv.Atoi(hs)
	if err != nil || len(hs) > 2 || hs == "" {
		return 0, 0, false
	}
	if hasMin {
		if m, err = strconv.Atoi(ms); err != nil || len(ms) != 2 {
			return 0, 0, false
		}
	} else if !am && !pm && len(hs) < 2 {
		// A bare "9" is too easy to mistake for a count: ask for 9:00 or 9am.
		return 0, 0, false
	}
	switch {
	case am || pm:
		if h < 1 || h > 12 {
			return 0, 0, false
		}
		h %= 12
		if pm {
			h += 12
		}
	case h > 23:
		return 0, 0, false
	}
	if m < 0 || m > 59 {
		return 0, 0, false
	}
	return h, m, true
}

// ParsePast reads a time a person types for a look back (`dibs history
// --since`), in now's time zone:
//
//	2d, 90m, 1w              that long before now
//	today, yesterday         that day's midnight
//	2025-06-03               that day's midnight
//	2025-06-03 09:00         that time (also 2025-06-03T09:00, RFC 3339)
//
// It is pure: now is passed in.
func ParsePast(s string, now time.Time) (time.Time, error) {
	in := strings.ToLower(strings.Join(strings.Fields(s), " "))
	midnight := func(t time.Time) time.Time {
		y, m, d := t.Date()
		return time.Date(y, m, d, 0, 0, 0, 0, now.Location())
	}
	switch in {
	case "today":
		return midnight(now), nil
	case "yesterday":
		return midnight(now).AddDate(0, 0, -1), nil
	}
	if d, err := ParseDuration(in); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, strings.ToUpper(in)); err == nil {
		return t.In(now.Location()), nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02 15:04", "2006-01-02t15:04", "2006-01-02 15:04:05", "2006-01-02t15:04:05"} {
		if t, err := time.ParseInLocation(layout, in, now.Location()); err == nil {
			return t, nil
		}
	}
	return time.Time{}, refusal.Invalidf(`cannot read the time %s: write it like "2d" (two days ago), "yesterday", "2025-06-03" or "2025-06-03 09:00"`, QuoteInput(strings.TrimSpace(s)))
}
