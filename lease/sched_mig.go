package lease

import (
	"fmt"
	"strings"

	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// MIG instances in the queue. An entry with MIG asks for one instance that
// the selector names (a profile, a MIG- UUID or GPU:INDEX), on one node. It
// starts on a free instance (not held, no process of anybody without a
// lease on it, its GPU up and not held whole) of an eligible node, on its
// origin first, then by node name, then by GPU and instance; on a GPU with
// a booking only when it ends before the booking. Like a budget it never
// becomes the head and reclaims nothing, and no whole-GPU entry wants its
// GPU (a split GPU is never a whole one), so it backfills freely; what
// waits gets an estimate from the ends of the leases holding the instances
// it could take. Quotas and pools count the share of its GPU the instance
// holds.

// migFree calls f with each free instance of the node the entry's
// selector names (not held, its GPU up and not held whole, no process of
// anybody on it, not taken by a start of this pass), in GPU and instance
// order, until f returns false. It allocates nothing: a pass asks it for
// every MIG entry on every node.
func (sn *snode) migFree(e *QueueEntry, f func(g *nodeprobe.GPU, d *nodeprobe.MIGDevice) bool) {
	for i := range sn.snap.GPUs {
		g := &sn.snap.GPUs[i]
		if g.MIG != nodeprobe.MIGEnabled || g.Error != "" || !matchModel(g, e.Model) {
			continue
		}
		if sn.migUses == nil {
			sn.migUses = usesOf(sn.leases)
		}
		u := sn.migUses[g.Index]
		if u != nil && u.whole != nil {
			continue
		}
		for k := range g.MIGDevices {
			d := &g.MIGDevices[k]
			if !migNamed(g, d, e.MIG) || u.mig(d.UUID) != nil || sn.migTaken[d.UUID] || migBusy(g, d.UUID) != nil {
				continue
			}
			if !f(g, d) {
				return
			}
		}
	}
}

// migShare is the share of its GPU the first instance sel names on the
// node holds: what a MIG entry counts for in quotas and pools there (1
// when the node has none).
func migShare(sn *snode, sel string) float64 {
	for i := range sn.snap.GPUs {
		g := &sn.snap.GPUs[i]
		if g.MIG != nodeprobe.MIGEnabled {
			continue
		}
		for k := range g.MIGDevices {
			if d := &g.MIGDevices[k]; migNamed(g, d, sel) {
				return share(d.MemoryTotalMiB, g.MemoryTotalMiB)
			}
		}
	}
	return 1
}

// visitMIG decides an entry that asks for a MIG instance.
func (s *scheduler) visitMIG(e *QueueEntry, r *Ranked, plan *Plan) {
	bestN := -1
	var bestG *nodeprobe.GPU
	var bestD *nodeprobe.MIGDevice
	up, kept := false, false
	for i := range s.nodes {
		sn := &s.nodes[i]
		if !sn.alive || e.Node != "" && e.Node != sn.name || bestN >= 0 && sn.name != e.Origin {
			continue
		}
		if !s.allows(sn, e) {
			kept = kept || len(sn.pools) > 0
			continue
		}
		if !up {
			for k := range sn.snap.GPUs {
				if g := &sn.snap.GPUs[k]; hasMIG(g, e.MIG) && matchModel(g, e.Model) {
					up = true
					break
				}
			}
		}
		var booked uint64
		if sn.books != nil {
			booked = sn.bookedWithin(e.Duration)
		}
		sn.migFree(e, func(g *nodeprobe.GPU, d *nodeprobe.MIGDevice) bool {
			if b := sn.bit(g.Index); b >= 0 && booked&(1<<b) != 0 {
				return true
			}
			bestN, bestG, bestD = i, g, d
			return false
		})
		if bestN >= 0 && s.nodes[bestN].name == e.Origin {
			break
		}
	}
	if bestN < 0 {
		note := ""
		if kept {
			note = s.poolNote(e) // only then is it worth its time
		} else if len(e.Tags) > 0 {
			note = " in pool " + strings.Join(e.Tags, "+")
		}
		if !up {
			r.Waiting = fmt.Sprintf("no node that is up has a MIG instance %s%s", termsafe.String(e.MIG), note)
			return
		}
		s.setEst(r, s.estimateMIG(e))
		r.Waiting = fmt.Sprintf("needs a MIG instance %s, none free%s", termsafe.String(e.MIG), note)
		return
	}
	sn := &s.nodes[bestN]
	if sn.migTaken == nil {
		sn.migTaken = make(map[string]bool)
	}
	sn.migTaken[bestD.UUID] = true
	w := share(bestD.MemoryTotalMiB, bestG.MemoryTotalMiB)
	plan.Start = append(plan.Start, Start{
		Entry: *e, Ranks: []RankPlacement{{Node: sn.name, GPUs: []int{bestG.Index}}},
		Borrowed: s.borrows(e.User, w), Backfill: s.head != nil,
	})
	s.userUsed[e.User] += w
	s.usePools(sn, e.User, w)
	if grp := s.cfg.UserGroups[e.User]; grp != "" {
		s.groupUsed[grp] += w
	}
	r.EstStart = s.now
}

// estimateMIG is when an instance the entry could take is first expected
// free: the soonest end of the leases holding one (its MIG lease, or a
// lease of its whole GPU); never when none has a known end.
func (s *scheduler) estimateMIG(e *QueueEntry) int64 {
	best := never
	for i := range s.nodes {
		sn := &s.nodes[i]
		if !sn.alive || e.Node != "" && e.Node != sn.name || !s.allows(sn, e) {
			continue
		}
		if sn.migUses == nil {
			sn.migUses = usesOf(sn.leases)
		}
		for k := range sn.snap.GPUs {
			g := &sn.snap.GPUs[k]
			if !hasMIG(g, e.MIG) || !matchModel(g, e.Model) {
				continue
			}
			u := sn.migUses[g.Index]
			if u == nil {
				continue
			}
			if u.whole != nil {
				end, _ := s.leaseEnd(u.whole)
				best = min(best, end)
				continue
			}
			for k := range g.MIGDevices {
				if d := &g.MIGDevices[k]; migNamed(g, d, e.MIG) {
					l := u.mig(d.UUID)
					if l == nil {
						continue
					}
					end, _ := s.leaseEnd(l)
					best = min(best, end)
				}
			}
		}
	}
	return best
}
