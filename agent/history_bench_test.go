package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
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
