package queue

import (
	"cmp"
	"fmt"
	"iter"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// The scheduler's rules for bookings, pools and shared GPUs.
//
// Bookings. A booked GPU may run a queued entry now only when the entry's
// Duration ends before the booking starts; estimates move a run that would
// overlap a booking to the booking's end. A booking whose start has come
// (the node has not turned it into a lease yet) holds its GPUs until its
// end.
//
// Pools. An entry with Tags runs only on nodes carrying them all, and no
// entry runs on a node in a pool whose limits it breaks (a user it is not
// open to, a Duration over its MaxTime, more GPUs than its MaxGPUs with
// what its user holds there and starts in this pass).
//
// Shared GPUs. An entry with MemMiB asks for a budget on one GPU. It starts
// on the GPU of an eligible node that has room for it now (see sharedRoom:
// no whole-GPU lease, not split into MIG instances, memory left after the
// other budgets and the processes of nobody holding it) and that it fills
// best, then on its origin, then by name; on a GPU the head keeps
// (protected) only when it ends by the head's shadow time, and on a booked
// GPU only when it ends before the booking. It never becomes the head; what
// waits gets an estimate from the ends of the leases on the GPUs that could
// take it, and reclaims budgets on one GPU (reclaimShared) as the head
// reclaims whole GPUs. A whole-GPU entry does not start on a GPU a shared
// run of this pass took; a whole-GPU head reclaims the budgets on a GPU
// only all together (sched_reclaim.go), and MIG leases never.

// addBookings records a node's booked windows by GPU bit, and returns the
// GPUs whose booking has begun.
func (s *scheduler) addBookings(sn *snode, bookings []lease.Lease) uint64 {
	var begun uint64
	for i := range bookings {
		b := &bookings[i]
		end := b.ExpiresAt.Sub(s.now)
		if !b.Booked || end <= 0 {
			continue
		}
		// A run must end a little before the booking (minBeforeBooking),
		// as a direct claim must: the start reaches the node a moment
		// after this pass.
		start := max(b.StartedAt.Sub(s.now)-lease.MinBeforeBooking, 0)
		for _, idx := range b.GPUs {
			bit := sn.bit(idx)
			if bit < 0 {
				continue
			}
			if sn.books == nil {
				sn.books = make([][]window, len(sn.gpus))
			}
			sn.books[bit] = append(sn.books[bit], window{start: int64(start), end: int64(end)})
			if start == 0 {
				begun |= 1 << bit
			}
		}
	}
	for b := range sn.books {
		slices.SortFunc(sn.books[b], func(x, y window) int { return cmp.Compare(x.start, y.start) })
	}
	return begun
}

// bookedWithin is the node's GPUs with a booking starting before a run of
// d from now would end (every booked GPU when d is 0: a run with no end).
func (sn *snode) bookedWithin(d time.Duration) uint64 {
	var m uint64
	for b, ws := range sn.books {
		for _, w := range ws {
			if d <= 0 || w.start < int64(d) {
				m |= 1 << b
				break
			}
		}
	}
	return m
}

// fit is when a run of d could start on GPU bit b no earlier than at
// without overlapping a booking there.
func (sn *snode) fit(b int, at, d int64) int64 {
	if at == never {
		return never
	}
	for _, w := range sn.books[b] {
		if at < w.end && (d <= 0 || at > never-d || at+d > w.start) {
			at = w.end
		}
	}
	return at
}

// allows reports whether the entry may run on the node: its tags, and the
// limits of the node's pools.
func (s *scheduler) allows(sn *snode, e *QueueEntry) bool {
	if len(e.Tags) > 0 && !lease.HasTags(sn.tags, e.Tags) {
		return false
	}
	for i := range sn.pools {
		pl := &sn.pools[i]
		if len(pl.Users) > 0 && !slices.Contains(pl.Users, e.User) || pl.MaxTime > 0 && e.Duration > pl.MaxTime ||
			pl.MaxGPUs > 0 && s.poolUsed[poolKey{sn.poolNames[i], e.User}]+s.poolWeight(sn, e) > float64(pl.MaxGPUs)+lease.ShareSlack {
			return false
		}
	}
	return true
}

// poolWeight is how much of a pool's MaxGPUs the entry takes on the node:
// its GPUs, or the share of a GPU its MIG instance or budget holds (a
// budget counted against the largest GPU, the least it can take).
func (s *scheduler) poolWeight(sn *snode, e *QueueEntry) float64 {
	switch {
	case e.MIG != "":
		return migShare(sn, e.MIG)
	case e.MemMiB > 0:
		return s.weight(e)
	}
	return float64(e.GPUsPerNode)
}

// poolKey names one person's use of one pool (a struct, so a lookup
// allocates nothing).
type poolKey struct{ pool, user string }

// charge counts n GPUs (a fraction for part of one) that user holds or
// starts on sn against every quota they fall under: the user's own, their
// group's, and each capped pool of sn. It is the one place a start or a held
// lease is charged, so a new quota dimension is added here once.
func (s *scheduler) charge(sn *snode, user string, n float64) {
	s.userUsed[user] += n
	if g := s.cfg.UserGroups[user]; g != "" {
		s.groupUsed[g] += n
	}
	for i := range sn.pools {
		if sn.pools[i].MaxGPUs > 0 {
			if s.poolUsed == nil {
				s.poolUsed = make(map[poolKey]float64)
			}
			s.poolUsed[poolKey{sn.poolNames[i], user}] += n
		}
	}
}

// sharedNode is node i for an entry e that shares a GPU: the GPUs of it e
// may use (el, none when e may not run there) and the memory left on each
// (sharedRooms).
func (s *scheduler) sharedNode(i int, e *QueueEntry, mm []uint64) (sn *snode, el uint64, room []uint64) {
	sn = &s.nodes[i]
	if el = s.eligible(i, e, mm); el == 0 {
		return sn, 0, nil
	}
	return sn, el, s.sharedRooms(sn)
}

// sharedRooms fills the node's per-GPU room for shared runs on first use.
func (s *scheduler) sharedRooms(sn *snode) []uint64 {
	if sn.room != nil || !sn.alive {
		return sn.room
	}
	sn.room = make([]uint64, len(sn.gpus))
	sn.total = make([]uint64, len(sn.gpus))
	sn.held = make([][]*lease.Lease, len(sn.gpus))
	uses := lease.UsesOf(sn.leases)
	for b := range sn.gpus {
		if g := lease.FindGPU(*sn.snap, sn.gpus[b].index); g != nil {
			sn.room[b], sn.total[b] = lease.SharedRoom(g, uses[g.Index]), g.MemoryTotalMiB
		}
	}
	for _, l := range sn.leases {
		for _, idx := range l.GPUs {
			if b := sn.bit(idx); b >= 0 {
				sn.held[b] = append(sn.held[b], l)
			}
		}
	}
	for b := range sn.held {
		slices.SortFunc(sn.held[b], func(x, y *lease.Lease) int { return x.ExpiresAt.Compare(y.ExpiresAt) })
	}
	// A whole-GPU run started earlier in this pass took its GPU.
	for m := sn.taken; m != 0; m &= m - 1 {
		sn.room[bits.TrailingZeros64(m)] = 0
	}
	return sn.room
}

// visitShared decides an entry that asks for a memory budget.
func (s *scheduler) visitShared(e *QueueEntry, r *Ranked, plan *Plan) {
	if s.cfg.Explain {
		s.explainParts(e, r)
	}
	mm := s.modelMask(e.Model)
	canProtected := s.head != nil && e.Duration > 0 && int64(e.Duration) <= s.headAt
	bestN, bestB, bestLeft := -1, -1, uint64(0)
	most := uint64(0)
	for i, b := range s.sharedGPUs(e, mm) {
		sn := &s.nodes[i]
		room := sn.room
		most = max(most, room[b])
		if room[b] < e.MemMiB || sn.bookedWithin(e.Duration)&(1<<b) != 0 ||
			sn.protect&(1<<b) != 0 && !canProtected {
			continue
		}
		left := room[b] - e.MemMiB
		better := bestN < 0 || left < bestLeft
		if !better && left == bestLeft && bestN != i {
			better = sn.name == e.Origin && s.nodes[bestN].name != e.Origin
		}
		if better {
			bestN, bestB, bestLeft = i, b, left
		}
	}
	if bestN < 0 {
		at := s.estimateShared(e, mm)
		s.setEst(r, at)
		r.wait(WaitBudget, "", fmt.Sprintf("needs %s on one GPU, at most %s free on any", lease.FormatMem(e.MemMiB), lease.FormatMem(most)))
		if why := s.reclaimShared(e, mm, plan); why != "" {
			r.wait(WaitReclaim, "", why)
		}
		return
	}
	sn := &s.nodes[bestN]
	sn.room[bestB] -= e.MemMiB
	g := &sn.gpus[bestB]
	if sn.avail&(1<<bestB) != 0 {
		sn.avail &^= 1 << bestB
		s.totalAvail--
	}
	end := never
	if e.Duration > 0 {
		end = int64(e.Duration)
	}
	if g.freeAt < end {
		g.freeAt, g.late = end, false
	}
	// Quotas count the share of the GPU the budget takes.
	share := 1.0
	if t := sn.total[bestB]; t > 0 {
		share = min(float64(e.MemMiB)/float64(t), 1)
	}
	plan.Start = append(plan.Start, Start{
		Entry: *e, Ranks: []RankPlacement{{Node: sn.name, GPUs: []int{g.index}}},
		Borrowed: s.borrows(e.User, share), Backfill: s.head != nil,
	})
	s.charge(sn, e.User, share)
	r.EstStart = s.now
}

// estimateShared is when a budget could first fit on a GPU the entry may
// use: as the shared leases there end (soonest first), or the whole-GPU
// lease does; never when no end is known.
func (s *scheduler) estimateShared(e *QueueEntry, mm []uint64) int64 {
	best := never
	for i, b := range s.sharedGPUs(e, mm) {
		sn := &s.nodes[i]
		if sn.total[b] < e.MemMiB {
			continue
		}
		at := int64(0)
		if sn.room[b] < e.MemMiB {
			at = s.sharedFreeAt(sn, b, sn.room[b], e.MemMiB)
		}
		if sn.books != nil {
			at = sn.fit(b, at, int64(e.Duration))
		}
		best = min(best, at)
	}
	return best
}

// sharedGPUs yields, node by node (its index), the bit of each GPU budget
// entry e may take room on (sharedNode), the node's rooms counted: the
// GPUs visitShared, estimateShared and reclaimShared look through.
func (s *scheduler) sharedGPUs(e *QueueEntry, mm []uint64) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		for i := range s.nodes {
			_, el, _ := s.sharedNode(i, e, mm)
			for m := el; m != 0; m &= m - 1 {
				if !yield(i, bits.TrailingZeros64(m)) {
					return
				}
			}
		}
	}
}

