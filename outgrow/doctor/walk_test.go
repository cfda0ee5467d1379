package doctor

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// analyzeWalk is Analyze as it was before running totals (issue 23): one
// walk over every ended lease of the window. The tests hold Analyze and
// Totals to its figures.
func analyzeWalk(h History) Findings {
	if h.Window <= 0 {
		h.Window = DefaultWindow
	}
	since := h.Now.Add(-h.Window)
	f := Findings{Since: since, Window: h.Window, Nodes: h.Nodes, GPUs: h.GPUs, Preemptions: map[string]int{}, Missing: h.Missing}

	// Leases: the ledger plus what runs now, each once.
	type held struct {
		user, entry, gang string
		gpus              int
		start, end        time.Time
		queued            time.Time
		limit             time.Duration
		// gpuSecs, for a compacted row (many leases folded into one),
		// is what it holds: it names no GPUs.
		gpuSecs float64
	}
	// Each lease once. A ledger in end order (as the agents send it) has
	// a lease's copies side by side, so no set of 100,000 ids is built; a
	// running lease is left out if the ledger has it.
	all := make([]held, 0, len(h.Ledger)+len(h.Running))
	inOrder := slices.IsSortedFunc(h.Ledger, func(a, b lease.LedgerEntry) int {
		if c := a.End.Compare(b.End); c != 0 {
			return c
		}
		return cmp.Compare(a.LeaseID, b.LeaseID)
	})
	seen := map[string]bool{}
	for _, l := range h.Running {
		seen[l.ID] = false
	}
	for i, e := range h.Ledger {
		if e.End.Before(since) {
			continue
		}
		if inOrder {
			if i > 0 && h.Ledger[i-1].LeaseID == e.LeaseID {
				continue
			}
			if _, ok := seen[e.LeaseID]; ok {
				seen[e.LeaseID] = true
			}
		} else {
			if seen[e.LeaseID] {
				continue
			}
			seen[e.LeaseID] = true
		}
		x := held{user: e.User, entry: e.Entry, gang: e.Gang, gpus: len(e.GPUs), start: e.Start, end: e.End, queued: e.QueuedAt, limit: e.Limit}
		if e.Reason == lease.ReasonCompacted {
			x.gpuSecs = e.GPUSeconds
		}
		all = append(all, x)
		if why, ok := strings.CutPrefix(e.Reason, "preempted-"); ok {
			f.Preemptions[why]++
		}
		if e.Limit > 0 && e.End.Sub(e.Start) > e.Limit+time.Minute {
			f.Overdue++
		}
	}
	for _, l := range h.Running {
		if seen[l.ID] || !l.ReservedUntil.IsZero() {
			continue
		}
		seen[l.ID] = true
		all = append(all, held{user: l.User, entry: l.Entry, gang: l.Gang, gpus: len(l.GPUs), start: l.StartedAt, end: h.Now, queued: l.QueuedAt})
	}
	f.Leases = len(all)

	// Who held GPUs in which week, by week number (cheaper keys than
	// times: this loop runs once per lease of the window).
	type weekUser struct {
		week int64
		user string
	}
	weekUsers := map[weekUser]struct{}{}
	perUser := map[string]float64{}
	var gangHours float64
	for _, x := range all {
		if x.user == "" {
			continue
		}
		start := x.start
		if start.Before(since) {
			start = since
		}
		hrs := float64(x.gpus) * max(x.end.Sub(start), 0).Hours()
		if x.gpuSecs > 0 {
			hrs = x.gpuSecs / 3600
			if span := x.end.Sub(x.start); span > 0 {
				hrs *= max(x.end.Sub(start), 0).Hours() / span.Hours()
			}
		}
		perUser[x.user] += hrs
		f.HeldGPUHours += hrs
		if x.gang != "" {
			gangHours += hrs
		}
		for w, last := weekNumber(start), weekNumber(x.end); w <= last; w++ {
			weekUsers[weekUser{w, x.user}] = struct{}{}
		}
	}
	f.Users = len(perUser)
	weeks := map[int64]int{}
	for k := range weekUsers {
		weeks[k.week]++
	}
	for _, w := range slices.Sorted(maps.Keys(weeks)) {
		f.UsersPerWeek = append(f.UsersPerWeek, WeekUsers{Week: weekStart(w), Users: weeks[w]})
		f.UsersMaxWeek = max(f.UsersMaxWeek, weeks[w])
	}
	for _, u := range slices.Sorted(maps.Keys(perUser)) {
		if perUser[u] > perUser[f.TopUser] || f.TopUser == "" {
			f.TopUser = u
		}
	}
	if f.HeldGPUHours > 0 {
		f.TopUserShare = perUser[f.TopUser] / f.HeldGPUHours
		f.GangGPUShare = gangHours / f.HeldGPUHours
	}

	// Queue waits: one per attempt (the ranks of a gang share one).
	type attempt struct {
		queued, started time.Time
		gang            bool
	}
	attempts := map[string]*attempt{}
	for _, x := range all {
		if x.entry == "" || x.queued.IsZero() {
			continue
		}
		a := attempts[x.entry]
		if a == nil {
			a = &attempt{queued: x.queued, started: x.start}
			attempts[x.entry] = a
		}
		if x.start.After(a.started) {
			a.started = x.start // a gang waits for its last rank
		}
		a.gang = a.gang || x.gang != ""
	}
	var waits, gangWaits []time.Duration
	for _, k := range slices.Sorted(maps.Keys(attempts)) {
		a := attempts[k]
		if a.started.Before(since) {
			continue
		}
		w := max(a.started.Sub(a.queued), 0)
		waits = append(waits, w)
		if a.gang {
			gangWaits = append(gangWaits, w)
		}
	}
	for _, e := range h.Waiting {
		if e.Running {
			continue
		}
		w := max(h.Now.Sub(e.SubmittedAt), 0)
		waits = append(waits, w)
		if e.Nodes > 1 {
			gangWaits = append(gangWaits, w)
		}
	}
	f.Queued, f.Gangs = len(waits), len(gangWaits)
	f.WaitP50, f.WaitP95, f.WaitMax = percentile(waits, 0.5), percentile(waits, 0.95), percentile(waits, 1)
	f.GangWaitP50, f.GangWaitMax = percentile(gangWaits, 0.5), percentile(gangWaits, 1)

	f.sampled(h, since)
	return f
}
