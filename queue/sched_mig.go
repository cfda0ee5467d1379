package queue

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// MIG instances in the queue. An entry with MIG asks for one instance that
// the selector names (a profile, a MIG- UUID or GPU:INDEX), on one node. It
// starts on a free instance (not held, no process of anybody without a
// lease on it, its GPU up and not held whole) of an eligible node, on its
// origin first, then by node name, then by GPU and instance; on a GPU with
// a booking only when it ends before the booking. Like a budget it never
// becomes the head, and no whole-GPU entry wants its GPU (a split GPU is
// never a whole one), so it backfills freely; what waits gets an estimate
// from the ends of the leases holding the instances it could take. Quotas
// and pools count the share of its GPU the instance holds.
//
// Reclaim. A MIG entry that waits reclaims one instance it could take, as
// the head reclaims whole GPUs (reclaimMIG): a lease of another user past
// its end, then one idle for IdleReclaimAfter (its whole GPU quiet, counted
// from the lease's start), then, when the entry's user is within quota, a
// borrowed one (the most recently started); never one that ends within
// PreemptGrace anyway. An instance being reclaimed is spoken for: the
// first entry that waits for it gets it, and a later one reclaims another.

// migFree calls f with each free instance of the node the entry's
// selector names (not held, its GPU up and not held whole, no process of
// anybody on it, not taken by a start of this pass), in GPU and instance
// order, until f returns false. It allocates nothing: a pass asks it for
// every MIG entry on every node.
func (sn *snode) migFree(e *QueueEntry, f func(g *nodeprobe.GPU, d *nodeprobe.MIGDevice) bool) {
	for i := range sn.snap.GPUs {
		g := &sn.snap.GPUs[i]
		if g.MIG != nodeprobe.MIGEnabled || g.Error != "" || !lease.MatchModel(g, e.Model) {
			continue
		}
		if sn.migUses == nil {
			sn.migUses = lease.UsesOf(sn.leases)
		}
		u := sn.migUses[g.Index]
		if u != nil && u.Whole != nil {
			continue
		}
		for k := range g.MIGDevices {
			d := &g.MIGDevices[k]
			if !lease.MIGNamed(g, d, e.MIG) || u.MIG(d.UUID) != nil || sn.migTaken[d.UUID] || lease.MIGBusy(g, d.UUID) != nil {
				continue
			}
			if !f(g, d) {
				return
			}
		}
	}
}

// hasMIG reports whether the node has a MIG instance the entry's selector
// names on a GPU of its model (held or not).
func (sn *snode) hasMIG(e *QueueEntry) bool {
	for k := range sn.snap.GPUs {
		if g := &sn.snap.GPUs[k]; lease.HasMIG(g, e.MIG) && lease.MatchModel(g, e.Model) {
			return true
		}
	}
	return false
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
			if d := &g.MIGDevices[k]; lease.MIGNamed(g, d, sel) {
				return lease.Share(d.MemoryTotalMiB, g.MemoryTotalMiB)
			}
		}
	}
	return 1
}

// visitMIG decides an entry that asks for a MIG instance.
func (s *scheduler) visitMIG(e *QueueEntry, r *Ranked, plan *Plan) {
	if s.cfg.Explain {
		s.explainParts(e, r)
	}
	bestN := -1
	var bestG *nodeprobe.GPU
	var bestD *nodeprobe.MIGDevice
	up, kept := false, false
	for i := range s.nodes {
		sn := &s.nodes[i]
		if !sn.alive || !e.MayRunOn(sn.name) || bestN >= 0 && sn.name != e.Origin {
			continue
		}
		if !sn.hasMIG(e) {
			continue // no instance it asks for: what else keeps it off does not matter
		}
		if !s.allows(sn, e) {
			kept = kept || len(sn.pools) > 0
			continue
		}
		up = true
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
			note, _ = s.poolNote(e) // only then is it worth its time
		} else if len(e.Tags) > 0 {
			note = " in pool " + strings.Join(e.Tags, "+")
		}
		if !up {
			if kept {
				r.wait(WaitPool, e.Node, fmt.Sprintf("needs a MIG instance %s%s", termsafe.String(e.MIG), note))
				return
			}
			r.wait(WaitMIG, e.Node, fmt.Sprintf("no node that is up has a MIG instance %s%s", termsafe.String(e.MIG), note))
			return
		}
		s.setEst(r, s.estimateMIG(e))
		r.wait(WaitMIG, e.Node, fmt.Sprintf("needs a MIG instance %s, none free%s", termsafe.String(e.MIG), note))
		if why := s.reclaimMIG(e, plan); why != "" {
			r.wait(WaitReclaim, "", why)
		}
		return
	}
	sn := &s.nodes[bestN]
	if sn.migTaken == nil {
		sn.migTaken = make(map[string]bool)
	}
	sn.migTaken[bestD.UUID] = true
	w := lease.Share(bestD.MemoryTotalMiB, bestG.MemoryTotalMiB)
	plan.Start = append(plan.Start, Start{
		Entry: *e, Ranks: []RankPlacement{{Node: sn.name, GPUs: []int{bestG.Index}}},
		Borrowed: s.borrows(e.User, w), Backfill: s.head != nil,
	})
	s.charge(sn, e.User, w)
	r.EstStart = s.now
}

