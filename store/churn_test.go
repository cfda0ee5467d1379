package store

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Open's own walk is stricter than bbolt's check (a branch key must be its
// child's first key). Whatever bbolt writes must pass it: thousands of grants,
// changes and ends of every size, pages splitting and merging, records larger
// than a page, with a reopen (and so a full check) every few hundred.
func TestOpenAcceptsWhatItWrote(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	held := map[string]lease.Lease{}
	queued := map[string]bool{}
	var token uint64
	var s *Bolt
	reopen := func(step int) {
		if s != nil {
			s.Close()
		}
		var err error
		if s, err = Open(dir); err != nil {
			t.Fatalf("step %d: Open refused what bbolt wrote: %v", step, err)
		}
		if len(s.Warnings()) > 0 {
			t.Fatalf("step %d: warnings %q", step, s.Warnings())
		}
		NoSync(s)
	}
	t.Cleanup(func() { s.Close() })
	for step := range 4000 {
		if step%400 == 0 {
			reopen(step)
		}
		var err error
		switch op := rng.IntN(10); {
		case op < 4 || len(held) == 0:
			token++
			l := lease.Lease{ID: lease.LeaseID(fmt.Sprintf("gpu-%02d", rng.IntN(3)), token), GPUs: []int{rng.IntN(8)}, Token: token,
				Note: strings.Repeat("n", rng.IntN(300)), StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			held[l.ID] = l
			err = s.Put(l)
		case op < 6:
			for id, l := range held {
				l.Note = strings.Repeat("c", rng.IntN(600))
				held[id] = l
				err = s.Put(l)
				break
			}
		case op < 8:
			for id, l := range held {
				delete(held, id)
				err = s.End(id, lease.Ended(l, t0.Add(time.Hour), "released", ""))
				break
			}
		default:
			id := fmt.Sprintf("gpu-01-q%d", rng.IntN(40))
			if queued[id] && rng.IntN(2) == 0 {
				delete(queued, id)
				err = s.DeleteEntry(id)
				break
			}
			queued[id] = true
			// Now and then a command longer than a page.
			cmd := []string{"python", strings.Repeat("a", rng.IntN(3)*rng.IntN(3000))}
			err = s.PutEntry(queue.QueueEntry{ID: id, Nodes: 1, GPUsPerNode: 1, Job: &job.Job{Command: cmd}}, uint64(step))
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	reopen(4000)
	// The walk met what it is meant to meet.
	s.db.View(func(tx *bbolt.Tx) error {
		leases, queue, ledger := tx.Bucket(bucketLeases).Stats(), tx.Bucket(bucketQueue).Stats(), tx.Bucket(bucketLedger).Stats()
		t.Logf("leases: %d keys, %d branch pages, depth %d; queue: %d overflow pages; ledger: %d keys, depth %d",
			leases.KeyN, leases.BranchPageN, leases.Depth, queue.LeafOverflowN, ledger.KeyN, ledger.Depth)
		if leases.BranchPageN == 0 || queue.LeafOverflowN == 0 || ledger.Depth < 2 {
			t.Errorf("the churn made no branch pages or no overflow pages: the test walks too little")
		}
		return nil
	})
	ls, _, err := s.Load()
	if err != nil || len(ls) != len(held) {
		t.Fatalf("Load: %d leases, %v; want %d", len(ls), err, len(held))
	}
}
