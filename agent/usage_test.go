package agent_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/lease/store/storetest"
)

// countingStore counts reads of the whole ledger.
type countingStore struct {
	*storetest.Store
	ledgerReads atomic.Int64
}

func (s *countingStore) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	s.ledgerReads.Add(1)
	return s.Store.Ledger(since)
}

// TestClaimsAfterReleasesDoNotReadTheLedger: fair-share needs every user's
// decayed usage, which comes from the node's ledger; claims after releases
// used to read the whole ledger from the disk each time, so they slowed as
// it grew. Now the ledger is read once and ends are added in memory, and
// the usage is the same as a fresh read gives.
func TestClaimsAfterReleasesDoNotReadTheLedger(t *testing.T) {
	t.Parallel()
	disk := &countingStore{Store: storetest.New(storetest.Options{})}
	clk := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Store: disk, Clock: clk, Quiet: true})
	for range 30 {
		l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Minute) // each lease held ten minutes
		if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
			t.Fatal(err)
		}
	}
	if reads := disk.ledgerReads.Load(); reads > 3 {
		t.Errorf("30 claims after releases read the whole ledger %d times, want it read once or twice at start", reads)
	}
	// What `dibs usage` says is what a fresh read of the ledger gives.
	rep, err := n.Client.Usage(ctx(t), "1d")
	if err != nil {
		t.Fatal(err)
	}
	half := lease.SchedConfig{}.WithDefaults().HalfLife
	ledger, err := disk.Store.Ledger(time.Now().Add(-8 * half))
	if err != nil {
		t.Fatal(err)
	}
	want := lease.DecayedUsage(ledger, nil, clk.Now(), half)
	if len(want) == 0 || len(rep.Users) == 0 {
		t.Fatal("no usage: the test proved nothing")
	}
	t.Logf("usage %+v; a fresh read: %v", rep.Users, want)
	for _, u := range rep.Users {
		if d := u.Decayed*3600 - want[u.User]; d > 1 || d < -1 {
			t.Errorf("dibs usage says %s used %.1f decayed GPU-s, a fresh read of the ledger gives %.1f", u.User, u.Decayed*3600, want[u.User])
		}
	}
}
