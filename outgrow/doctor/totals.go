package doctor

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// Tally is what doctor's figures need of a ledger's part since a time:
// counts and sums, not the leases. Tallies of parts of a ledger (of its
// days, of its nodes) add up (Add) to the tally of the whole, so a doctor
// call reads running totals instead of every ended lease of its window
// (issue 23: it walked 100,000 of them per call).
//
// Waits are kept one by one (a run's wait, not the run): the percentiles
// the verdict judges stay exact. A gang's ranks are kept one by one too
// (GangRanks), because its wait is until its last rank started, which may
// be on another node.
type Tally struct {
	// Leases counts ended leases, each once.
	Leases int `json:"leases"`
	// Preemptions counts leases preempted, by reason; Overdue those that
	// ended past their time limit.
	Preemptions map[string]int `json:"preemptions,omitempty"`
	Overdue     int            `json:"overdue"`
	// UserHours are GPU-hours held per person, cut at the window's start;
	// GangHours the part of them held by gangs' ranks.
	UserHours map[string]float64 `json:"user_hours,omitempty"`
	GangHours float64            `json:"gang_hours"`
	// WeekUsers are who held GPUs in which week (by weekNumber).
	WeekUsers map[int64][]string `json:"week_users,omitempty"`
	// Waits are the waits of queued runs that are not gangs and started
	// in the window.
	Waits []time.Duration `json:"waits_ns,omitempty"`
	// GangRanks are the gang ranks that went through the queue.
	GangRanks []GangRank `json:"gang_ranks,omitempty"`
	// Ended are the running leases asked about that the ledger has: the
	// figures count them from the ledger, not as running.
	Ended []string `json:"ended,omitempty"`
}

// GangRank is one rank of a gang that went through the queue: its
// attempt, when it was submitted and when this rank started.
type GangRank struct {
	Entry  string    `json:"entry"`
	Queued time.Time `json:"queued"`
	Start  time.Time `json:"start"`
}

// Page is page p of t where a page holds at most waits waits and ranks
// gang ranks: the counts on page 0, and each page's share of the waits and
// gang ranks. more says another page follows; Add of every page gives t
// back.
func (t Tally) Page(p, waits, ranks int) (page Tally, more bool) {
	part := func(n, per int) (from, to int) {
		from = min(p*per, n)
		return from, min(from+per, n)
	}
	wf, wt := part(len(t.Waits), waits)
	rf, rt := part(len(t.GangRanks), ranks)
	page = Tally{Waits: t.Waits[wf:wt], GangRanks: t.GangRanks[rf:rt]}
	if p == 0 {
		page.Leases, page.Preemptions, page.Overdue = t.Leases, t.Preemptions, t.Overdue
		page.UserHours, page.GangHours, page.WeekUsers, page.Ended = t.UserHours, t.GangHours, t.WeekUsers, t.Ended
	}
	return page, wt < len(t.Waits) || rt < len(t.GangRanks)
}

// Add adds o's counts to t.
func (t *Tally) Add(o Tally) {
	t.Leases += o.Leases
	t.Overdue += o.Overdue
	t.GangHours += o.GangHours
	for k, v := range o.Preemptions {
		if t.Preemptions == nil {
			t.Preemptions = map[string]int{}
		}
		t.Preemptions[k] += v
	}
	for k, v := range o.UserHours {
		if t.UserHours == nil {
			t.UserHours = map[string]float64{}
		}
		t.UserHours[k] += v
	}
	for w, users := range o.WeekUsers {
		for _, u := range users {
			t.addWeekUser(w, u)
		}
	}
	t.Waits = append(t.Waits, o.Waits...)
	t.GangRanks = append(t.GangRanks, o.GangRanks...)
	for _, id := range o.Ended {
		if !slices.Contains(t.Ended, id) {
			t.Ended = append(t.Ended, id)
		}
	}
}

// heldHours is the GPU-hours gpus GPUs held from start to end count in a
// window that starts at since, and the start cut at since.
func heldHours(gpus int, start, end, since time.Time) (from time.Time, hrs float64) {
	from = start
	if from.Before(since) {
		from = since
	}
	return from, float64(gpus) * max(end.Sub(from), 0).Hours()
}

func (t *Tally) addWeekUser(w int64, u string) {
	if t.WeekUsers == nil {
		t.WeekUsers = map[int64][]string{}
	}
	if !slices.Contains(t.WeekUsers[w], u) {
		t.WeekUsers[w] = append(t.WeekUsers[w], u)
	}
}

