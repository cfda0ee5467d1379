package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// usageRefresh is how often the ledger's decayed usage is recomputed at
// most, unless a lease ended since.
const usageRefresh = 5 * time.Second

// Usage is this node's GPU-seconds per user, from its ledger and its
// running leases; it keeps the decayed figure off the claim path. The
// ledger is read from the disk once; leases that end later are added to
// the copy in memory, so a claim after a release never reads the disk (it
// read the whole ledger before, and claims slowed as the ledger grew).
type Usage struct {
	n      *Node
	mu     sync.Mutex
	at     time.Time
	ledger lease.Usage
	cur    atomic.Pointer[lease.Usage]
	dirty  atomic.Bool
	// entries is the ledger since loadedFrom (nil until first read).
	entries    []lease.LedgerEntry
	loadedFrom time.Time
}

// ended adds a lease the store has just ended to the copy of the ledger.
func (u *Usage) ended(e lease.LedgerEntry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entries != nil {
		u.entries = append(u.entries, e)
	}
	u.dirty.Store(true)
}

// DecayedUsage is this node's GPU-seconds per user, decayed with halfLife:
// the ledger's part is recomputed at most every few seconds (it reads the
// disk) or when a lease ended; the running leases' part is always current.
func (u *Usage) DecayedUsage(halfLife time.Duration) lease.Usage {
	n := u.n
	now := n.deps.Clock.Now()
	sum := lease.Usage{}
	for k, v := range u.ledgerUsage(now, halfLife) {
		sum[k] += v
	}
	for k, v := range lease.DecayedUsage(nil, n.State().Leases, now, halfLife) {
		sum[k] += v
	}
	u.cur.Store(&sum)
	return sum
}

func (u *Usage) ledgerUsage(now time.Time, halfLife time.Duration) lease.Usage {
	n := u.n
	c := u
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ledger != nil && now.Sub(c.at) < usageRefresh && now.Sub(c.at) >= 0 && !c.dirty.Load() {
		return c.ledger
	}
	c.dirty.Store(false)
	from := now.Add(-8 * halfLife)
	if c.entries == nil || from.Before(c.loadedFrom) {
		ledger, err := n.deps.Store.Ledger(from)
		if err != nil {
			n.log.Warn("usage: read the ledger", "err", err)
			return c.ledger
		}
		c.entries, c.loadedFrom = append(make([]lease.LedgerEntry, 0, len(ledger)+64), ledger...), from
	}
	// What ended before the window no longer counts: forget it.
	keep := c.entries[:0]
	for _, e := range c.entries {
		if !e.End.Before(from) {
			keep = append(keep, e)
		}
	}
	c.entries = keep
	c.ledger = lease.DecayedUsage(c.entries, nil, now, halfLife)
	c.at = now
	return c.ledger
}

// PublishedUsage is the usage last computed, for gossip: it never reads the
// disk.
func (u *Usage) PublishedUsage() map[string]float64 {
	n := u.n
	if u := n.usage.cur.Load(); u != nil {
		return *u
	}
	return nil
}

// UsageSince is this node's raw GPU-seconds per user since then.
func (u *Usage) UsageSince(since time.Time) (map[string]float64, error) {
	n := u.n
	ledger, err := n.deps.Store.Ledger(since)
	if err != nil {
		return nil, err
	}
	return lease.WindowUsage(ledger, n.State().Leases, since, n.deps.Clock.Now()), nil
}

// Ledger reads the ledger since then (for doctor and replay).
func (u *Usage) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	n := u.n
	return n.deps.Store.Ledger(since)
}
