package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// BenchmarkSchedule1000x32 is one pass over 1,000 queued entries on 32 nodes
// of 8 GPUs, half of them leased, with fair-share, quotas and idle history:
// the size dibs is designed to stay sound at. The target is 10 ms a pass.
func BenchmarkSchedule1000x32(b *testing.B) {
	users := []lease.Caller{alice, bob, carol, {UID: 1004, User: "dave"}, {UID: 1005, User: "erin"}, {UID: 1006, User: "frank"}}
	var nodes []lease.SchedNode
	for i := range 32 {
		var leases []lease.Lease
		for k := range 2 {
			c := users[(i+k)%len(users)]
			l := on(uint64(k+1), c, gpus(k*2, k*2+1), t0.Add(-time.Hour), t0.Add(time.Duration(30+i*7+k*13)*time.Minute))
			l.Borrowed = (i+k)%5 == 0
			leases = append(leases, l)
		}
		n := snode(fmt.Sprintf("gpu-%02d", i), 8, leases...)
		n.Idle = lease.IdleTrackerFrom(map[int]time.Time{0: t0.Add(-time.Hour), 1: t0.Add(-time.Hour)})
		nodes = append(nodes, n)
	}
	entries := make([]lease.QueueEntry, 1000)
	for i := range entries {
		c := users[i%len(users)]
		nn, g := 1, []int{1, 2, 4, 8, 1, 2, 1}[i%7]
		if i%13 == 0 {
			nn, g = 2+i%3, 8
		}
		entries[i] = ask(fmt.Sprintf("gpu-%02d-q%d", i%32, i), c, nn, g, time.Duration(10+i%240)*time.Minute, t0.Add(-time.Duration(i)*time.Minute))
	}
	usage := lease.Usage{"alice": 1e6, "bob": 5e5, "carol": 2e5, "dave": 1e5, "erin": 1e4}
	cfg := lease.SchedConfig{Quotas: map[string]int{"alice": 64, "bob": 32, "carol": 32, "dave": 32, "erin": 32, "frank": 32}}
	b.ReportAllocs()
	b.ResetTimer()
	var p lease.Plan
	for b.Loop() {
		p = lease.Schedule(entries, nodes, usage, t0, cfg)
	}
	b.StopTimer()
	if len(p.Order) != len(entries) || len(p.Start) == 0 {
		b.Fatalf("plan: %d ranked, %d started", len(p.Order), len(p.Start))
	}
	b.ReportMetric(float64(len(p.Start)), "starts")
}
