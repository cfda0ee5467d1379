package doctor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// randomHistory is a node's ledger of n ended leases over the 40 days
// before now, with everything a window can cut: leases of minutes to three
// days (across midnights and weeks), compacted rows, copies of a row side
// by side, preemptions, overdue leases, queued runs, gangs' ranks; and
// leases running now, some of which the ledger already has.
func randomHistory(r *rand.Rand, now time.Time, n int) History {
	users := []string{"alice", "bob", "carol", "dave", "erin", ""}
	reasons := []string{"released", "released", "expired", "preempted-quota", "preempted-idle", "preempted-gang", "session-ended"}
	var ledger []lease.LedgerEntry
	for i := 1; i <= n; i++ {
		end := now.Add(-time.Duration(r.Int64N(int64(40 * 24 * time.Hour))))
		if r.IntN(20) == 0 {
			end = end.Truncate(24 * time.Hour) // on a midnight
		}
		dur := time.Duration(r.Int64N(int64(3 * time.Hour)))
		if r.IntN(8) == 0 {
			dur = time.Duration(r.Int64N(int64(72 * time.Hour)))
		}
		e := lease.LedgerEntry{LeaseID: lease.LeaseID("n1", uint64(i)), Node: "n1", User: users[r.IntN(len(users))],
			GPUs: []int{0, 1, 2, 3}[:1+r.IntN(4)], Start: end.Add(-dur), End: end, Reason: reasons[r.IntN(len(reasons))],
			Limit: time.Duration(r.Int64N(int64(3 * time.Hour)))}
		e.GPUSeconds = float64(len(e.GPUs)) * dur.Seconds()
		switch k := r.IntN(10); {
		case k == 0:
			e.Reason, e.GPUs, e.GPUSeconds = lease.ReasonCompacted, nil, float64(r.IntN(40*3600))
		case k <= 2:
			e.Entry, e.QueuedAt = fmt.Sprintf("n1-q%d#1", i), e.Start.Add(-time.Duration(r.Int64N(int64(2*time.Hour))))
		case k == 3:
			// A gang's ranks: same attempt, same submit, their own starts.
			e.Entry, e.Gang, e.QueuedAt = fmt.Sprintf("n1-q%d#1", i), fmt.Sprintf("g%d", i), e.Start.Add(-time.Hour)
			for rank := 1; rank <= r.IntN(3); rank++ {
				x := e
				x.LeaseID = lease.LeaseID("n1", uint64(n+i*4+rank))
				x.Rank, x.Start = rank, e.Start.Add(time.Duration(r.Int64N(int64(10*time.Minute))))
				ledger = append(ledger, x)
			}
		}
		ledger = append(ledger, e)
		if r.IntN(50) == 0 {
			ledger = append(ledger, e) // a copy
		}
	}
	slices.SortFunc(ledger, lease.ByEnd)
	h := History{Now: now, Nodes: 1, GPUs: 4, Ledger: ledger}
	for i := range 6 {
		l := lease.Lease{ID: lease.LeaseID("n1", uint64(10*n+i)), Node: "n1", User: users[i%5], GPUs: []int{i % 4},
			StartedAt: now.Add(-time.Duration(r.Int64N(int64(50 * time.Hour))))}
		if i%3 == 0 {
			l.Entry, l.QueuedAt = fmt.Sprintf("n1-q%d#2", 10*n+i), l.StartedAt.Add(-time.Duration(r.Int64N(int64(time.Hour))))
		}
		if i == 5 && len(ledger) > 0 {
			l = lease.Lease{ID: ledger[len(ledger)-1].LeaseID, Node: "n1", User: "alice", GPUs: []int{1}, StartedAt: now.Add(-time.Hour)}
		}
		h.Running = append(h.Running, l)
	}
	h.Waiting = []queue.QueueEntry{{ID: "n1-q9999", SubmittedAt: now.Add(-90 * time.Minute), Nodes: 2}, {ID: "n1-q9998", SubmittedAt: now.Add(-time.Minute)}}
	return h
}

