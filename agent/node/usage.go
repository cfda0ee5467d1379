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
// running leases; it keeps the decayed figure off the claim path.
type Usage struct {
	n      *Node
	mu     sync.Mutex
	at     time.Time
	ledger lease.Usage
	cur    atomic.Pointer[lease.Usage]
	dirty  atomic.Bool
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
	ledger, err := n.deps.Store.Ledger(now.Add(-8 * halfLife))
	if err != nil {
		n.log.Warn("usage: read the ledger", "err", err)
		return c.ledger
	}
	c.ledger = lease.DecayedUsage(ledger, nil, now, halfLife)
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
