package event_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// The idle notice counts from the lease's own start: a GPU quiet for 13
// minutes before alice claimed it at 14:24:17 is idle for 2m at 14:26:18,
// not 13m (the GPU's earlier quiet time is not hers).
func TestIdleNoticeCountsFromLeaseStart(t *testing.T) {
	p := lease.DefaultPolicy()
	p.IdleAfter = 2 * time.Minute
	claimed := time.Date(2026, 3, 10, 14, 24, 17, 0, time.UTC)
	now := time.Date(2026, 3, 10, 14, 26, 18, 0, time.UTC)
	tests := []struct {
		name       string
		quietSince time.Time
		want       string
	}{
		{"quiet before the claim", claimed.Add(-13 * time.Minute), "has been idle for 2m"},
		{"quiet after the claim", claimed.Add(time.Second), "has been idle for 2m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := held(1, alice, []int{0}, claimed, 4*time.Hour)
			idle := lease.IdleTrackerFrom(map[int]time.Time{0: tt.quietSince})
			snap := islands(2)
			before := lease.Judge(snap, []lease.Lease{l}, idle, claimed, p)
			cur := lease.Judge(snap, []lease.Lease{l}, idle, now, p)
			evs := event.FlagEvents(node, before, cur, []lease.Lease{l}, map[int]time.Time{0: tt.quietSince}, now)
			if len(evs) != 1 || evs[0].Kind != event.EventIdle || !strings.Contains(evs[0].Text, tt.want) {
				t.Fatalf("events %+v; want one idle notice saying %q", evs, tt.want)
			}
		})
	}
}

// No squatter event while the ended lease's work exits; one once the grace
// is over and the process is still there.
func TestFlagEventsEndGrace(t *testing.T) {
	p := lease.DefaultPolicy()
	end := t0.Add(time.Hour)
	l := held(1, alice, []int{0}, t0, 4*time.Hour)
	ended := []lease.LedgerEntry{lease.Ended(l, end, string(lease.EndReleased), "")}
	snap := withProc(islands(2), 0, proc(733, alice, "python3"))
	before := lease.JudgeWithEnded(snap, []lease.Lease{l}, nil, nil, end.Add(-time.Second), p)
	tests := []struct {
		name  string
		now   time.Time
		kinds []event.EventKind
	}{
		{"within the grace", end.Add(time.Second), nil},
		{"grace over", end.Add(lease.EndGrace), []event.EventKind{event.EventSquatter}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := lease.JudgeWithEnded(snap, nil, ended, nil, tt.now, p)
			var got []event.EventKind
			for _, e := range event.FlagEvents(node, before, cur, nil, nil, tt.now) {
				got = append(got, e.Kind)
			}
			if !slices.Equal(got, tt.kinds) {
				t.Errorf("events = %v, want %v", got, tt.kinds)
			}
		})
	}
}

// TestIdleNoticeUnderAMinute: with a short idle_after (the demo's 20 s), the
// notice says how long in seconds; it said "idle for 0s", the 20 s rounded
// to minutes (issue 30).
func TestIdleNoticeUnderAMinute(t *testing.T) {
	p := lease.DefaultPolicy()
	p.IdleAfter = 20 * time.Second
	claimed := time.Date(2026, 3, 10, 14, 24, 17, 0, time.UTC)
	now := claimed.Add(20 * time.Second)
	l := held(1, alice, []int{0}, claimed, 4*time.Hour)
	quiet := map[int]time.Time{0: claimed}
	idle := lease.IdleTrackerFrom(quiet)
	snap := islands(2)
	before := lease.Judge(snap, []lease.Lease{l}, idle, claimed, p)
	cur := lease.Judge(snap, []lease.Lease{l}, idle, now, p)
	evs := event.FlagEvents(node, before, cur, []lease.Lease{l}, quiet, now)
	if len(evs) != 1 || !strings.Contains(evs[0].Text, "has been idle for 20s") {
		t.Fatalf("events %+v; want one idle notice saying it has been idle for 20s", evs)
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{20 * time.Second, "20s"}, {59 * time.Second, "59s"}, {89 * time.Second, "1m"}, {90 * time.Second, "2m"}, {-20 * time.Second, "-20s"}} {
		if got := words.FormatDuration(words.ToMinute(tc.d)); got != tc.want {
			t.Errorf("FormatDuration(ToMinute(%s)) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