// sameFindings fails unless got and want agree: every count, time and
// name exactly, GPU-hours and shares to a billionth (they are summed in
// another order).
func sameFindings(t *testing.T, what string, got, want Findings) {
	t.Helper()
	for _, p := range []struct {
		name string
		g, w *float64
	}{
		{"held GPU-hours", &got.HeldGPUHours, &want.HeldGPUHours},
		{"top user's share", &got.TopUserShare, &want.TopUserShare},
		{"gangs' share", &got.GangGPUShare, &want.GangGPUShare},
	} {
		if math.Abs(*p.g-*p.w) > 1e-9*max(1, math.Abs(*p.w)) {
			t.Errorf("%s: %s %v, want %v", what, p.name, *p.g, *p.w)
		}
		*p.g = *p.w
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// Analyze from running totals gives the figures the walk over every ended
// lease gave, for any window, and so do the totals kept by day while the
// ledger changes under them (leases end, rows fold, old rows are cut).
func TestTotalsAgreeWithTheWalk(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 34, 56, 789, time.UTC)
	windows := []time.Duration{time.Minute, time.Hour, 12*time.Hour + 34*time.Minute + 56*time.Second + 789, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, Keep}
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 23))
		h := randomHistory(r, now, 400+int(seed)*300)
		totals := NewTotals()
		check := func(step string) {
			t.Helper()
			for _, w := range windows {
				h.Window = w
				want := analyzeWalk(h)
				sameFindings(t, fmt.Sprintf("seed %d, %s, window %s, Analyze", seed, step, w), Analyze(h), want)
				running := make([]string, 0, len(h.Running))
				for _, l := range h.Running {
					running = append(running, l.ID)
				}
				ht := h
				ht.Ledger, ht.Tallies = nil, []Tally{totals.Tally(h.Ledger, now.Add(-w), running)}
				sameFindings(t, fmt.Sprintf("seed %d, %s, window %s, Totals", seed, step, w), Analyze(ht), want)
			}
		}
		check("first count")
		// Leases end now: each goes in at the end of the ledger.
		for i := range 20 {
			e := lease.LedgerEntry{LeaseID: lease.LeaseID("n1", uint64(900000+i)), Node: "n1", User: "frank", GPUs: []int{i % 4},
				Start: now.Add(-time.Duration(i+1) * time.Hour), End: now.Add(-time.Duration(20-i) * time.Second), Reason: "released"}
			if i%4 == 0 {
				e.Entry, e.QueuedAt = fmt.Sprintf("n1-q%d#1", 900000+i), e.Start.Add(-time.Duration(i)*time.Minute)
			}
			j, _ := slices.BinarySearchFunc(h.Ledger, e, lease.ByEnd)
			h.Ledger = slices.Insert(h.Ledger, j, e)
			totals.Changed(e.End)
		}
		check("after leases ended")
		// A row folded into today's compacted row: it changes in place.
		last := slices.IndexFunc(h.Ledger, func(e lease.LedgerEntry) bool { return e.LeaseID == "n1-900000" })
		h.Ledger[last] = lease.FoldInto(lease.LedgerEntry{}, h.Ledger[last])
		h.Ledger[last].GPUSeconds += 7200
		totals.Changed(h.Ledger[last].End)
		check("after a fold")
		// The window's oldest rows cut away, without a word to the totals.
		h.Ledger = slices.Delete(h.Ledger, 0, len(h.Ledger)/3)
		check("after the oldest were cut")
		h.Ledger = slices.Delete(h.Ledger, 0, len(h.Ledger)/2)
		check("after more were cut")
	}
}

