package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/runrecord"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// busyLedger is a store whose ledger holds n ended leases of eight people
// over the last 30 days before now (a tenth of them queued runs), the
// history of a busy team over months.
func busyLedger(tb testing.TB, node string, n int, now time.Time) *storetest.Store {
	tb.Helper()
	s := storetest.New(storetest.Options{})
	span := 30 * 24 * time.Hour
	for i := 1; i <= n; i++ {
		end := now.Add(-span + span/time.Duration(n+1)*time.Duration(i))
		l := lease.Lease{ID: lease.LeaseID(node, uint64(i)), Node: node, GPUs: []int{i % 2}, User: fmt.Sprintf("user%d", i%8), UID: 2000 + i%8,
			Token: uint64(i), Kind: lease.KindBatch, StartedAt: end.Add(-20 * time.Minute), ExpiresAt: end.Add(time.Hour)}
		if i%10 == 0 {
			l.Entry, l.QueuedAt = fmt.Sprintf("%s-q%d", node, i), l.StartedAt.Add(-5*time.Minute)
		}
		if err := s.End(l.ID, lease.Ended(l, end, "released", "")); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// BenchmarkHistory measures `dibs doctor` (its figures over 30 days
// included) and `dibs usage` on a node whose ledger holds 100,000 ended
// leases: both must answer within 100 ms (issue 23).
func BenchmarkHistory(b *testing.B) {
	const ended = 100_000
	disk := busyLedger(b, "node01", ended, time.Now())
	n := agenttest.Start(b, agenttest.Options{Name: "node01", Sim: "2xL40S", Quiet: true, Store: disk, ProbeInterval: time.Second})
	ctx := context.Background()
	for _, bench := range []struct {
		name string
		call func() error
	}{
		{"doctor", func() error {
			r, err := n.Client.Doctor(ctx, api.DoctorRequest{})
			if err == nil && (r.Findings == nil || r.Findings.Leases < ended) {
				err = fmt.Errorf("doctor counted %v leases, want %d", r.Findings, ended)
			}
			return err
		}},
		{"usage", func() error {
			r, err := n.Client.Usage(ctx, "30d")
			if err == nil && len(r.Users) != 8 {
				err = fmt.Errorf("usage lists %d users, want 8", len(r.Users))
			}
			return err
		}},
	} {
		b.Run(bench.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if err := bench.call(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportPercentiles(b, lat)
		})
	}
}

// runLedger is busyLedger with each entry's figures (one GPU, a full
// series), as every run ended by this release keeps them.
func runLedger(tb testing.TB, node string, n int, now time.Time) *storetest.Store {
	tb.Helper()
	s := storetest.New(storetest.Options{})
	span := 30 * 24 * time.Hour
	series := make([]byte, runrecord.MaxSeries)
	for i := range series {
		series[i] = byte(i % 100)
	}
	mean, peak, idle := 42.5, 99, 12.5
	for i := 1; i <= n; i++ {
		end := now.Add(-span + span/time.Duration(n+1)*time.Duration(i))
		l := lease.Lease{ID: lease.LeaseID(node, uint64(i)), Node: node, GPUs: []int{i % 2}, User: fmt.Sprintf("user%d", i%8), UID: 2000 + i%8,
			Token: uint64(i), Kind: lease.KindBatch, StartedAt: end.Add(-20 * time.Minute), ExpiresAt: end.Add(time.Hour)}
		e := lease.Ended(l, end, string(lease.ExitReason(i%3)), "")
		e.Figures = &runrecord.Figures{Seconds: 1200, IdlePct: &idle, GPUs: []runrecord.GPUFigures{{GPU: i % 2, MeanSM: &mean, PeakSM: &peak, IdlePct: &idle,
			PeakMemMiB: 30000, MemTotalMiB: 46068, EnergyWh: 80, Series: series}}}
		if err := s.End(l.ID, e); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// BenchmarkRunHistory measures `dibs history` (issue 34) where a node
// holds 100,000 ended runs with their figures: asked of that node for the
// default window (≤ 100 ms p50), and asked at another node of a
// three-node cluster with a user filter, which travels to the node and is
// applied there (≤ 150 ms p50).
func BenchmarkRunHistory(b *testing.B) {
	const ended = 100_000
	now := time.Now()
	b.Run("one-node", func(b *testing.B) {
		n := agenttest.Start(b, agenttest.Options{Name: "node01", Sim: "2xL40S", Quiet: true, Store: runLedger(b, "node01", ended, now), ProbeInterval: time.Second})
		benchHistory(b, n, lease.HistoryFilter{}, 500)
	})
	b.Run("from-another-node-user-filter", func(b *testing.B) {
		nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true,
			Stores: []queue.Store{nil, runLedger(b, "node02", ended, now)}})
		benchHistory(b, nodes[0], lease.HistoryFilter{User: "user3"}, 500)
	})
}

func benchHistory(b *testing.B, n *agenttest.Node, f lease.HistoryFilter, want int) {
	ctx := context.Background()
	// The first question reads the window from the disk, as the first
	// usage or doctor after a start does.
	if _, err := n.Client.History(ctx, api.HistoryRequest{Filter: f}); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		r, err := n.Client.History(ctx, api.HistoryRequest{Filter: f})
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Rows) < want/2 || len(r.Missing) > 0 {
			b.Fatalf("%d rows (missing %v), want about %d", len(r.Rows), r.Missing, want)
		}
		lat = append(lat, time.Since(t0))
	}
	reportPercentiles(b, lat)
}
