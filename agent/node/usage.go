package node

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// usageRefresh is how often the ledger's decayed usage is recomputed at
// most, unless a lease ended since.
const usageRefresh = 5 * time.Second

// Usage is this node's GPU-seconds per user, from its ledger and its
// running leases, and the window of the ledger that `dibs usage`, `dibs
// doctor` and fair-share read. The ledger is read from the disk once, at
// the first question; leases that end later are added to the copy in
// memory, kept in end order, and what falls out of the window is dropped.
// So no question rereads history: a claim after a release, `dibs usage`
// and a page of `dibs doctor`'s history cost a binary search and a pass
// over the part asked for (they read the whole ledger from the disk each
// time before, and slowed as it grew: 1.5 s for usage at 100,000 ended
// leases).
type Usage struct {
	// store, clock and log are the node's; leases reads the node's
	// running leases (its published state, never under wmu).
	store  lease.Store
	clock  clock.Clock
	log    *slog.Logger
	leases func() []lease.Lease

	mu     sync.Mutex
	at     time.Time
	ledger queue.Usage
	cur    atomic.Pointer[queue.Usage]
	dirty  atomic.Bool
	// entries is the ledger that ended at or after loadedFrom, ordered by
	// end and lease id (nil until first read).
	entries    []lease.LedgerEntry
	loadedFrom time.Time
	// totals count entries by day for `dibs doctor`, made with the window
	// from the disk, so doctor reads totals, not the window's every lease.
	totals *doctor.Totals
}

// historyWindow is how much of the ledger stays in memory: enough for
// fair-share (eight half-lives, where a lease's weight is under 0.4 %),
// and for doctor's longest window.
func historyWindow(halfLife time.Duration) time.Duration {
	return max(8*halfLife, doctor.Keep)
}

// ended adds a lease the store has just ended to the copy of the ledger.
func (u *Usage) ended(e lease.LedgerEntry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entries != nil {
		i, _ := slices.BinarySearchFunc(u.entries, e, lease.ByEnd)
		u.entries = slices.Insert(u.entries, i, e)
	}
	if u.totals != nil {
		u.totals.Changed(e.End)
	}
	u.dirty.Store(true)
}

// window makes sure the entries since from are in memory: read from the
// disk the first time (or when asked for older ones than it holds), and
// cut at the window's start. Call with mu held.
func (u *Usage) window(from time.Time) error {
	if u.entries != nil && !from.Before(u.loadedFrom) {
		return nil
	}
	ledger, err := u.store.Ledger(from)
	if err != nil {
		return err
	}
	slices.SortFunc(ledger, lease.ByEnd)
	u.entries, u.loadedFrom = slices.Grow(ledger, 64), from
	// Count doctor's totals now, once, with the read from the disk (which
	// costs far more), so no doctor call pays for it.
	u.totals = doctor.NewTotals()
	u.totals.Tally(u.entries, from, nil)
	return nil
}

// since is the part of the window that ended at or after t (shared with
// the window: callers must not change it). Call with mu held.
func (u *Usage) since(t time.Time) []lease.LedgerEntry {
	i, _ := slices.BinarySearchFunc(u.entries, t, func(e lease.LedgerEntry, t time.Time) int { return e.End.Compare(t) })
	return u.entries[i:]
}

// DecayedUsage is this node's GPU-seconds per user, decayed with halfLife:
// the ledger's part is recomputed at most every few seconds or when a lease
// ended; the running leases' part is always current.
func (u *Usage) DecayedUsage(halfLife time.Duration) queue.Usage {
	now := u.clock.Now()
	sum := queue.Usage{}
	for k, v := range u.ledgerUsage(now, halfLife) {
		sum[k] += v
	}
	for k, v := range queue.DecayedUsage(nil, u.leases(), now, halfLife) {
		sum[k] += v
	}
	u.cur.Store(&sum)
	return sum
}

func (u *Usage) ledgerUsage(now time.Time, halfLife time.Duration) queue.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ledger != nil && now.Sub(u.at) < usageRefresh && now.Sub(u.at) >= 0 && !u.dirty.Load() {
		return u.ledger
	}
	u.dirty.Store(false)
	keep := now.Add(-historyWindow(halfLife))
	if err := u.window(keep); err != nil {
		u.log.Warn("usage: read the ledger", "err", err)
		return u.ledger
	}
	// What ended before the window is of no use to anyone: forget it.
	if old := len(u.entries) - len(u.since(keep)); old > 0 {
		u.entries = slices.Delete(u.entries, 0, old)
		u.loadedFrom = keep
	}
	u.ledger = queue.DecayedUsage(u.since(now.Add(-8*halfLife)), nil, now, halfLife)
	u.at = now
	return u.ledger
}

// PublishedUsage is the usage last computed, for gossip: it never reads the
// disk.
func (u *Usage) PublishedUsage() map[string]float64 {
	if cur := u.cur.Load(); cur != nil {
		return *cur
	}
	return nil
}

// UsageSince is this node's raw GPU-seconds per user since then.
func (u *Usage) UsageSince(since time.Time) (map[string]float64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(since); err != nil {
		return nil, err
	}
	return queue.WindowUsage(u.since(since), u.leases(), since, u.clock.Now()), nil
}

// Ledger is the ledger since then (for doctor and replay), in end order.
func (u *Usage) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(since); err != nil {
		return nil, err
	}
	return slices.Clone(u.since(since)), nil
}

