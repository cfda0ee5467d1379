package store

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// BenchmarkOpen measures a start: Open reads and checks the whole file. The
// store holds 50 leases and a ledger of 20,000 ended leases (years of a busy
// team).
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	err = s.update("seed", func(w *writer) error {
		for i := uint64(1); i <= 20000; i++ {
			l := lease.Lease{ID: lease.LeaseID("gpu-01", i), Node: "gpu-01", GPUs: []int{int(i % 8)}, User: "alice", UID: 1001, Token: i, Kind: lease.KindBatch, StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			rec, _ := body(ledgerToRecord(lease.Ended(l, t0.Add(time.Hour), "released", "")))
			if err := w.put(bucketLedger, u64(i), rec); err != nil {
				return err
			}
			if i <= 50 {
				rec, _ := body(leaseToRecord(l))
				if err := w.put(bucketLeases, []byte(l.ID), rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	for b.Loop() {
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
