package queue

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// reclaimGroup is what ends together: one lease, or every rank of a gang.
type reclaimGroup struct {
	key      string
	user     string
	leases   []leaseAt
	borrowed bool
	idle     bool
	overdue  bool  // every lease of it is past its end
	pending  bool  // already being preempted
	idleFrom int64 // latest time (ns from now, <= 0) any of it went idle
	started  time.Time
	// shared: the budgets on one shared GPU, ended together to free it;
	// others: they are not all user's.
	shared, others bool
}

type leaseAt struct {
	node int
	l    *lease.Lease
	mask uint64
}

// reclaim picks the leases to reclaim so the head can start, records them in
// the plan and in the GPUs' expected free times, and says so; "" when it
// reclaims nothing.
func (s *scheduler) reclaim(e *QueueEntry, mm []uint64, plan *Plan) string {
	groups := s.reclaimGroups()
	extra := make([]uint64, len(s.nodes))
	pending := 0
	for gi := range groups {
		if groups[gi].pending {
			s.addGroup(extra, &groups[gi])
			pending++
		}
	}
	if pending > 0 && s.fits(e, mm, extra) {
		return "next to start, once leases being reclaimed end"
	}
	within := s.quotas && !s.borrows(e.User, s.weight(e))
	var cands []*reclaimGroup
	for gi := range groups {
		g := &groups[gi]
		if g.pending || g.user == e.User || g.others && slices.ContainsFunc(g.leases, func(la leaseAt) bool { return la.l.User == e.User }) {
			continue
		}
		if g.overdue || g.idle || within && g.borrowed {
			cands = append(cands, g)
		}
	}
	// Overdue leases go first (their time is up), then idle ones, then
	// borrowed ones, the most recently started first.
	slices.SortFunc(cands, func(a, b *reclaimGroup) int {
		switch {
		case a.overdue != b.overdue:
			if a.overdue {
				return -1
			}
			return 1
		case a.idle != b.idle:
			if a.idle {
				return -1
			}
			return 1
		case a.idle && a.idleFrom != b.idleFrom:
			return cmp.Compare(a.idleFrom, b.idleFrom)
		case !a.idle && !a.started.Equal(b.started):
			return b.started.Compare(a.started)
		}
		return cmp.Compare(a.key, b.key)
	})
	var chosen []*reclaimGroup
	fit := false
	for _, g := range cands {
		chosen = append(chosen, g)
		s.addGroup(extra, g)
		if fit = s.fits(e, mm, extra); fit {
			break
		}
	}
	if !fit {
		return ""
	}
	// Spare what is not needed, least preferred first.
	for k := len(chosen) - 2; k >= 0; k-- {
		clear(extra)
		for gi := range groups {
			if groups[gi].pending {
				s.addGroup(extra, &groups[gi])
			}
		}
		for j, g := range chosen {
			if j != k {
				s.addGroup(extra, g)
			}
		}
		if s.fits(e, mm, extra) {
			chosen = slices.Delete(chosen, k, k+1)
		}
	}
	soon := int64(s.cfg.PreemptGrace)
	n := 0
	reasons := ""
	for _, g := range chosen {
		why := lease.PreemptQuota
		switch {
		case g.overdue:
			why = lease.PreemptOverdue
		case g.idle:
			why = lease.PreemptIdle
		}
		if !strings.Contains(reasons, why) {
			if reasons != "" {
				reasons += ", "
			}
			reasons += why
		}
		if g.shared {
			n++ // the budgets on one GPU
		}
		for _, la := range g.leases {
			plan.Reclaim = append(plan.Reclaim, Reclaim{Lease: *la.l, Reason: why, For: e.ID})
			if !g.shared {
				n += len(la.l.GPUs)
			}
			sn := &s.nodes[la.node]
			for m := la.mask; m != 0; m &= m - 1 {
				if gp := &sn.gpus[bits.TrailingZeros64(m)]; gp.freeAt > soon || gp.late {
					gp.freeAt, gp.late = min(gp.freeAt, soon), false
				}
			}
		}
	}
	return fmt.Sprintf("next to start: reclaiming %s (%s) for it", words.GPUCount(n), reasons)
}

