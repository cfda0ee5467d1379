package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// BenchmarkClaimRoundTrip measures one claim through the unix socket,
// including the bbolt commit and its fsync, as a client sees it. Each
// iteration claims one GPU and releases it (the release is not timed).
func BenchmarkClaimRoundTrip(b *testing.B) {
	n := agenttest.Start(b, agenttest.Options{Sim: "8xH100-80GB", Quiet: true, ProbeInterval: time.Second})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := n.Client.Claim(ctx, api.ClaimRequest{Count: 1})
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
}

// BenchmarkBoard measures `dibs ls`'s request: the whole board through the socket.
func BenchmarkBoard(b *testing.B) {
	n := agenttest.Start(b, agenttest.Options{Sim: "8xH100-80GB", Quiet: true, ProbeInterval: time.Second})
	ctx := context.Background()
	n.Client.Claim(ctx, api.ClaimRequest{Count: 3, Note: "bench"})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := n.Client.Board(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	p := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(0.50), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
}