// migNode is node i for MIG entry e, its MIG uses counted on first need;
// nil when e may not run there (down, not among e's nodes, or over its
// pools' quota).
func (s *scheduler) migNode(i int, e *QueueEntry) *snode {
	sn := &s.nodes[i]
	if !sn.alive || !e.MayRunOn(sn.name) || !s.allows(sn, e) {
		return nil
	}
	if sn.migUses == nil {
		sn.migUses = lease.UsesOf(sn.leases)
	}
	return sn
}

// estimateMIG is when an instance the entry could take is first expected
// free: the soonest end of the leases holding one (its MIG lease, or a
// lease of its whole GPU); never when none has a known end.
func (s *scheduler) estimateMIG(e *QueueEntry) int64 {
	best := never
	for i, g := range s.migGPUs(e) {
		u := s.nodes[i].migUses[g.Index]
		if u == nil {
			continue
		}
		if u.Whole != nil {
			end, _ := s.leaseEnd(u.Whole)
			best = min(best, end)
			continue
		}
		for k := range g.MIGDevices {
			if d := &g.MIGDevices[k]; lease.MIGNamed(g, d, e.MIG) {
				l := u.MIG(d.UUID)
				if l == nil {
					continue
				}
				end, _ := s.leaseEnd(l)
				best = min(best, end)
			}
		}
	}
	return best
}

// migGPUs yields, node by node (its index), each GPU with the MIG
// instance and the model MIG entry e asks for, on the nodes e may run on
// (migNode): the GPUs estimateMIG and reclaimMIG look through.
func (s *scheduler) migGPUs(e *QueueEntry) iter.Seq2[int, *nodeprobe.GPU] {
	return func(yield func(int, *nodeprobe.GPU) bool) {
		for i := range s.nodes {
			sn := s.migNode(i, e)
			if sn == nil {
				continue
			}
			for k := range sn.snap.GPUs {
				g := &sn.snap.GPUs[k]
				if lease.HasMIG(g, e.MIG) && lease.MatchModel(g, e.Model) && !yield(i, g) {
					return
				}
			}
		}
	}
}

// reclaimMIG asks for one MIG lease the entry could take the instance of
// to be reclaimed for it (see the rules above), and marks the instance
// spoken for in this pass; "" when it reclaims nothing. An instance already
// being reclaimed is the entry's to wait for.
func (s *scheduler) reclaimMIG(e *QueueEntry, plan *Plan) string {
	within := s.quotas && !s.borrows(e.User, s.weight(e))
	soon := int64(s.cfg.PreemptGrace)
	var best *lease.Lease
	bestN, bestRank, bestIdle := -1, 0, int64(0)
	for i, g := range s.migGPUs(e) {
		if g.Error != "" {
			continue
		}
		sn := &s.nodes[i]
		u := sn.migUses[g.Index]
		for d := range g.MIGDevices {
			inst := &g.MIGDevices[d]
			l := u.MIG(inst.UUID)
			if l == nil || !lease.MIGNamed(g, inst, e.MIG) || sn.migTaken[inst.UUID] {
				continue
			}
			if !l.PreemptedAt.IsZero() {
				// Being reclaimed already: this entry waits for it.
				if sn.migTaken == nil {
					sn.migTaken = make(map[string]bool)
				}
				sn.migTaken[inst.UUID] = true
				return fmt.Sprintf("next to start: a MIG instance %s, once the lease being reclaimed ends", termsafe.String(e.MIG))
			}
			if l.User == e.User {
				continue
			}
			rank, from := s.reclaimRank(sn, l, within, soon)
			better := rank > bestRank ||
				rank == bestRank && rank == 2 && from < bestIdle ||
				rank == bestRank && rank == 1 && l.StartedAt.After(best.StartedAt)
			if rank > 0 && better {
				best, bestN, bestRank, bestIdle = l, i, rank, from
			}
		}
	}
	if best == nil {
		return ""
	}
	why := reclaimReason(bestRank)
	sn := &s.nodes[bestN]
	if sn.migTaken == nil {
		sn.migTaken = make(map[string]bool)
	}
	sn.migTaken[best.MIG] = true
	plan.Reclaim = append(plan.Reclaim, Reclaim{Lease: *best, Reason: why, For: e.ID})
	return fmt.Sprintf("next to start: reclaiming a MIG instance %s (%s) for it", termsafe.String(e.MIG), why)
}