// DoctorTally is what `dibs doctor`'s figures need of this node's ledger
// since then (doctor.Tally), from totals kept by day (counted once when
// the window is read from the disk): a call adds up days' totals and reads
// one by one only the window's first day and the few leases that began a day
// before they ended (about 1 ms at 100,000 ended leases, where the walk
// over them took 40). Running names leases held now: those the ledger
// has are listed in the tally's Ended.
func (u *Usage) DoctorTally(since time.Time, running []string) (doctor.Tally, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(since); err != nil {
		return doctor.Tally{}, err
	}
	if u.totals == nil {
		u.totals = doctor.NewTotals()
	}
	return u.totals.Tally(u.entries, since, running), nil
}

// EachEnded calls fn with the ledger's entries that ended at or after
// since, in end order, starting after the entry (afterEnd, afterID) when
// afterEnd is set, until fn says stop: one page of doctor's history costs
// a binary search and the page. fn runs under the usage's lock and must
// not call back into it.
func (u *Usage) EachEnded(since, afterEnd time.Time, afterID string, fn func(lease.LedgerEntry) bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(since); err != nil {
		return err
	}
	part := u.since(since)
	if !afterEnd.IsZero() {
		i, found := slices.BinarySearchFunc(part, lease.LedgerEntry{End: afterEnd, LeaseID: afterID}, lease.ByEnd)
		if found {
			i++
		}
		part = part[i:]
	}
	for _, e := range part {
		if !fn(e) {
			return nil
		}
	}
	return nil
}

// ledgerCount is one person's ended leases on one UTC day, and where the
// day's folded row is once they went past the day's cap.
type ledgerCount struct {
	day time.Time
	n   int
	row uint64
	// folded is the row as it is on the disk.
	folded lease.LedgerEntry
}

// storeEnd ends a lease in the store with its ledger entry: one by one for
// a person's first LedgerPerUserDay leases of the day; past that, a plain
// lease (not a queued run's, a gang's or a reservation: those are read back
// one by one) is folded into the day's one row, so a claim/release loop
// adds a row a day instead of a row a lease while its GPU-seconds still
// count. A run (a lease with a session) is kept one by one up to
// lease.RunsPerLedgerDay times that cap, so `dibs history` lists every run of
// a working day, while a `dibs run` loop still cannot grow the ledger (or
// this agent's memory of it) without bound. A store that cannot fold keeps
// every entry. The ledger's window in
// memory follows the disk: a folded lease changes the row there too, so a
// loop cannot grow the agent's memory either. Callers hold wmu.
func (n *Node) storeEnd(e lease.LedgerEntry, run bool) error {
	f, ok := n.deps.Store.(lease.LedgerFolder)
	if !ok || e.Entry != "" || e.Gang != "" || e.Reserved || e.User == "" {
		if err := n.deps.Store.End(e.LeaseID, e); err != nil {
			return err
		}
		n.usage.ended(e)
		return nil
	}
	day := e.End.UTC().Truncate(24 * time.Hour)
	c := n.ledgerDay[e.User]
	if c == nil || !c.day.Equal(day) {
		if len(n.ledgerDay) > 10000 {
			clear(n.ledgerDay)
		}
		c = &ledgerCount{day: day}
		n.ledgerDay[e.User] = c
	}
	limit := n.cfg.LedgerPerUserDay
	if run {
		limit *= lease.RunsPerLedgerDay
	}
	if c.n < limit {
		if err := n.deps.Store.End(e.LeaseID, e); err != nil {
			return err
		}
		c.n++
		n.usage.ended(e)
		return nil
	}
	row, err := f.EndFolded(e.LeaseID, e, c.row)
	if err != nil {
		return err
	}
	if c.row == 0 {
		n.log.Warn("ledger: a person ended more leases today than are kept one by one; folding the rest of today's into one row",
			"user", e.User, "max", limit)
	}
	was := c.folded
	c.row, c.folded = row, lease.FoldInto(c.folded, e)
	n.usage.folded(was, c.folded)
	return nil
}

// folded replaces the row was (zero: none yet) by row in the copy of the
// ledger.
func (u *Usage) folded(was, row lease.LedgerEntry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entries != nil {
		if was.LeaseID != "" {
			if i, ok := slices.BinarySearchFunc(u.entries, was, lease.ByEnd); ok {
				u.entries = slices.Delete(u.entries, i, i+1)
			}
		}
		i, _ := slices.BinarySearchFunc(u.entries, row, lease.ByEnd)
		u.entries = slices.Insert(u.entries, i, row)
	}
	if u.totals != nil {
		u.totals.Changed(was.End)
		u.totals.Changed(row.End)
	}
	u.dirty.Store(true)
}

// History is the ended leases that f matches (f.Since set: the window is
// read back that far), the newest f.Limit of them in end order, and
// whether more matched: `dibs history`'s rows of this node, found with a
// binary search and a pass over the part asked for.
func (u *Usage) History(f lease.HistoryFilter) ([]lease.LedgerEntry, bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(f.Since); err != nil {
		return nil, false, err
	}
	rows, more := lease.FilterLedger(u.since(f.Since), f)
	return rows, more, nil
}

// IdleSince is, per user, the GPU-seconds of the leases that ended since
// then during which their GPUs sat at 0 % (held but idle).
func (u *Usage) IdleSince(since time.Time) (map[string]float64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(since); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, e := range u.since(since) {
		if e.IdleGPUSeconds > 0 {
			out[e.User] += e.IdleGPUSeconds
		}
	}
	return out, nil
}
