package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
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
	entries := make([]queue.QueueEntry, 1000)
	for i := range entries {
		c := users[i%len(users)]
		nn, g := 1, []int{1, 2, 4, 8, 1, 2, 1}[i%7]
		if i%13 == 0 {
			nn, g = 2+i%3, 8
		}
		entries[i] = ask(fmt.Sprintf("gpu-%02d-q%d", i%32, i), c, nn, g, time.Duration(10+i%240)*time.Minute, t0.Add(-time.Duration(i)*time.Minute))
	}
	usage := queue.Usage{"alice": 1e6, "bob": 5e5, "carol": 2e5, "dave": 1e5, "erin": 1e4}
	// Terse, as the scheduler runs its passes (dibs queue's own pass has
	// the words, and every node's reasons with Explain).
	cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 64, "bob": 32, "carol": 32, "dave": 32, "erin": 32, "frank": 32}, Terse: true}
	b.ReportAllocs()
	b.ResetTimer()
	var p queue.Plan
	for b.Loop() {
		p = queue.Schedule(entries, nodes, usage, t0, cfg)
	}
	b.StopTimer()
	if len(p.Order) != len(entries) || len(p.Start) == 0 {
		b.Fatalf("plan: %d ranked, %d started", len(p.Order), len(p.Start))
	}
	b.ReportMetric(float64(len(p.Start)), "starts")
}

// BenchmarkSchedule1000x32Units is BenchmarkSchedule1000x32 with every
// kind of unit present: a GPU split into MIG instances on every fourth
// node, shared budgets on every third, bookings on every fifth, and a tenth
// of the entries asking for budgets, a seventh for a pool.
func BenchmarkSchedule1000x32Units(b *testing.B) {
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
		if i%3 == 0 {
			for k := range 2 {
				l := on(uint64(10+k), users[(i+k+2)%len(users)], []int{4}, t0.Add(-time.Hour), t0.Add(time.Duration(20+i+k*40)*time.Minute))
				l.MemMiB, l.Share = 30<<10, 0.37
				leases = append(leases, l)
			}
		}
		n := snode(fmt.Sprintf("gpu-%02d", i), 8, leases...)
		n.Idle = lease.IdleTrackerFrom(map[int]time.Time{0: t0.Add(-time.Hour), 1: t0.Add(-time.Hour)})
		if i%4 == 0 {
			g := &n.Snap.GPUs[7]
			g.MIG = nodeprobe.MIGEnabled
			for k, p := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
				g.MIGDevices = append(g.MIGDevices, nodeprobe.MIGDevice{Index: k, UUID: fmt.Sprintf("MIG-%02d-%d", i, k), Profile: p, MemoryTotalMiB: uint64(40>>k) << 10})
			}
			if i%8 == 0 {
				l := on(30, users[i%len(users)], []int{7}, t0.Add(-time.Hour), t0.Add(time.Duration(15+i)*time.Minute))
				l.MIG, l.Share = g.MIGDevices[0].UUID, 0.5
				n.Leases = append(n.Leases, l)
			}
		}
		if i%2 == 0 {
			n.Snap.Host.Tags = []string{"h100"}
		}
		if i%5 == 0 {
			n.Bookings = []lease.Lease{booked(n.Name, 20, carol, gpus(5, 6), t0.Add(time.Duration(1+i%3)*time.Hour), t0.Add(6*time.Hour))}
		}
		nodes = append(nodes, n)
	}
	entries := make([]queue.QueueEntry, 1000)
	for i := range entries {
		c := users[i%len(users)]
		nn, g := 1, []int{1, 2, 4, 8, 1, 2, 1}[i%7]
		if i%13 == 0 {
			nn, g = 2+i%3, 8
		}
		e := ask(fmt.Sprintf("gpu-%02d-q%d", i%32, i), c, nn, g, time.Duration(10+i%240)*time.Minute, t0.Add(-time.Duration(i)*time.Minute))
		switch {
		case i%10 == 1:
			e.Nodes, e.GPUsPerNode, e.MemMiB = 1, 1, uint64(8+i%24)<<10
		case i%10 == 3:
			e.Nodes, e.GPUsPerNode, e.MIG = 1, 1, []string{"3g.40gb", "2g.20gb", "1g.10gb"}[i%3]
		case i%7 == 2:
			e.Tags = []string{"h100"}
		}
		entries[i] = e
	}
	usage := queue.Usage{"alice": 1e6, "bob": 5e5, "carol": 2e5, "dave": 1e5, "erin": 1e4}
	cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 64, "bob": 32, "carol": 32, "dave": 32, "erin": 32, "frank": 32},
		Pools: lease.Pools{"h100": {MaxTime: 8 * time.Hour, MaxGPUs: 24}}, Terse: true}
	b.ReportAllocs()
	b.ResetTimer()
	var p queue.Plan
	for b.Loop() {
		p = queue.Schedule(entries, nodes, usage, t0, cfg)
	}
	b.StopTimer()
	shared, mig := 0, 0
	for _, s := range p.Start {
		if s.Entry.MemMiB > 0 {
			shared++
		}
		if s.Entry.MIG != "" {
			mig++
		}
	}
	if len(p.Order) != len(entries) || len(p.Start) == 0 || shared == 0 || mig == 0 {
		b.Fatalf("plan: %d ranked, %d started, %d of them shared, %d MIG", len(p.Order), len(p.Start), shared, mig)
	}
	b.ReportMetric(float64(len(p.Start)), "starts")
	b.ReportMetric(float64(shared), "shared-starts")
	b.ReportMetric(float64(mig), "mig-starts")
}