// sharedFreeAt is when GPU bit b, with room now, has room for need: when
// its whole-GPU lease ends, or when enough of its shared leases have ended
// (soonest first); never when that cannot be told.
func (s *scheduler) sharedFreeAt(sn *snode, b int, room, need uint64) int64 {
	ends := sn.held[b]
	if len(ends) == 0 {
		return sn.gpus[b].freeAt // a start of this pass, or work outside dibs
	}
	if slices.ContainsFunc(ends, func(l *lease.Lease) bool { return !l.Partial() }) {
		at := int64(0)
		for _, l := range ends {
			end, _ := s.leaseEnd(l)
			at = max(at, end)
		}
		return at
	}
	for _, l := range ends {
		if room += l.MemMiB; room >= need {
			end, _ := s.leaseEnd(l)
			return end
		}
	}
	return never
}

// poolNote says which pools an entry is held to and which nodes their
// limits keep it off, and why, for the reason it waits: " in pool h100
// (pool limits keep it off a: pool h100 allows 2 GPUs per person and alice
// holds 2 there)", and whether pool limits keep it off a node.
func (s *scheduler) poolNote(e *QueueEntry) (string, bool) {
	note := ""
	if len(e.Tags) > 0 {
		note = " in pool " + strings.Join(e.Tags, "+")
	}
	var off, why []string
	var asked [][]string // the pool sets already asked why, by node
	for i := range s.nodes {
		sn := &s.nodes[i]
		if sn.alive && len(sn.pools) > 0 && lease.HasTags(sn.tags, e.Tags) && !s.allows(sn, e) && (e.MIG == "" || sn.hasMIG(e)) {
			off = append(off, sn.name)
			if slices.ContainsFunc(asked, func(p []string) bool { return slices.Equal(p, sn.poolNames) }) {
				continue // nodes of the same pools break the same limit
			}
			asked = append(asked, sn.poolNames)
			if w := s.poolWhy(sn, e); w != "" && !slices.Contains(why, w) {
				why = append(why, w)
			}
		}
	}
	if len(off) > 0 {
		note += " (pool limits keep it off " + strings.Join(off, ", ")
		if len(why) > 0 {
			note += ": " + strings.Join(why, "; ")
		}
		note += ")"
	}
	return note, len(off) > 0
}

// poolWhy says which of the node's pool limits the entry breaks.
func (s *scheduler) poolWhy(sn *snode, e *QueueEntry) string {
	for i := range sn.pools {
		pl, name := &sn.pools[i], sn.poolNames[i]
		switch {
		case len(pl.Users) > 0 && !slices.Contains(pl.Users, e.User):
			return fmt.Sprintf("pool %s is open to %s only", name, strings.Join(pl.Users, ", "))
		case pl.MaxTime > 0 && e.Duration > pl.MaxTime:
			return fmt.Sprintf("its %s is over pool %s's max_time of %s", words.FormatDuration(e.Duration), name, words.FormatDuration(pl.MaxTime))
		case pl.MaxGPUs > 0 && s.poolUsed[poolKey{name, e.User}]+s.poolWeight(sn, e) > float64(pl.MaxGPUs)+lease.ShareSlack:
			return fmt.Sprintf("pool %s allows %s per person and %s holds %s there", name, words.GPUCount(pl.MaxGPUs), e.User, words.FormatGPUs(s.poolUsed[poolKey{name, e.User}]))
		}
	}
	return ""
}
