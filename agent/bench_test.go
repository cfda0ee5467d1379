package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
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

// waitFile polls for a file with a fine grain, for latency benchmarks.
func waitFile(b *testing.B, path string, within time.Duration) {
	b.Helper()
	if !poll.WaitEvery(500*time.Microsecond, within, func() bool { _, err := os.Stat(path); return err == nil }) {
		b.Fatalf("%s did not appear within %s", path, within)
	}
}

// waitQueued waits until the scheduler (node01) holds entry id, waiting:
// the clock starts at the release, not while the submission travels.
func waitQueued(b *testing.B, sched *agenttest.Node, id string) {
	b.Helper()
	agenttest.Eventually(b, 5*time.Second, "the scheduler to hold "+id, func() bool {
		for _, e := range sched.Queue().Entries {
			if e.ID == id {
				return !e.Running
			}
		}
		return false
	})
}

// BenchmarkReleaseToQueuedRun measures, on a two-node cluster, the time from
// the release that frees node02's only GPU to a run queued at node01 having
// its tmux session running there (the scheduler is node01; the release is
// gossiped to it, it decides, and node02 starts the session).
func BenchmarkReleaseToQueuedRun(b *testing.B) {
	agenttest.RequireTmux(b)
	nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	ctx := context.Background()
	if _, err := nodes[0].Client.Claim(ctx, api.ClaimRequest{Node: "node01", Count: 1}); err != nil {
		b.Fatal(err)
	}
	dir := agenttest.PublicDir(b)
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		hold, err := nodes[1].Client.Claim(ctx, api.ClaimRequest{Node: "node02", Count: 1})
		if err != nil {
			b.Fatal(err)
		}
		mark := filepath.Join(dir, fmt.Sprintf("run%d", i))
		s, err := nodes[0].Client.Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Node: "node02", Run: &api.RunSpec{Command: []string{"touch", mark}}}})
		if err != nil {
			b.Fatal(err)
		}
		waitQueued(b, nodes[0], s.ID)
		t0 := time.Now()
		if _, err := nodes[1].Client.Release(ctx, api.ReleaseRequest{IDs: []string{hold.ID}}); err != nil {
			b.Fatal(err)
		}
		waitFile(b, mark, 5*time.Second)
		lat = append(lat, time.Since(t0))
		agenttest.Eventually(b, 5*time.Second, "the run to finish", func() bool {
			bd, _ := nodes[1].Client.Board(ctx)
			return bd.Nodes[1].GPUs[0].Lease == nil && len(nodes[0].Queue().Entries) == 0
		})
	}
	reportPercentiles(b, lat)
}

// BenchmarkReleaseToGang2x4 measures the time from the release that frees
// the last GPU a 2 × 4 gang needs to every rank's session running.
func BenchmarkReleaseToGang2x4(b *testing.B) {
	agenttest.RequireTmux(b)
	nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"4xH100-80GB", "4xH100-80GB", "1xL40S"}, Quiet: true})
	ctx := context.Background()
	dir := agenttest.PublicDir(b)
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		hold, err := nodes[1].Client.Claim(ctx, api.ClaimRequest{Node: "node02", GPUs: []int{3}})
		if err != nil {
			b.Fatal(err)
		}
		prefix := filepath.Join(dir, fmt.Sprintf("gang%d-", i))
		s, err := nodes[2].Client.Submit(ctx, api.SubmitRequest{Nodes: 2, GPUsPerNode: 4, Model: "H100", Claim: api.ClaimRequest{Run: &api.RunSpec{
			Command: []string{"sh", "-c", "touch " + prefix + "$NODE_RANK"}}}})
		if err != nil {
			b.Fatal(err)
		}
		waitQueued(b, nodes[0], s.ID)
		t0 := time.Now()
		if _, err := nodes[1].Client.Release(ctx, api.ReleaseRequest{IDs: []string{hold.ID}}); err != nil {
			b.Fatal(err)
		}
		waitFile(b, prefix+"0", 5*time.Second)
		waitFile(b, prefix+"1", 5*time.Second)
		lat = append(lat, time.Since(t0))
		agenttest.Eventually(b, 5*time.Second, "the gang to finish", func() bool {
			return len(nodes[2].Queue().Entries) == 0
		})
	}
	reportPercentiles(b, lat)
}

// BenchmarkRemoteClaimRoundTrip measures `dibs claim --node node02` made at
// node01: the socket, the forward over memberlist's reliable channel,
// node02's decision and fsync, and the answer.
func BenchmarkRemoteClaimRoundTrip(b *testing.B) {
	nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"8xH100-80GB", "8xH100-80GB"}, Quiet: true})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := nodes[0].Client.Claim(ctx, api.ClaimRequest{Node: "node02", Count: 1})
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := nodes[1].Client.Release(ctx, api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}
