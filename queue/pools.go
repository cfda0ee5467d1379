package queue

import (
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// PoolQuota refuses n more GPUs (a fraction for a MIG instance or a
// budget: ClaimWeight) for user on a node with these tags when that takes
// them over a pool's MaxGPUs, counting what they hold on every node of the
// pool in the view.
func (v ClusterView) PoolQuota(p lease.Pools, tags []string, user string, n float64) error {
	if why := p.QuotaRefuses(tags, n, v.PoolHeld(p, user)); why != "" {
		return &refusal.Error{Code: refusal.CodeConflict, Msg: why}
	}
	return nil
}

// PoolHeld counts the GPUs user holds in each pool with a MaxGPUs, on every
// node of the view (a MIG or shared lease counts the share of its GPU it
// holds, Lease.Weight; a gang's reservation does not count yet): what
// Pools.Refuses reads.
func (v ClusterView) PoolHeld(p lease.Pools, user string) map[string]float64 {
	held := map[string]float64{}
	for i := range v.Nodes {
		nd := &v.Nodes[i]
		for _, t := range p.PoolsOf(nd.Snap.Host.Tags) {
			if p[t].MaxGPUs <= 0 {
				continue
			}
			for _, l := range nd.Leases {
				if l.User == user && l.ReservedUntil.IsZero() {
					held[t] += l.Weight()
				}
			}
		}
	}
	return held
}
