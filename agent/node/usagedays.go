package node

import (
	"time"

	"github.com/dibs-gpu/dibs/queue"
)

// UsageByDay is this node's raw GPU-seconds per user in each span between
// cuts (the requester's midnights; the last span runs to now), for
// `dibs usage --chart`. cuts must be ascending and not empty.
func (u *Usage) UsageByDay(cuts []time.Time) ([]queue.Usage, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.window(cuts[0]); err != nil {
		return nil, err
	}
	return queue.DailyUsage(u.since(cuts[0]), u.leases(), cuts, u.clock.Now()), nil
}
