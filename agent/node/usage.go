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

// usageCache keeps this node's decayed usage off the claim path.
type usageCache struct {
	mu     sync.Mutex
	at     time.Time
	ledger lease.Usage
	cur    atomic.Pointer[lease.Usage]
	dirty  atomic.Bool
}

// DecayedUsage is this node's GPU-seconds per user, decayed with halfLife:
// the ledger's part is recomputed at most every few seconds (it reads the
// disk) or when a lease ended; the running leases' part is always current.
func (n *Node) DecayedUsage(halfLife time.Duration) lease.Usage {
	now := n.deps.Clock.Now()
	u := lease.Usage{}
	for k, v := range n.ledgerUsage(now, halfLife) {
		u[k] += v
	}
	for k, v := range lease.DecayedUsage(nil, n.State().Leases, now, halfLife) {
		u[k] += v
	}
	n.usage.cur.Store(&u)
	return u
}

func (n *Node) ledgerUsage(now time.Time, halfLife time.Duration) lease.Usage {
	c := &n.usage
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
