package doctor

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// DefaultWindow is how far back "have we outgrown dibs?" looks.
const DefaultWindow = 30 * 24 * time.Hour

// History is what the agents kept over the window: every node's ledger
// and samples, and the cluster now.
type History struct {
	Now    time.Time
	Window time.Duration
	// Nodes and GPUs are the cluster as it is now.
	Nodes int
	GPUs  int
	// Ledger is every node's ended leases since Now-Window; Running the
	// leases held now; Waiting the queue's entries that have not started.
	Ledger  []lease.LedgerEntry
	Running []lease.Lease
	Waiting []lease.QueueEntry
	// Buckets are each node's samples, by node.
	Buckets map[string][]Bucket
	// Missing names nodes whose history could not be read: the figures
	// leave them out.
	Missing []string
}

// WeekUsers is how many people held GPUs in one week.
type WeekUsers struct {
	Week  time.Time `json:"week"`
	Users int       `json:"users"`
}

// Findings are the figures "have we outgrown dibs?" rests on.
type Findings struct {
	Since  time.Time     `json:"since"`
	Window time.Duration `json:"window_ns"`
	Nodes  int           `json:"nodes"`
	GPUs   int           `json:"gpus"`
	// Users: distinct people over the window, per week (weeks start on
	// Monday, UTC; the first and last may be partial), and the most in
	// one week.
	Users        int         `json:"users"`
	UsersPerWeek []WeekUsers `json:"users_per_week"`
	UsersMaxWeek int         `json:"users_max_week"`
	// Leases and HeldGPUHours come from the ledger (and running leases);
	// TopUser and TopUserShare name who held most.
	Leases       int     `json:"leases"`
	HeldGPUHours float64 `json:"held_gpu_hours"`
	TopUser      string  `json:"top_user,omitempty"`
	TopUserShare float64 `json:"top_user_share"`
	// From the agents' samples (see Sampled for how much of the window
	// they cover): the share of GPU-time that was busy, held but idle, free.
	Sampled          time.Duration `json:"sampled_ns"`
	Coverage         float64       `json:"coverage"`
	BusyShare        float64       `json:"busy_share"`
	HeldIdleShare    float64       `json:"held_idle_share"`
	FreeShare        float64       `json:"free_share"`
	SquattedGPUHours float64       `json:"squatted_gpu_hours"`
	SquattedShare    float64       `json:"squatted_share"`
	// WaitingShare is the share of sampled time work waited in the queue;
	// WaitingIdleShare the share of time it waited while GPUs were held
	// but idle (a lower bound: the largest of the nodes' shares), and
	// WaitingIdleGPUHours those GPUs' hours (exact, summed over nodes).
	WaitingShare        float64 `json:"waiting_share"`
	WaitingIdleShare    float64 `json:"waiting_idle_share"`
	WaitingIdleGPUHours float64 `json:"waiting_idle_gpu_hours"`
	// Queue: runs that went through the queue and their wait from submit
	// to start (work waiting now counts with its wait so far).
	Queued  int           `json:"queued"`
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP95 time.Duration `json:"wait_p95_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	// Gangs: multi-node runs, their wait until every rank started, and
	// their share of the held GPU-hours.
	Gangs        int           `json:"gangs"`
	GangWaitP50  time.Duration `json:"gang_wait_p50_ns"`
	GangWaitMax  time.Duration `json:"gang_wait_max_ns"`
	GangGPUShare float64       `json:"gang_gpu_share"`
	// Preemptions by reason (quota, idle, gang); Overdue counts leases that
	// ended past their time limit.
	Preemptions map[string]int `json:"preemptions"`
	Overdue     int            `json:"overdue"`
	// Missing lists nodes left out.
	Missing []string `json:"missing,omitempty"`
}

// Analyze computes the findings over h's window.
func Analyze(h History) Findings {
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

	// Samples.
	var busy, idle, free, squat, waitIdleGPU int64
	perHour := map[time.Time]*struct{ secs, waiting, waitingIdle int64 }{}
	var longest int64
	for _, node := range slices.Sorted(maps.Keys(h.Buckets)) {
		var secs int64
		for _, b := range h.Buckets[node] {
			if !b.Hour.Add(time.Hour).After(since) {
				continue
			}
			secs += b.Seconds
			busy += b.BusySec
			idle += b.IdleSec
			free += b.FreeSec
			squat += b.SquattedSec
			waitIdleGPU += b.WaitingIdleGPUSec
			p := perHour[b.Hour]
			if p == nil {
				p = &struct{ secs, waiting, waitingIdle int64 }{}
				perHour[b.Hour] = p
			}
			p.secs = max(p.secs, b.Seconds)
			p.waiting = max(p.waiting, b.WaitingSec)
			p.waitingIdle = max(p.waitingIdle, b.WaitingIdleSec)
		}
		longest = max(longest, secs)
	}
	var hourSecs, waiting, waitingIdle int64
	for _, p := range perHour {
		hourSecs += p.secs
		waiting += p.waiting
		waitingIdle += p.waitingIdle
	}
	f.Sampled = time.Duration(longest) * time.Second
	f.Coverage = min(f.Sampled.Seconds()/h.Window.Seconds(), 1)
	if total := busy + idle + free; total > 0 {
		f.BusyShare = float64(busy) / float64(total)
		f.HeldIdleShare = float64(idle) / float64(total)
		f.FreeShare = float64(free) / float64(total)
		f.SquattedShare = float64(squat) / float64(total)
	}
	f.SquattedGPUHours = float64(squat) / 3600
	f.WaitingIdleGPUHours = float64(waitIdleGPU) / 3600
	if hourSecs > 0 {
		f.WaitingShare = float64(waiting) / float64(hourSecs)
		f.WaitingIdleShare = float64(waitingIdle) / float64(hourSecs)
	}
	return f
}

// weekNumber counts weeks (Monday to Sunday, UTC) from the one holding
// 1 January 1970, a Thursday: weekStart(weekNumber(t)) is the Monday of
// t's week, 00:00 UTC.
func weekNumber(t time.Time) int64 {
	day := t.Unix() / 86400
	if t.Unix() < 0 && t.Unix()%86400 != 0 {
		day--
	}
	w := day + 3
	if w < 0 {
		return (w - 6) / 7
	}
	return w / 7
}

// weekStart is the Monday that starts week number w.
func weekStart(w int64) time.Time { return time.Unix((w*7-3)*86400, 0).UTC() }

// percentile is the nearest-rank p-quantile; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, cmp.Compare[time.Duration])
	k := int(math.Ceil(float64(len(s))*p)) - 1
	return s[min(max(k, 0), len(s)-1)]
}