// reclaimRank is how fit another user's MIG or budget lease l on sn is to
// be reclaimed for a waiting entry: 3 past its end, 2 idle (since from),
// 1 borrowed when the entry is within its quota (within), 0 not at all,
// as for one that ends within soon (the grace) anyway. reclaimMIG and
// reclaimShared rank their candidates by it.
func (s *scheduler) reclaimRank(sn *snode, l *lease.Lease, within bool, soon int64) (rank int, from int64) {
	if end, _ := s.leaseEnd(l); l.ExpiresAt.After(s.now) && end <= soon {
		return 0, 0 // it ends within the grace anyway
	}
	from, idle := s.idleFrom(sn, l)
	switch {
	case !l.ExpiresAt.IsZero() && !l.ExpiresAt.After(s.now):
		return 3, from
	case idle:
		return 2, from
	case within && l.Borrowed:
		return 1, from
	}
	return 0, from
}

// reclaimReason is the preemption reason a reclaimRank names.
func reclaimReason(rank int) string {
	switch rank {
	case 3:
		return lease.PreemptOverdue
	case 2:
		return lease.PreemptIdle
	}
	return lease.PreemptQuota
}

// reclaimShared asks for the budgets on one GPU that a waiting budget
// entry needs ended to be reclaimed for it, by the rules reclaimMIG
// follows: other users' leases past their end, then idle ones, then (for
// an entry within quota) borrowed ones, the fewest on one GPU, never one
// that ends within PreemptGrace anyway, and none while budgets already
// being reclaimed would make the room (they are the entry's to wait for).
// Memory reclaimed or being reclaimed is spoken for in this pass, so a
// later entry does not count it again. "" when it reclaims nothing.
func (s *scheduler) reclaimShared(e *QueueEntry, mm []uint64, plan *Plan) string {
	within := s.quotas && !s.borrows(e.User, s.weight(e))
	soon := int64(s.cfg.PreemptGrace)
	type cand struct {
		l    *lease.Lease
		rank int
		from int64
	}
	var best []cand
	bestN, bestB := -1, -1
	var cands []cand
	for i, b := range s.sharedGPUs(e, mm) {
		sn := &s.nodes[i]
		if sn.bookedWithin(e.Duration)&(1<<b) != 0 {
			continue
		}
		room := sn.room
		if sn.total[b] < e.MemMiB || slices.ContainsFunc(sn.held[b], func(l *lease.Lease) bool { return !l.Partial() || l.MIG != "" }) {
			continue // held whole, or split: no budget fits there
		}
		have := room[b]
		cands = cands[:0]
		for _, l := range sn.held[b] {
			switch {
			case !l.PreemptedAt.IsZero() || s.reclaimed[l]:
				have += l.MemMiB // being reclaimed already
			case l.User == e.User:
			default:
				c := cand{l: l}
				if c.rank, c.from = s.reclaimRank(sn, l, within, soon); c.rank > 0 {
					cands = append(cands, c)
				}
			}
		}
		if sn.spoken != nil {
			have -= min(have, sn.spoken[b])
		}
		if have >= e.MemMiB {
			s.speak(sn, b, e.MemMiB)
			return fmt.Sprintf("next to start: %s on GPU %d of %s, once the budgets being reclaimed end", lease.FormatMem(e.MemMiB), sn.gpus[b].index, sn.name)
		}
		slices.SortFunc(cands, func(a, b cand) int {
			switch {
			case a.rank != b.rank:
				return cmp.Compare(b.rank, a.rank)
			case a.rank == 2 && a.from != b.from:
				return cmp.Compare(a.from, b.from)
			case a.rank == 1:
				return b.l.StartedAt.Compare(a.l.StartedAt)
			}
			return cmp.Compare(a.l.ID, b.l.ID)
		})
		for k, c := range cands {
			if have += c.l.MemMiB; have >= e.MemMiB {
				if best == nil || k+1 < len(best) {
					best, bestN, bestB = slices.Clone(cands[:k+1]), i, b
				}
				break
			}
		}
	}
	if best == nil {
		return ""
	}
	sn := &s.nodes[bestN]
	if s.reclaimed == nil {
		s.reclaimed = make(map[*lease.Lease]bool)
	}
	reasons := ""
	for _, c := range best {
		why := reclaimReason(c.rank)
		if !strings.Contains(reasons, why) {
			if reasons != "" {
				reasons += ", "
			}
			reasons += why
		}
		s.reclaimed[c.l] = true
		plan.Reclaim = append(plan.Reclaim, Reclaim{Lease: *c.l, Reason: why, For: e.ID})
	}
	s.speak(sn, bestB, e.MemMiB)
	return fmt.Sprintf("next to start: reclaiming %s on GPU %d of %s (%s) for it", budgetCount(len(best)), sn.gpus[bestB].index, sn.name, reasons)
}

// speak marks mib of GPU bit b's memory being reclaimed as spoken for by
// an entry of this pass.
func (s *scheduler) speak(sn *snode, b int, mib uint64) {
	if sn.spoken == nil {
		sn.spoken = make([]uint64, len(sn.gpus))
	}
	sn.spoken[b] += mib
}

// budgetCount says "1 budget", "2 budgets".
func budgetCount(n int) string {
	if n == 1 {
		return "1 budget"
	}
	return fmt.Sprintf("%d budgets", n)
}