// addRow counts one ended lease of the window starting at since, as
// Analyze always has: GPU-hours and weeks cut at since, a compacted row's
// GPU-seconds in proportion.
func (t *Tally) addRow(e *lease.LedgerEntry, since time.Time) {
	t.Leases++
	if why, ok := strings.CutPrefix(e.Reason, "preempted-"); ok {
		if t.Preemptions == nil {
			t.Preemptions = map[string]int{}
		}
		t.Preemptions[why]++
	}
	if e.Limit > 0 && e.End.Sub(e.Start) > e.Limit+time.Minute {
		t.Overdue++
	}
	if e.User != "" {
		start, hrs := heldHours(len(e.GPUs), e.Start, e.End, since)
		if e.Reason == lease.ReasonCompacted && e.GPUSeconds > 0 {
			hrs = e.GPUSeconds / 3600
			if span := e.End.Sub(e.Start); span > 0 {
				hrs *= max(e.End.Sub(start), 0).Hours() / span.Hours()
			}
		}
		if t.UserHours == nil {
			t.UserHours = map[string]float64{}
		}
		t.UserHours[e.User] += hrs
		if e.Gang != "" {
			t.GangHours += hrs
		}
		for w, last := weekNumber(start), weekNumber(e.End); w <= last; w++ {
			t.addWeekUser(w, e.User)
		}
	}
	if e.Entry == "" || e.QueuedAt.IsZero() {
		return
	}
	if e.Gang != "" {
		t.GangRanks = append(t.GangRanks, GangRank{Entry: e.Entry, Queued: e.QueuedAt, Start: e.Start})
		return
	}
	if !e.Start.Before(since) {
		t.Waits = append(t.Waits, max(e.Start.Sub(e.QueuedAt), 0))
	}
}

// TallyLedger tallies the entries of ledger (in end order, then lease id,
// as the agents keep it) that ended at or after since. A lease's copies
// side by side count once. Running names leases held now: those the ledger
// has are listed in Ended.
func TallyLedger(ledger []lease.LedgerEntry, since time.Time, running []string) Tally {
	var t Tally
	i, _ := slices.BinarySearchFunc(ledger, since, func(e lease.LedgerEntry, t time.Time) int { return e.End.Compare(t) })
	t.walk(ledger, i, len(ledger), since, running)
	return t
}

// walk tallies ledger[from:to]: a row whose predecessor in the window has
// the same lease id is a copy and counts once.
func (t *Tally) walk(ledger []lease.LedgerEntry, from, to int, since time.Time, running []string) {
	for i := from; i < to; i++ {
		e := &ledger[i]
		if e.End.Before(since) {
			continue
		}
		if i > 0 && ledger[i-1].LeaseID == e.LeaseID && !ledger[i-1].End.Before(since) {
			continue
		}
		t.addRow(e, since)
		if len(running) > 0 && slices.Contains(running, e.LeaseID) && !slices.Contains(t.Ended, e.LeaseID) {
			t.Ended = append(t.Ended, e.LeaseID)
		}
	}
}

// Totals keeps a node's ledger counted by UTC day of end, so a doctor
// call adds up a day's totals instead of walking its leases: only the day
// the window starts in, and the few leases that began on an earlier day
// than they ended (cut at the window's start) or belong to a gang, are
// read one by one. A day is recounted when a lease ending in it is added
// or folded (Changed), on the next call; the first call counts every day
// once (agent/node.Usage makes that call when it reads the ledger from
// the disk). Totals holds no ledger: the caller passes its own, in end order,
// to Tally, and serialises calls (agent/node.Usage keeps it under its
// lock).
type Totals struct {
	days map[int64]*dayTotals
}

// dayTotals is one UTC day's ended leases: the tally of those that began
// that day (not gangs'), and the rest, one by one.
type dayTotals struct {
	tally Tally
	// ids are the lease ids of the day's rows, sorted (is a running lease
	// in the ledger?).
	ids []string
	// loose are the rows counted one by one: the day's first row (a copy
	// of the lease before it would be judged by the window), rows that
	// began on an earlier day and gangs' ranks, by offset from the day's
	// first row.
	loose []int
	// rows is how many rows the day had when counted.
	rows  int
	dirty bool
}

// NewTotals is an empty count: every day is counted at the first Tally.
func NewTotals() *Totals { return &Totals{days: map[int64]*dayTotals{}} }

