package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// usageRefresh is how often the decayed usage is recomputed from the
// ledger at most, unless a lease ended since.
const usageRefresh = 5 * time.Second

// usageCache keeps this node's decayed usage off the claim path.
type usageCache struct {
	mu    sync.Mutex
	at    time.Time
	cur   atomic.Pointer[lease.Usage]
	dirty atomic.Bool
}

// DecayedUsage is this node's GPU-seconds per user, decayed with halfLife,
// recomputed at most every few seconds (it reads the ledger).
func (n *Node) DecayedUsage(halfLife time.Duration) lease.Usage {
	c := &n.usage
	c.mu.Lock()
	defer c.mu.Unlock()
	now := n.deps.Clock.Now()
	cur := c.cur.Load()
	if cur != nil && now.Sub(c.at) < usageRefresh && now.Sub(c.at) >= 0 && !c.dirty.Load() {
		return *cur
	}
	c.dirty.Store(false)
	ledger, err := n.deps.Store.Ledger(now.Add(-8 * halfLife))
	if err != nil {
		n.log.Warn("usage: read the ledger", "err", err)
		if cur != nil {
			return *cur
		}
		return lease.Usage{}
	}
	u := lease.DecayedUsage(ledger, n.State().Leases, now, halfLife)
	c.cur.Store(&u)
	c.at = now
	return u
}

// PublishedUsage is the usage last computed, for gossip: it never reads the
// disk.
func (n *Node) PublishedUsage() map[string]float64 {
	if u := n.usage.cur.Load(); u != nil {
		return *u
	}
	return nil
}

// UsageSince is this node's raw GPU-seconds per user since then.
func (n *Node) UsageSince(since time.Time) (map[string]float64, error) {
	ledger, err := n.deps.Store.Ledger(since)
	if err != nil {
		return nil, err
	}
	return lease.WindowUsage(ledger, n.State().Leases, since, n.deps.Clock.Now()), nil
}

// Ledger reads the ledger since then (for doctor and replay).
func (n *Node) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	return n.deps.Store.Ledger(since)
}