func (s *scheduler) addGroup(extra []uint64, g *reclaimGroup) {
	for _, la := range g.leases {
		extra[la.node] |= la.mask
	}
}

// fits reports whether the entry could start now if the GPUs in extra were
// free too.
func (s *scheduler) fits(e *QueueEntry, mm []uint64, extra []uint64) bool {
	n := 0
	for i := range s.nodes {
		free := (s.nodes[i].avail | extra[i]) & s.eligible(i, e, mm)
		if bits.OnesCount64(free) >= e.GPUsPerNode {
			if n++; n >= e.Nodes {
				return true
			}
		}
	}
	return false
}

// reclaimGroups gathers the committed leases of alive nodes into what ends
// together, in a deterministic order.
func (s *scheduler) reclaimGroups() []reclaimGroup {
	var groups []reclaimGroup
	at := make(map[string]int)
	for i := range s.nodes {
		sn := &s.nodes[i]
		for _, l := range sn.leases {
			// Reclaiming one MIG lease frees no whole GPU (a split GPU
			// never is one); the budgets on a shared GPU end together,
			// as one group, which frees it.
			// A service is never reclaimed, nor preempted unless started
			// --preemptible (its lease then borrows, for quota only).
			if !l.ReservedUntil.IsZero() || l.MIG != "" || l.IsService() && !l.Service.Preemptible {
				continue
			}
			key := sn.name + "/" + l.ID
			switch {
			case l.Gang != "":
				key = "gang/" + l.Gang
			case l.MemMiB > 0 && len(l.GPUs) == 1:
				key = fmt.Sprintf("shared/%s/%d", sn.name, l.GPUs[0])
			}
			gi, ok := at[key]
			if !ok {
				gi = len(groups)
				at[key] = gi
				groups = append(groups, reclaimGroup{key: key, user: l.User, idle: true, overdue: true, idleFrom: math.MinInt64, shared: l.MemMiB > 0})
			}
			g := &groups[gi]
			if g.user != l.User {
				g.others = true // budgets of several people on one GPU
			}
			la := leaseAt{node: i, l: l}
			for _, idx := range l.GPUs {
				if b := sn.bit(idx); b >= 0 {
					la.mask |= 1 << b
				}
			}
			g.leases = append(g.leases, la)
			if g.shared && len(g.leases) > 1 {
				// Budgets are reclaimed for quota only when every one of
				// them is borrowed.
				g.borrowed = g.borrowed && l.Borrowed
			} else {
				g.borrowed = g.borrowed || l.Borrowed
			}
			g.overdue = g.overdue && !l.ExpiresAt.After(s.now)
			if g.shared {
				// The GPU frees only once every budget on it ends.
				g.pending = (len(g.leases) == 1 || g.pending) && !l.PreemptedAt.IsZero()
			} else {
				g.pending = g.pending || !l.PreemptedAt.IsZero()
			}
			if l.StartedAt.After(g.started) {
				g.started = l.StartedAt
			}
			if from, idle := s.idleFrom(sn, l); idle && g.idle && !l.IsService() {
				g.idleFrom = max(g.idleFrom, from)
			} else {
				g.idle = false
			}
		}
	}
	for gi := range groups {
		slices.SortFunc(groups[gi].leases, func(a, b leaseAt) int {
			if c := cmp.Compare(a.node, b.node); c != 0 {
				return c
			}
			return cmp.Compare(a.l.ID, b.l.ID)
		})
	}
	return groups
}

// idleFrom reports whether every GPU of the lease has been quiet for at least
// IdleReclaimAfter, counting from its start at the earliest, and since when
// (ns from now).
func (s *scheduler) idleFrom(sn *snode, l *lease.Lease) (int64, bool) {
	if sn.idle == nil || len(l.GPUs) == 0 {
		return 0, false
	}
	from := l.StartedAt
	for _, idx := range l.GPUs {
		since, ok := sn.idle.QuietSince(idx)
		if !ok {
			return 0, false
		}
		if since.After(from) {
			from = since
		}
	}
	if s.now.Sub(from) < s.cfg.IdleReclaimAfter {
		return 0, false
	}
	return int64(from.Sub(s.now)), true
}