// dayNumber is the UTC day of t, counted from 1 January 1970.
func dayNumber(t time.Time) int64 {
	s := t.Unix()
	if s < 0 {
		return (s - 86399) / 86400
	}
	return s / 86400
}

func dayStart(d int64) time.Time { return time.Unix(d*86400, 0).UTC() }

// Changed says the rows of the day holding end changed (a lease ended, a
// row was folded).
func (c *Totals) Changed(end time.Time) {
	if d := c.days[dayNumber(end)]; d != nil {
		d.dirty = true
	}
}

// Tally is TallyLedger(ledger, since, running), from the days' totals:
// ledger must be the ledger this count follows, in end order, holding
// every row that ended at or after since.
func (c *Totals) Tally(ledger []lease.LedgerEntry, since time.Time, running []string) Tally {
	var t Tally
	first := dayNumber(since)
	next := endIndex(ledger, dayStart(first+1))
	// The window's first day, one by one: it is cut at since.
	t.walk(ledger, endIndex(ledger, since), next, since, running)
	// A day's rows are found by their ends each time (cutting the
	// window's old rows moves every index): a day whose rows changed
	// without a word (another count of them) is counted again.
	for next < len(ledger) {
		dn := dayNumber(ledger[next].End)
		end := endIndex(ledger, dayStart(dn+1))
		d := c.days[dn]
		if d == nil || d.dirty || d.rows != end-next {
			d = countDay(ledger, next, end, dn)
			c.days[dn] = d
		}
		t.Add(d.tally)
		for _, off := range d.loose {
			t.walk(ledger, next+off, next+off+1, since, running)
		}
		for _, id := range running {
			if _, ok := slices.BinarySearch(d.ids, id); ok && !slices.Contains(t.Ended, id) {
				t.Ended = append(t.Ended, id)
			}
		}
		next = end
	}
	// Days the ledger no longer holds are forgotten.
	if len(ledger) == 0 {
		clear(c.days)
	}
	for dn := range c.days {
		if dn < dayNumber(ledger[0].End) {
			delete(c.days, dn)
		}
	}
	return t
}

// endIndex is where in ledger the rows that ended at or after t begin.
func endIndex(ledger []lease.LedgerEntry, t time.Time) int {
	i, _ := slices.BinarySearchFunc(ledger, t, func(e lease.LedgerEntry, t time.Time) int { return e.End.Compare(t) })
	return i
}

// countDay counts day dn's rows, ledger[from:to].
func countDay(ledger []lease.LedgerEntry, from, to int, dn int64) *dayTotals {
	d := &dayTotals{rows: to - from, ids: make([]string, 0, to-from)}
	start := dayStart(dn)
	for i := from; i < to; i++ {
		e := &ledger[i]
		d.ids = append(d.ids, e.LeaseID)
		if i == from || e.Start.Before(start) || e.Gang != "" {
			d.loose = append(d.loose, i-from)
			continue
		}
		if ledger[i-1].LeaseID == e.LeaseID {
			continue // a copy of the row before
		}
		// It began this day, after any window that starts before the
		// day: nothing of it is cut.
		d.tally.addRow(e, start)
	}
	slices.Sort(d.ids)
	return d
}

