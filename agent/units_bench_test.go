package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// BenchmarkClaimRoundTripUnits is BenchmarkClaimRoundTrip on a node with
// every kind of unit in use: a GPU split into MIG instances with one held,
// a shared GPU with a budget on it, and a booking of two GPUs later today.
// It claims (and, untimed, releases) whole GPUs, a MIG instance, a budget.
//
// Each kind runs on an agent of its own: every claim sums the usage ledger,
// which grows by one entry per release, so kinds measured one after the
// other on one agent would pay for the ones before.
func BenchmarkClaimRoundTripUnits(b *testing.B) {
	ctx := context.Background()
	start := func(b *testing.B) *agenttest.Node {
		n := agenttest.Start(b, agenttest.Options{Sim: "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,7xA100-80GB", Quiet: true, ProbeInterval: time.Second})
		for _, req := range []api.ClaimRequest{{MIG: "3g.40gb"}, {Mem: "20G"}} {
			if _, err := n.Client.Claim(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := n.Client.Book(ctx, api.BookRequest{Count: 2, Start: time.Now().Add(2 * time.Hour), Duration: "3h"}); err != nil {
			b.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		req  api.ClaimRequest
	}{
		{"whole", api.ClaimRequest{Count: 1}},
		{"mig", api.ClaimRequest{MIG: "1g.10gb"}},
		{"shared", api.ClaimRequest{Mem: "10G"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := start(b)
			b.ResetTimer()
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r, err := n.Client.Claim(ctx, tc.req)
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := n.Client.Release(ctx, api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}