// The edges a window has, each held to the walk's figures.
func TestTotalsEdges(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) // a Wednesday midnight
	row := func(id int, user string, start, end time.Time) lease.LedgerEntry {
		return lease.LedgerEntry{LeaseID: lease.LeaseID("n1", uint64(id)), Node: "n1", User: user, GPUs: []int{0, 1}, Start: start, End: end, Reason: "released"}
	}
	monday := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		window time.Duration
		ledger []lease.LedgerEntry
	}{
		{"a lease ending on the window's start", 24 * time.Hour, []lease.LedgerEntry{row(1, "a", now.Add(-30*time.Hour), now.Add(-24*time.Hour))}},
		{"a lease ending just before it", 24 * time.Hour, []lease.LedgerEntry{row(1, "a", now.Add(-30*time.Hour), now.Add(-24*time.Hour-1))}},
		{"a lease starting before the window, ending days later", 36 * time.Hour, []lease.LedgerEntry{row(1, "a", now.Add(-80*time.Hour), now.Add(-time.Hour))}},
		{"a lease across a week's edge", 14 * 24 * time.Hour, []lease.LedgerEntry{row(1, "a", monday.Add(-2*time.Hour), monday.Add(2*time.Hour))}},
		{"a lease ending at midnight", 7 * 24 * time.Hour, []lease.LedgerEntry{row(1, "a", monday.Add(-2*time.Hour), monday), row(2, "b", monday, monday.Add(time.Hour))}},
		{"a compacted row cut by the window", 30 * time.Hour, []lease.LedgerEntry{{LeaseID: "n1-5", Node: "n1", User: "a", Start: now.Add(-40 * time.Hour), End: now.Add(-2 * time.Hour), GPUSeconds: 9 * 3600, Reason: lease.ReasonCompacted}}},
		{"copies of a lease side by side", 7 * 24 * time.Hour, []lease.LedgerEntry{row(1, "a", monday, monday.Add(time.Hour)), row(1, "a", monday, monday.Add(time.Hour)), row(2, "a", monday, monday.Add(time.Hour))}},
		{"a copy across a midnight", 7 * 24 * time.Hour, []lease.LedgerEntry{row(1, "a", monday.Add(-time.Hour), monday.Add(-time.Second)), row(1, "a", monday.Add(-time.Hour), monday)}},
		{"an empty ledger", 24 * time.Hour, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slices.SortFunc(tt.ledger, lease.ByEnd)
			h := History{Now: now, Window: tt.window, Ledger: tt.ledger}
			want := analyzeWalk(h)
			sameFindings(t, "Analyze", Analyze(h), want)
			ht := h
			ht.Ledger, ht.Tallies = nil, []Tally{NewTotals().Tally(tt.ledger, now.Add(-tt.window), nil)}
			sameFindings(t, "Totals", Analyze(ht), want)
		})
	}
}

// A tally is the sum of its parts: two nodes' tallies added give what the
// two ledgers together give.
func TestTallyAdd(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := randomHistory(rand.New(rand.NewPCG(1, 2)), now, 300)
	b := randomHistory(rand.New(rand.NewPCG(3, 4)), now, 300)
	for i := range b.Ledger {
		b.Ledger[i].LeaseID, b.Ledger[i].Node = "n2"+b.Ledger[i].LeaseID[2:], "n2"
		if b.Ledger[i].Entry != "" {
			b.Ledger[i].Entry = "n2" + b.Ledger[i].Entry[2:]
		}
	}
	both := a
	both.Window = 30 * 24 * time.Hour
	both.Ledger = slices.SortedFunc(slices.Values(slices.Concat(a.Ledger, b.Ledger)), lease.ByEnd)
	since := now.Add(-both.Window)
	ht := both
	var running []string
	for _, l := range both.Running {
		running = append(running, l.ID)
	}
	ht.Ledger, ht.Tallies = nil, []Tally{NewTotals().Tally(a.Ledger, since, running), TallyLedger(b.Ledger, since, running)}
	sameFindings(t, "two nodes", Analyze(ht), analyzeWalk(both))
}