// figures turns the ledger's tally, the running leases it does not hold
// and the waiting entries into the findings' lease and queue figures.
func (f *Findings) figures(t Tally, h History, since time.Time) {
	perUser := maps.Clone(t.UserHours)
	if perUser == nil {
		perUser = map[string]float64{}
	}
	gangHours := t.GangHours
	f.Leases = t.Leases
	for k, v := range t.Preemptions {
		f.Preemptions[k] += v
	}
	f.Overdue = t.Overdue
	weekUsers := map[int64]map[string]bool{}
	for w, users := range t.WeekUsers {
		weekUsers[w] = map[string]bool{}
		for _, u := range users {
			weekUsers[w][u] = true
		}
	}
	// Queue waits: one per attempt (the ranks of a gang share one).
	type attempt struct {
		queued, started time.Time
		gang            bool
	}
	attempts := map[string]*attempt{}
	join := func(entry string, queued, start time.Time, gang bool) {
		a := attempts[entry]
		if a == nil {
			a = &attempt{queued: queued, started: start}
			attempts[entry] = a
		}
		if start.After(a.started) {
			a.started = start // a gang waits for its last rank
		}
		a.gang = a.gang || gang
	}
	for _, r := range t.GangRanks {
		join(r.Entry, r.Queued, r.Start, true)
	}
	// What runs now, unless the ledger has it.
	seen := map[string]bool{}
	for _, l := range h.Running {
		if seen[l.ID] || !l.ReservedUntil.IsZero() || slices.Contains(t.Ended, l.ID) {
			continue
		}
		seen[l.ID] = true
		f.Leases++
		if l.User != "" {
			start, hrs := heldHours(len(l.GPUs), l.StartedAt, h.Now, since)
			perUser[l.User] += hrs
			if l.Gang != "" {
				gangHours += hrs
			}
			for w, last := weekNumber(start), weekNumber(h.Now); w <= last; w++ {
				if weekUsers[w] == nil {
					weekUsers[w] = map[string]bool{}
				}
				weekUsers[w][l.User] = true
			}
		}
		if l.Entry != "" && !l.QueuedAt.IsZero() {
			join(l.Entry, l.QueuedAt, l.StartedAt, l.Gang != "")
		}
	}
	f.HeldGPUHours = 0
	for _, u := range slices.Sorted(maps.Keys(perUser)) {
		f.HeldGPUHours += perUser[u]
	}
	f.Users = len(perUser)
	for _, w := range slices.Sorted(maps.Keys(weekUsers)) {
		n := len(weekUsers[w])
		f.UsersPerWeek = append(f.UsersPerWeek, WeekUsers{Week: weekStart(w), Users: n})
		f.UsersMaxWeek = max(f.UsersMaxWeek, n)
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

	waits := slices.Clone(t.Waits)
	var gangWaits []time.Duration
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
	slices.SortFunc(waits, cmp.Compare[time.Duration])
	slices.SortFunc(gangWaits, cmp.Compare[time.Duration])
	f.Queued, f.Gangs = len(waits), len(gangWaits)
	f.WaitP50, f.WaitP95, f.WaitMax = percentile(waits, 0.5), percentile(waits, 0.95), percentile(waits, 1)
	f.GangWaitP50, f.GangWaitMax = percentile(gangWaits, 0.5), percentile(gangWaits, 1)
}

// Bounds on a tally from another agent (its waits and gang ranks cross in
// pages, bounded by agent/peer). A node whose tally names more sends its
// ledger as before.
const (
	// MaxTallyNames bounds the people, reasons and running leases named.
	MaxTallyNames = 1024
	// MaxTallyWeeks bounds the weeks named (Keep is 13 weeks).
	MaxTallyWeeks = 64
)

// Validate bounds a tally from another agent: names, weeks, numbers.
func (t *Tally) Validate() error {
	if t.Leases < 0 || t.Overdue < 0 || !finite(t.GangHours) {
		return fmt.Errorf("a tally has a negative count")
	}
	if len(t.Preemptions) > MaxTallyNames || len(t.UserHours) > MaxTallyNames || len(t.Ended) > MaxTallyNames || len(t.WeekUsers) > MaxTallyWeeks {
		return fmt.Errorf("a tally names too much")
	}
	for why, n := range t.Preemptions {
		if n < 0 || len(why) > words.MaxNameLen || words.CheckText("reason", why) != nil {
			return fmt.Errorf("a tally has a bad preemption reason")
		}
	}
	for u, h := range t.UserHours {
		if !words.ValidUserName(u) || !finite(h) {
			return fmt.Errorf("a tally has a bad user or GPU-hours")
		}
	}
	names := 0
	for w, users := range t.WeekUsers {
		names += len(users)
		if names > MaxTallyNames || !words.ValidSince(weekStart(w)) {
			return fmt.Errorf("a tally has a bad week")
		}
		for _, u := range users {
			if !words.ValidUserName(u) {
				return fmt.Errorf("a tally has a bad user")
			}
		}
	}
	for _, w := range t.Waits {
		if w < 0 || w > 100*365*24*time.Hour {
			return fmt.Errorf("a tally has a wait out of range")
		}
	}
	for _, r := range t.GangRanks {
		if len(r.Entry) > 2*words.MaxNameLen || words.CheckText("entry", r.Entry) != nil || r.Entry == "" || !words.ValidSince(r.Queued) || !words.ValidSince(r.Start) {
			return fmt.Errorf("a tally has a bad gang rank")
		}
	}
	for _, id := range t.Ended {
		if _, ok := lease.NodeOfID(id); !ok || len(id) > 2*words.MaxNameLen {
			return fmt.Errorf("a tally names a bad lease")
		}
	}
	return nil
}

// finite is a non-negative, finite number of hours.
func finite(h float64) bool { return h >= 0 && !math.IsInf(h, 0) && !math.IsNaN(h) }