// reclaimOverdue reclaims, for a single-node entry behind the head that
// cannot start now, the leases of other users past their end (end action
// warn lets them linger) that hold GPUs it could start on at once: the
// head's reclaim (reclaim) serves the head alone, and a head that cannot
// start even with them ended reclaims nothing, so a request needing
// exactly such a GPU waited behind the head's estimated run there. Only
// GPUs the head is not estimated to start on count, unless the entry ends
// before the head could start (as backfill onto the head's GPUs may);
// never a gang's rank, a lease already being reclaimed, a part of a GPU,
// or a GPU booked within its time. The GPUs are then expected free after
// the grace, for this entry (later entries estimate behind it). It
// returns the node and the words; "" when it reclaims nothing.
func (s *scheduler) reclaimOverdue(e *QueueEntry, mm []uint64, plan *Plan) (string, string) {
	if e.Nodes != 1 {
		return "", ""
	}
	g := e.GPUsPerNode
	fitsShadow := s.head != nil && e.Duration > 0 && int64(e.Duration) <= s.headAt
	for i := range s.nodes {
		sn := &s.nodes[i]
		if sn.overdue == 0 {
			continue
		}
		el := s.eligible(i, e, mm) &^ sn.bookedWithin(e.Duration)
		if bits.OnesCount64(el) < g {
			continue
		}
		free := sn.avail & el
		if !fitsShadow {
			free &^= sn.protect
		}
		have := bits.OnesCount64(free)
		var chosen []*lease.Lease
		var mask uint64
		for m := el &^ free; m != 0 && have < g; m &= m - 1 {
			b := bits.TrailingZeros64(m)
			l := s.overdueHold(sn, b, e, plan)
			if l == nil || slices.Contains(chosen, l) || sn.shadow&(1<<b) != 0 && !fitsShadow {
				continue
			}
			// The whole lease ends: each of its GPUs must be one the
			// entry may take.
			var lm uint64
			ok := true
			for _, idx := range l.GPUs {
				lb := sn.bit(idx)
				if lb < 0 || s.overdueHold(sn, lb, e, plan) != l || sn.shadow&(1<<lb) != 0 && !fitsShadow {
					ok = false
					break
				}
				lm |= 1 << lb
			}
			if !ok {
				continue
			}
			chosen = append(chosen, l)
			mask |= lm
			have += bits.OnesCount64(lm & el)
		}
		if have < g {
			continue
		}
		soon := int64(s.cfg.PreemptGrace)
		n := 0
		for _, l := range chosen {
			plan.Reclaim = append(plan.Reclaim, Reclaim{Lease: *l, Reason: lease.PreemptOverdue, For: e.ID})
			n += len(l.GPUs)
		}
		for m := mask; m != 0; m &= m - 1 {
			gp := &sn.gpus[bits.TrailingZeros64(m)]
			gp.freeAt, gp.late = soon, false
		}
		return sn.name, fmt.Sprintf("reclaiming %s past its end on %s for it", words.GPUCount(n), sn.name)
	}
	return "", ""
}

// overdueHold is the lease holding GPU bit b of sn when it is one
// reclaimOverdue may end for e: another user's, whole GPUs, not a gang's
// rank, past its end and not being reclaimed already (before this pass,
// or in it); nil otherwise. An entry ahead may have been estimated onto
// the GPU (its by says so): the lease holds it all the same.
func (s *scheduler) overdueHold(sn *snode, b int, e *QueueEntry, plan *Plan) *lease.Lease {
	l := sn.gpus[b].hold
	if l == nil || l.User == e.User || l.Gang != "" || l.Partial() || !l.PreemptedAt.IsZero() ||
		l.ExpiresAt.IsZero() || l.ExpiresAt.After(s.now) || !l.ReservedUntil.IsZero() ||
		slices.ContainsFunc(plan.Reclaim, func(r Reclaim) bool { return r.Lease.ID == l.ID }) {
		return nil
	}
	return l
}
