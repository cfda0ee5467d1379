package queue_test

import (
	"math"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestFairShareFactor(t *testing.T) {
	tests := []struct {
		name   string
		user   string
		usage  queue.Usage
		shares map[string]float64
		want   float64
	}{
		{"nobody used anything", "alice", nil, nil, 1},
		{"no usage of her own", "alice", queue.Usage{"bob": 3600}, nil, 1},
		{"used exactly her share", "alice", queue.Usage{"alice": 100, "bob": 100}, nil, 0.5},
		{"used everything of two", "alice", queue.Usage{"alice": 100, "bob": 0}, nil, 0.25},
		{"a light user", "bob", queue.Usage{"alice": 300, "bob": 100}, nil, math.Exp2(-0.5)},
		{"a double share halves the bite", "alice", queue.Usage{"alice": 100, "bob": 100}, map[string]float64{"alice": 3}, math.Exp2(-0.5 / 0.75)},
		{"a configured user with no usage counts in the shares", "alice", queue.Usage{"alice": 100}, map[string]float64{"carol": 1}, 0.25},
		{"zero share runs on age alone", "alice", nil, map[string]float64{"alice": 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := queue.FairShareFactor(tt.user, tt.usage, queue.SchedConfig{Shares: tt.shares})
			if !near(got, tt.want) {
				t.Errorf("FairShareFactor(%s) = %v, want %v", tt.user, got, tt.want)
			}
		})
	}
}

func TestDecayedUsage(t *testing.T) {
	const hl = 7 * day
	tenHours := lease.LedgerEntry{LeaseID: "gpu-01-1", User: "alice", GPUs: []int{0, 1}, Start: t0.Add(-5 * time.Hour), End: t0, GPUSeconds: 10 * 3600}
	running := held(2, bob, []int{2, 3}, t0.Add(-time.Hour), 4*time.Hour)
	reservation := held(3, bob, []int{4}, t0.Add(-time.Hour), 4*time.Hour)
	reservation.ReservedUntil = t0.Add(time.Minute)
	tests := []struct {
		name   string
		ledger []lease.LedgerEntry
		active []lease.Lease
		now    time.Time
		want   queue.Usage
	}{
		{"just ended", []lease.LedgerEntry{tenHours}, nil, t0, queue.Usage{"alice": 36000}},
		{"one half-life halves it", []lease.LedgerEntry{tenHours}, nil, t0.Add(hl), queue.Usage{"alice": 18000}},
		{"two half-lives quarter it", []lease.LedgerEntry{tenHours}, nil, t0.Add(2 * hl), queue.Usage{"alice": 9000}},
		{"a running lease counts its GPU-seconds so far", nil, []lease.Lease{running}, t0, queue.Usage{"bob": 2 * 3600}},
		{"a reservation is not use", nil, []lease.Lease{reservation}, t0, queue.Usage{}},
		{"ended and still listed counts once", []lease.LedgerEntry{{LeaseID: running.ID, User: "bob", End: t0, GPUSeconds: 100}}, []lease.Lease{running}, t0, queue.Usage{"bob": 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := queue.DecayedUsage(tt.ledger, tt.active, tt.now, hl)
			if len(got) != len(tt.want) {
				t.Fatalf("usage = %v, want %v", got, tt.want)
			}
			for u, w := range tt.want {
				if !near(got[u], w) {
					t.Errorf("usage[%s] = %v, want %v", u, got[u], w)
				}
			}
		})
	}
}

func TestPriority(t *testing.T) {
	cfg := queue.SchedConfig{}
	e := queue.QueueEntry{ID: "n-q1", User: "alice", SubmittedAt: t0, Nodes: 1, GPUsPerNode: 1}
	usage := queue.Usage{"alice": 3600, "bob": 3600}
	p0 := queue.Priority(e, usage, t0, cfg)
	p1 := queue.Priority(e, usage, t0.Add(day), cfg)
	pMax := queue.Priority(e, usage, t0.Add(30*day), cfg)
	if want := 1000 * 0.5; !near(p0, want) {
		t.Errorf("priority at submission = %v, want %v (fair-share only)", p0, want)
	}
	if want := 1000*0.5 + 100.0/7; !near(p1, want) {
		t.Errorf("priority after a day = %v, want %v", p1, want)
	}
	if want := 1000*0.5 + 100.0; !near(pMax, want) {
		t.Errorf("priority after a month = %v, want %v (age capped at MaxAge)", pMax, want)
	}
	if got := queue.Priority(e, usage, t0, queue.SchedConfig{WeightAge: 1}); got != 0 {
		t.Errorf("with only the age weight set, fair-share weight is off: priority = %v, want 0", got)
	}
}

func TestWithDefaults(t *testing.T) {
	c := queue.SchedConfig{}.WithDefaults()
	if c.HalfLife != 7*day || c.MaxAge != 7*day || c.IdleReclaimAfter != 30*time.Minute ||
		c.ReservationTTL != 30*time.Second || c.PreemptGrace != 2*time.Minute ||
		c.WeightFairShare != 1000 || c.WeightAge != 100 {
		t.Errorf("defaults = %+v", c)
	}
	kept := queue.SchedConfig{HalfLife: time.Hour, WeightFairShare: 5}.WithDefaults()
	if kept.HalfLife != time.Hour || kept.WeightFairShare != 5 || kept.WeightAge != 0 {
		t.Errorf("set values were not kept: %+v", kept)
	}
}

func TestWindowUsage(t *testing.T) {
	ledger := []lease.LedgerEntry{
		// 2 GPUs from 10h ago to 6h ago: half of it is in the last 8h.
		{LeaseID: "gpu-01-1", User: "alice", Start: t0.Add(-10 * time.Hour), End: t0.Add(-6 * time.Hour), GPUSeconds: 2 * 4 * 3600},
		// Entirely before the window.
		{LeaseID: "gpu-01-2", User: "bob", Start: t0.Add(-30 * time.Hour), End: t0.Add(-20 * time.Hour), GPUSeconds: 3600},
	}
	active := []lease.Lease{held(3, bob, []int{0, 1, 2}, t0.Add(-time.Hour), 4*time.Hour)}
	got := queue.WindowUsage(ledger, active, t0.Add(-8*time.Hour), t0)
	want := queue.Usage{"alice": 2 * 2 * 3600, "bob": 3 * 3600}
	for u, w := range want {
		if !near(got[u], w) {
			t.Errorf("usage[%s] = %v, want %v", u, got[u], w)
		}
	}
}

// TestDailyUsage splits the window by day: a lease across midnight counts
// in both days by its part in each, a running lease up to now, and the
// days add up to the window's total.
func TestDailyUsage(t *testing.T) {
	midnight := t0.Add(-6 * time.Hour)
	ledger := []lease.LedgerEntry{
		// 2 GPUs from 2h before midnight to 2h after: 4 GPU-hours each day.
		{LeaseID: "gpu-01-1", User: "alice", Start: midnight.Add(-2 * time.Hour), End: midnight.Add(2 * time.Hour), GPUSeconds: 2 * 4 * 3600},
	}
	// bob's 3 GPUs since an hour ago: 3 GPU-hours, all today.
	active := []lease.Lease{held(3, bob, []int{0, 1, 2}, t0.Add(-time.Hour), 4*time.Hour)}
	cuts := []time.Time{midnight.Add(-24 * time.Hour), midnight}
	days := queue.DailyUsage(ledger, active, cuts, t0)
	want := []queue.Usage{{"alice": 4 * 3600}, {"alice": 4 * 3600, "bob": 3 * 3600}}
	if len(days) != len(want) {
		t.Fatalf("got %d days, want %d", len(days), len(want))
	}
	for d := range want {
		for u, w := range want[d] {
			if !near(days[d][u], w) {
				t.Errorf("day %d usage[%s] = %v, want %v", d, u, days[d][u], w)
			}
		}
		if len(days[d]) != len(want[d]) {
			t.Errorf("day %d = %v, want %v", d, days[d], want[d])
		}
	}
	total := queue.WindowUsage(ledger, active, cuts[0], t0)
	for u, w := range total {
		if sum := days[0][u] + days[1][u]; !near(sum, w) {
			t.Errorf("%s's days add up to %v, the window says %v", u, sum, w)
		}
	}
}
