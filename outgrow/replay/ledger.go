package replay

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// FromLedger rebuilds the requests a cluster served from its ledgers (every
// node's, over [start, end]) and the leases running at end, so `dibs
// replay` can play the team's own history under the other policies. The
// ledger says who held how many GPUs from when to when, how long queued
// work waited and each lease's time limit; it does not say when the GPUs
// were computing, so busyShare (the share of held GPU-hours the agents'
// samples saw busy; 1 when unknown) shortens every interactive lease's
// work, a batch run's work being its whole lease. Gang ranks (one ledger
// entry each) become one request. Approximations, all of them: the
// figures say what the same demand would have cost, not what it did.
func FromLedger(nodes []NodeSpec, ledger []lease.LedgerEntry, running []lease.Lease, start, end time.Time, busyShare float64) Trace {
	if busyShare <= 0 || busyShare > 1 {
		busyShare = 1
	}
	t := Trace{Name: "ledger", Nodes: nodes, Start: start, End: end}
	type part struct {
		e     lease.LedgerEntry
		ended bool
	}
	groups := map[string][]part{}
	var keys []string
	add := func(key string, p part) {
		if _, ok := groups[key]; !ok {
			keys = append(keys, key)
		}
		groups[key] = append(groups[key], p)
	}
	seen := map[string]bool{}
	for _, e := range ledger {
		if seen[e.LeaseID] || e.User == "" || len(e.GPUs) == 0 {
			continue
		}
		seen[e.LeaseID] = true
		add(groupKey(e), part{e: e, ended: true})
	}
	for _, l := range running {
		if seen[l.ID] || !l.ReservedUntil.IsZero() || l.User == "" || len(l.GPUs) == 0 {
			continue
		}
		e := lease.Ended(l, end, "running", "")
		add(groupKey(e), part{e: e})
	}
	slices.Sort(keys)
	for _, k := range keys {
		ps := groups[k]
		slices.SortFunc(ps, func(a, b part) int { return cmp.Compare(a.e.Rank, b.e.Rank) })
		e := ps[0].e
		at := e.Start
		if !e.QueuedAt.IsZero() && e.QueuedAt.Before(at) {
			at = e.QueuedAt
		}
		if at.Before(start) || at.After(end) {
			continue
		}
		held := max(e.End.Sub(e.Start), time.Minute)
		r := Request{
			ID: e.LeaseID, At: at, User: e.User, Nodes: len(ps), GPUs: len(e.GPUs), Kind: e.Kind,
			Limit: e.Limit, Work: held, Hold: held, Via: ViaClaim, From: e.Node,
		}
		if r.Kind == "" {
			r.Kind = lease.KindInteractive
		}
		if e.Entry != "" {
			r.ID = strings.ReplaceAll(e.Entry, "#", "-")
			r.Via = ViaQueue
			if o, ok := queue.OriginOfQueueID(strings.SplitN(e.Entry, "#", 2)[0]); ok && slices.ContainsFunc(nodes, func(n NodeSpec) bool { return n.Name == o }) {
				r.From = o
			}
		}
		if !slices.ContainsFunc(nodes, func(n NodeSpec) bool { return n.Name == r.From }) {
			r.From = ""
		}
		if r.Kind == lease.KindInteractive {
			r.Work = max(time.Duration(float64(held)*busyShare).Round(time.Second), time.Second)
		}
		if r.Limit > words.MaxDuration {
			r.Limit = words.MaxDuration
		}
		t.Requests = append(t.Requests, r)
	}
	return t
}

// groupKey puts the ranks of one gang attempt together and every other
// lease alone.
func groupKey(e lease.LedgerEntry) string {
	if e.Gang != "" && e.Entry != "" {
		return "gang/" + e.Entry
	}
	return "lease/" + e.LeaseID
}
