package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
)

// Weak 3 of the third round: the ledger was never pruned, so a
// claim/release loop grew it for ever. Entries older than the keep are
// folded into a row per person and day: the file keeps its checks (it
// reopens), the rows are few, and usage over whole days and fair-share come
// out the same as from every entry.
func TestCompactLedgerKeepsUsage(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	store.NoSync(s)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const days, perDay = 120, 6
	for i := range days * perDay {
		day := now.Add(-time.Duration(days-i/perDay) * 24 * time.Hour).Truncate(24 * time.Hour)
		start := day.Add(time.Duration(i%perDay) * 3 * time.Hour)
		l := mkLease(uint64(i+1), i%4)
		l.User = []string{"alice", "bob"}[i%2]
		l.StartedAt, l.ExpiresAt = start, start.Add(4*time.Hour)
		if err := s.End(l.ID, lease.Ended(l, start.Add(time.Duration(1+i%3)*time.Hour), "released", "")); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.Ledger(time.Time{})
	keep := 90 * 24 * time.Hour
	cut := now.Add(-keep)
	folded, err := s.CompactLedger(cut, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir) // Open checks every record and the ledger's sum
	after, err := s.Ledger(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	old := 0
	for _, e := range before {
		if e.End.Before(cut) {
			old++
		}
	}
	t.Logf("%d entries, %d older than %s: %d folded, %d rows left", len(before), old, words.FormatDuration(keep), folded, len(after))
	if folded != old {
		t.Errorf("folded %d entries, want every one of the %d older than the keep", folded, old)
	}
	// Two people, one row each per old day, and every recent entry as it was.
	oldDays := 0
	for d := now.Add(-days * 24 * time.Hour).Truncate(24 * time.Hour); d.Before(cut); d = d.Add(24 * time.Hour) {
		oldDays++
	}
	if want := len(before) - old + 2*oldDays; len(after) > want {
		t.Errorf("%d rows after compacting, want at most %d", len(after), want)
	}
	for _, w := range []time.Duration{7 * 24 * time.Hour, 30 * 24 * time.Hour, 100 * 24 * time.Hour, 200 * 24 * time.Hour} {
		from := now.Add(-w).Truncate(24 * time.Hour)
		got, want := queue.WindowUsage(after, nil, from, now), queue.WindowUsage(before, nil, from, now)
		for _, u := range []string{"alice", "bob"} {
			if math.Abs(got[u]-want[u]) > 1 {
				t.Errorf("usage of %s since %s: %.0f GPU-s after compacting, %.0f before", u, from.Format(time.DateOnly), got[u], want[u])
			}
		}
	}
	half := 7 * 24 * time.Hour
	got, want := queue.DecayedUsage(after, nil, now, half), queue.DecayedUsage(before, nil, now, half)
	for _, u := range []string{"alice", "bob"} {
		if math.Abs(got[u]-want[u]) > want[u]*1e-3 {
			t.Errorf("decayed usage of %s: %.1f after compacting, %.1f before", u, got[u], want[u])
		}
	}
	// A second pass finds nothing more to fold; the next lease still ends.
	if n, err := s.CompactLedger(cut, 1_000_000); err != nil || n != 0 {
		t.Errorf("a second pass folded %d (%v), want 0", n, err)
	}
	l := mkLease(99999, 0)
	if err := s.End(l.ID, lease.Ended(l, now, "released", "")); err != nil {
		t.Fatalf("end a lease after compacting: %v", err)
	}
	if rows, _ := s.Ledger(now); len(rows) != 1 {
		t.Errorf("the lease ended after compacting: %d rows since now, want 1", len(rows))
	}
	for _, e := range after {
		if err := e.Validate(); err != nil {
			t.Errorf("row %s: %v", e.LeaseID, err)
		}
	}
}

// A bounded pass folds whole days, at most max entries, and the next pass
// goes on where it stopped.
func TestCompactLedgerInBatches(t *testing.T) {
	s := open(t, t.TempDir())
	store.NoSync(s)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 300 {
		l := mkLease(uint64(i+1), 0)
		l.StartedAt = now.Add(-200*24*time.Hour + time.Duration(i)*6*time.Hour)
		if err := s.End(l.ID, lease.Ended(l, l.StartedAt.Add(time.Hour), "released", "")); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for pass := 0; ; pass++ {
		n, err := s.CompactLedger(now.Add(-90*24*time.Hour), 40)
		if err != nil {
			t.Fatal(err)
		}
		if n > 40 {
			t.Fatalf("pass %d folded %d entries, over its 40", pass, n)
		}
		if n == 0 {
			break
		}
		total += n
	}
	rows, _ := s.Ledger(time.Time{})
	if total < 200 || len(rows) > 300-total+total/4+1 {
		t.Errorf("folded %d in batches, %d rows left", total, len(rows))
	}
}
