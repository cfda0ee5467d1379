package lease_test

import (
	"strings"
	"testing"
	"time"

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
			evs := lease.FlagEvents(node, before, cur, []lease.Lease{l}, map[int]time.Time{0: tt.quietSince}, now)
			if len(evs) != 1 || evs[0].Kind != lease.EventIdle || !strings.Contains(evs[0].Text, tt.want) {
				t.Fatalf("events %+v; want one idle notice saying %q", evs, tt.want)
			}
		})
	}
}
