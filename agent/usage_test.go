package agent_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
	"github.com/dibs-gpu/dibs/store/storetest"
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
	half := queue.SchedConfig{}.WithDefaults().HalfLife
	ledger, err := disk.Store.Ledger(time.Now().Add(-8 * half))
	if err != nil {
		t.Fatal(err)
	}
	want := queue.DecayedUsage(ledger, nil, clk.Now(), half)
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

// Issue 23: `dibs usage` and `dibs doctor` read the whole ledger from the
// disk on every call (1.5 s for usage at 100,000 ended leases). They now
// answer from the window kept in memory: the disk is read once, and the
// answers match a fresh read.
func TestUsageAndDoctorDoNotRereadTheLedger(t *testing.T) {
	t.Parallel()
	now := time.Now()
	disk := &countingStore{Store: busyLedger(t, "node01", 2000, now)}
	n := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "2xL40S", Store: disk, Quiet: true})
	var rep api.UsageReport
	for range 5 {
		var err error
		if rep, err = n.Client.Usage(ctx(t), "10d"); err != nil {
			t.Fatal(err)
		}
		d, err := n.Client.Doctor(ctx(t), api.DoctorRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Findings == nil || d.Findings.Leases != 2000 {
			t.Fatalf("doctor counted %+v leases, want 2000", d.Findings)
		}
	}
	if reads := disk.ledgerReads.Load(); reads > 2 {
		t.Errorf("five usage and five doctor calls read the whole ledger %d times, want once (twice at most)", reads)
	}
	ledger, _ := disk.Store.Ledger(now.Add(-10 * 24 * time.Hour))
	want := queue.WindowUsage(ledger, nil, rep.Since, time.Now())
	for _, u := range rep.Users {
		if d := u.GPUHours*3600 - want[u.User]; d > 1 || d < -1 {
			t.Errorf("dibs usage says %s used %.1f GPU-s in 10 days, a fresh read of the ledger gives %.1f", u.User, u.GPUHours*3600, want[u.User])
		}
	}
	if len(rep.Users) != 8 {
		t.Errorf("usage lists %d users, want 8", len(rep.Users))
	}
}

// Weak 3 of the third round: a claim/release loop added a ledger row per
// lease, for ever. Past LedgerPerUserDay a person's plain leases of the day
// fold into one row as they end: the rows stop growing, and usage still
// counts every GPU-second, across a restart.
func TestLedgerRowsPerUserDayAreCapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	opts := agenttest.Options{Name: "node01", Sim: "2xL40S", Quiet: true, Clock: clk, DataDir: dir, LedgerPerUserDay: 10}
	n := agenttest.Start(t, opts)
	for range 40 {
		l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := n.Client.Usage(ctx(t), "1d")
	if err != nil || len(before.Users) != 1 {
		t.Fatalf("usage before the restart: %+v, %v", before, err)
	}
	if got, want := before.Users[0].GPUHours, 40.0/60; got < want-0.01 || got > want+0.01 {
		t.Errorf("usage says %.3f GPU-hours for 40 one-minute leases, want %.3f", got, want)
	}
	// The window in memory follows the disk (a loop must not grow the
	// agent's memory either): doctor sees the ten leases and the one row.
	d, err := n.Client.Doctor(ctx(t), api.DoctorRequest{})
	if err != nil || d.Findings == nil || d.Findings.Leases != 11 {
		t.Errorf("doctor before the restart: %+v (%v), want 11 leases (ten, and one row for thirty)", d.Findings, err)
	} else if h := d.Findings.HeldGPUHours; h < 40.0/60-0.01 || h > 40.0/60+0.01 {
		t.Errorf("doctor counts %.3f GPU-hours, want %.3f", h, 40.0/60)
	}
	n.Agent.Stop()
	// The file holds the first ten leases and one row for the thirty after.
	s, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Ledger(time.Time{})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 11 {
		t.Errorf("the ledger holds %d rows for 40 leases under a cap of 10 a day, want 11", len(rows))
	}
	var secs float64
	for _, r := range rows {
		secs += r.GPUSeconds
	}
	if secs < 40*60-1 || secs > 40*60+1 {
		t.Errorf("the ledger's rows hold %.0f GPU-seconds, want 2400", secs)
	}
	n2 := agenttest.Start(t, opts)
	after, err := n2.Client.Usage(ctx(t), "1d")
	if err != nil || len(after.Users) != 1 || after.Users[0].GPUHours < before.Users[0].GPUHours-0.01 {
		t.Errorf("usage after a restart: %+v (%v), want the same %.3f GPU-hours", after.Users, err, before.Users[0].GPUHours)
	}
}
