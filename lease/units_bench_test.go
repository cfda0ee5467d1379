package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// BenchmarkPlanClaimUnits is one claim decision on an 8-GPU node holding a
// MIG GPU with two instances held, a shared GPU with two budgets, a
// whole-GPU lease and two bookings: whole GPUs, a MIG instance, a budget.
func BenchmarkPlanClaimUnits(b *testing.B) {
	snap := islands(4, 4)
	g := &snap.GPUs[7]
	g.MIG = nodeprobe.MIGEnabled
	for k, p := range []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"} {
		g.MIGDevices = append(g.MIGDevices, nodeprobe.MIGDevice{Index: k, UUID: fmt.Sprintf("MIG-%04d", k), Profile: p, MemoryTotalMiB: 10000})
	}
	m1, m2 := held(1, alice, []int{7}, t0, time.Hour), held(2, bob, []int{7}, t0, time.Hour)
	m1.MIG, m1.Share, m2.MIG, m2.Share = "MIG-0000", 0.5, "MIG-0001", 0.25
	s1, s2 := mem(3, alice, 6, 20<<10), mem(4, bob, 6, 20<<10)
	w := held(5, carol, []int{0, 1}, t0, 3*time.Hour)
	b1 := held(6, bob, []int{2, 3}, t0.Add(2*time.Hour), time.Hour)
	b2 := held(7, carol, []int{4}, t0.Add(5*time.Hour), time.Hour)
	b1.Booked, b2.Booked = true, true
	tab := table(m1, m2, s1, s2, w, b1, b2)
	p := lease.DefaultPolicy()
	for _, tc := range []struct {
		name string
		req  lease.Claim
	}{
		{"whole", lease.Claim{Count: 2}},
		{"mig", lease.Claim{MIG: "1g.10gb"}},
		{"shared", lease.Claim{MemMiB: 10 << 10}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tab.PlanClaim(alice, tc.req, snap, t0, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
