package queue

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	wordspkg "github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// WaitCode names why a queued entry waits, for clients to act on: the
// words beside it (Reason.Words) are for people and may change.
type WaitCode string

// Why entries wait. The scheduler gives one per entry (the cause on the
// node where it would start soonest) and, when asked (SchedConfig.Explain),
// one per node.
const (
	// WaitStarting: its start is under way.
	WaitStarting WaitCode = "starting"
	// WaitFits: on this node it would start now (a node's reason only: a
	// gang waits for its other nodes).
	WaitFits WaitCode = "fits"
	// WaitHeld: the GPUs it needs are held by leases until their end.
	WaitHeld WaitCode = "held"
	// WaitSquat: a GPU it needs is in use outside dibs (a process with no
	// lease): nobody can say when it comes free.
	WaitSquat WaitCode = "squat"
	// WaitBooking: a booking holds a GPU it needs, or begins before its
	// time limit would end.
	WaitBooking WaitCode = "booking"
	// WaitFairShare: the GPUs go first to an entry ranked higher (fair
	// share and age).
	WaitFairShare WaitCode = "fairshare"
	// WaitOrder: the GPUs go first to an entry of the same rank submitted
	// earlier.
	WaitOrder WaitCode = "order"
	// WaitQuota: it would take its user (or group) beyond quota, so the
	// entries within quota go first.
	WaitQuota WaitCode = "quota"
	// WaitReclaim: leases are being reclaimed for it.
	WaitReclaim WaitCode = "reclaim"
	// WaitPool: a pool it asked for, or a pool's limits, keep it off.
	WaitPool WaitCode = "pool"
	// WaitMIG: no MIG instance it asks for there (none, or none free).
	WaitMIG WaitCode = "mig"
	// WaitBudget: no GPU there has the memory its budget asks for free.
	WaitBudget WaitCode = "budget"
	// WaitShape: there are not enough working GPUs (of its model) there,
	// or not enough nodes, for what it asks even when all are free.
	WaitShape WaitCode = "shape"
	// WaitDown: the node is down.
	WaitDown WaitCode = "down"
	// WaitNodes: its --node, --nodelist or --exclude keep it off.
	WaitNodes WaitCode = "nodes"
	// WaitDependency: it waits for other runs (--after).
	WaitDependency WaitCode = "dependency"
	// WaitRetry: a requeued run waits out its pause before it retries.
	WaitRetry WaitCode = "retry"
	// WaitOrigin: its origin, which keeps it, is down.
	WaitOrigin WaitCode = "origin"
)

// Reason is why an entry waits, as state: a code, the node it is about
// (empty when it is about no one node) and words for people.
type Reason struct {
	Code  WaitCode `json:"code"`
	Node  string   `json:"node,omitempty"`
	Words string   `json:"words"`
}

// cause is what holds a GPU in a pass, for the reason an entry waits.
type cause uint8

const (
	causeNone    cause = iota // free, or not known
	causeLease                // a lease (hold)
	causeSquat                // processes with no lease
	causeBooking              // a booking that has begun
	causeAhead                // an entry ahead of it in this pass (who)
)

// wait sets the entry's reason and its words.
func (r *Ranked) wait(code WaitCode, node, words string) {
	r.Reason = Reason{Code: code, Node: node, Words: words}
	r.Waiting = words
}

// gpuCause records why GPU bit b of sn is taken from now until at.
func (sn *snode) gpuCause(b int, c cause, hold *lease.Lease, who string) {
	g := &sn.gpus[b]
	g.by, g.hold, g.who = c, hold, who
}

// nodeReason says why entry e (whole GPUs, e.GPUsPerNode of them) does not
// start on node i now: what keeps it off, or the GPU it would wait for
// last there and what holds it.
//
// Without words only the code is found (a pass that has to pick one node
// of many asks each for its code, then one for the words: the words are
// most of the cost, and the scheduler's own passes run often).
func (s *scheduler) nodeReason(i int, e *QueueEntry, mm []uint64, mine rankKey, words bool) Reason {
	sn := &s.nodes[i]
	r := Reason{Node: sn.name}
	if !words {
		if c := s.offCode(sn, e); c != "" {
			r.Code = c
			return r
		}
	} else if c, w := s.offNode(sn, e); c != "" {
		r.Code, r.Words = c, w
		return r
	}
	g := e.GPUsPerNode
	el := s.eligible(i, e, mm)
	if n := bits.OnesCount64(el); n < g {
		r.Code = WaitShape
		if !words {
			return r
		}
		of := ""
		if e.Model != "" {
			of = fmt.Sprintf(" matching %q", e.Model)
		}
		r.Words = fmt.Sprintf("%s has %d working %s%s (split into MIG instances or with errors do not count), it asks for %d", sn.name, n, wordspkg.GPUWord(n), of, g)
		return r
	}
	type slot struct {
		at     int64
		b      int
		booked bool
	}
	var buf [maxNodeGPUs]slot
	slots := buf[:0]
	for m := el; m != 0; m &= m - 1 {
		b := bits.TrailingZeros64(m)
		at := sn.gpus[b].freeAt
		x := slot{at: at, b: b}
		if sn.books != nil {
			x.at = sn.fit(b, at, int64(e.Duration))
			x.booked = x.at != at
		}
		slots = append(slots, x)
	}
	// Partial selection sort of the g earliest, ties by index, as
	// estimate does.
	for x := 0; x < g; x++ {
		m := x
		for y := x + 1; y < len(slots); y++ {
			if slots[y].at < slots[m].at {
				m = y
			}
		}
		slots[x], slots[m] = slots[m], slots[x]
	}
	last := slots[g-1]
	if last.at == 0 && !last.booked {
		// Free now: the head keeps it when the entry runs past its shadow.
		for _, x := range slots[:g] {
			if sn.protect&(1<<x.b) != 0 && s.head != nil && s.head != e {
				return s.aheadReason(sn, x.b, s.head.ID, s.headRank, mine, words)
			}
		}
		r.Code = WaitFits
		if words {
			r.Words = fmt.Sprintf("%s has %s free for it now", sn.name, wordspkg.GPUCount(g))
		}
		return r
	}
	gp := &sn.gpus[last.b]
	if !words {
		switch {
		case last.booked, gp.by == causeBooking:
			r.Code = WaitBooking
		case gp.by == causeSquat:
			r.Code = WaitSquat
		case gp.by == causeAhead:
			return s.aheadReason(sn, last.b, gp.who, gp.whoRank, mine, false)
		default:
			r.Code = WaitHeld
		}
		return r
	}
	switch {
	case last.booked:
		r.Code = WaitBooking
		r.Words = fmt.Sprintf("GPU %d of %s is booked before its %s would end", gp.index, sn.name, wordspkg.FormatDuration(e.Duration))
		if e.Duration <= 0 {
			r.Words = fmt.Sprintf("GPU %d of %s is booked, and it asks for no time limit", gp.index, sn.name)
		}
	case gp.by == causeSquat:
		r.Code = WaitSquat
		r.Words = fmt.Sprintf("GPU %d of %s is in use outside dibs (a process with no lease): nobody can say when it comes free", gp.index, sn.name)
	case gp.by == causeBooking:
		r.Code = WaitBooking
		r.Words = fmt.Sprintf("GPU %d of %s is in a booking that has begun", gp.index, sn.name)
	case gp.by == causeAhead:
		return s.aheadReason(sn, last.b, gp.who, gp.whoRank, mine, true)
	case gp.by == causeLease && gp.hold != nil:
		r.Code = WaitHeld
		l := gp.hold
		switch {
		case gp.freeAt == never:
			r.Words = fmt.Sprintf("GPU %d of %s is held by %s's lease %s, with no end", gp.index, sn.name, termsafe.String(l.User), l.ID)
		case gp.late:
			r.Words = fmt.Sprintf("GPU %d of %s is held by %s's lease %s, past its end", gp.index, sn.name, termsafe.String(l.User), l.ID)
		default:
			r.Words = fmt.Sprintf("GPU %d of %s is held by %s's lease %s for %s more", gp.index, sn.name, termsafe.String(l.User), l.ID, wordspkg.FormatDuration(roundUpMinute(gp.freeAt)))
		}
	default:
		r.Code = WaitHeld
		r.Words = fmt.Sprintf("GPU %d of %s is held", gp.index, sn.name)
	}
	return r
}

// aheadReason says that GPU bit b of sn goes first to entry who, which is
// ranked ahead of the waiting one (mine): by quota, fair share or order.
func (s *scheduler) aheadReason(sn *snode, b int, who string, them, mine rankKey, words bool) Reason {
	r := Reason{Node: sn.name}
	idx := sn.gpus[b].index
	if !words {
		switch {
		case mine.borrow && !them.borrow:
			r.Code = WaitQuota
		case them.prio > mine.prio+0.5:
			r.Code = WaitFairShare
		default:
			r.Code = WaitOrder
		}
		return r
	}
	switch {
	case mine.borrow && !them.borrow:
		r.Code = WaitQuota
		r.Words = fmt.Sprintf("it would borrow beyond its quota, so %s (within quota) gets GPU %d of %s first", who, idx, sn.name)
	case them.prio > mine.prio+0.5:
		r.Code = WaitFairShare
		r.Words = fmt.Sprintf("GPU %d of %s goes first to %s, ranked higher by fair share and age (priority %.0f, this %.0f)", idx, sn.name, who, them.prio, mine.prio)
	default:
		r.Code = WaitOrder
		r.Words = fmt.Sprintf("GPU %d of %s goes first to %s, submitted before it at the same priority", idx, sn.name, who)
	}
	return r
}

// offCode is offNode's code alone.
func (s *scheduler) offCode(sn *snode, e *QueueEntry) WaitCode {
	switch {
	case !sn.alive:
		return WaitDown
	case !e.MayRunOn(sn.name):
		return WaitNodes
	case len(e.Tags) > 0 && !lease.HasTags(sn.tags, e.Tags), !s.allows(sn, e):
		return WaitPool
	}
	return ""
}

// offNode says what keeps the entry off node sn for good (its pins, pools,
// the node being down); "" when nothing does.
func (s *scheduler) offNode(sn *snode, e *QueueEntry) (WaitCode, string) {
	switch {
	case !sn.alive:
		return WaitDown, sn.name + " is down"
	case e.Node != "" && e.Node != sn.name:
		return WaitNodes, fmt.Sprintf("it is pinned to %s", e.Node)
	case !e.NodeChoice.Allows(sn.name):
		return WaitNodes, fmt.Sprintf("its --nodelist/--exclude keep it off %s (%s)", sn.name, e.NodeChoice)
	case len(e.Tags) > 0 && !lease.HasTags(sn.tags, e.Tags):
		return WaitPool, fmt.Sprintf("%s is not in pool %s", sn.name, termsafe.String(strings.Join(e.Tags, "+")))
	case !s.allows(sn, e):
		w := s.poolWhy(sn, e)
		if w == "" {
			w = "its pool limits"
		}
		return WaitPool, fmt.Sprintf("%s is kept from it: %s", sn.name, w)
	}
	return "", ""
}

// explainWhole gives a waiting whole-GPU entry its reason: the one of the
// node it would start on soonest (the last of a gang's nodes to be ready),
// or, with no estimate, of the first node it could ever use; with
// cfg.Explain, every node's. picks are the estimate's.
func (s *scheduler) explainWhole(e *QueueEntry, mm []uint64, r *Ranked, picks []pick, prefix string) {
	mine := s.cur
	node := -1
	var at int64 = -1
	for _, p := range picks {
		if p.at > at {
			node, at = p.node, p.at
		}
	}
	var main Reason
	if s.cfg.Explain {
		r.Nodes = make([]Reason, 0, len(s.nodes))
		for i := range s.nodes {
			r.Nodes = append(r.Nodes, s.nodeReason(i, e, mm, mine, true))
		}
	}
	if node < 0 {
		// No estimate: the node nearest a start stands for it.
		best := -1
		for i := range s.nodes {
			if c := s.nodeReason(i, e, mm, mine, false).Code; best < 0 || rankOff(c) < rankOff(main.Code) {
				best, main.Code = i, c
			}
		}
		node = best
	}
	if node >= 0 {
		main = s.nodeReason(node, e, mm, mine, !s.cfg.Terse)
	}
	if main.Code == WaitFits && e.Nodes > 1 {
		main.Code, main.Words = WaitShape, fmt.Sprintf("it needs %d nodes with %s free together", e.Nodes, wordspkg.GPUCount(e.GPUsPerNode))
	}
	if main.Code == "" {
		main = Reason{Code: WaitShape, Words: "no node can take it"}
	}
	if s.cfg.Terse {
		r.wait(main.Code, main.Node, "")
		return
	}
	r.wait(main.Code, main.Node, prefix+main.Words)
}

// rankOff orders node reasons by how near they are to a start, for the
// node whose reason stands for an entry with no estimate: what waits for
// GPUs before what can never use a node.
func rankOff(c WaitCode) int {
	switch c {
	case WaitFits, WaitHeld, WaitFairShare, WaitOrder, WaitQuota:
		return 0
	case WaitSquat, WaitBooking:
		return 1
	case WaitShape, WaitMIG, WaitBudget:
		return 2
	case WaitPool:
		return 3
	case WaitNodes:
		return 4
	}
	return 5
}

// roundUpMinute is d (nanoseconds) rounded up to the minute, as a
// duration: "for 50m more", never "for 0s more".
func roundUpMinute(d int64) time.Duration {
	m := int64(time.Minute)
	return time.Duration((d + m - 1) / m * m)
}

// explainParts gives an entry for a MIG instance or a memory budget every
// node's reason (SchedConfig.Explain), before its visit takes anything:
// what keeps it off the node, no instance it names there, every such
// instance held, no GPU there with room for its budget; or that one is
// free there now.
func (s *scheduler) explainParts(e *QueueEntry, r *Ranked) {
	r.Nodes = make([]Reason, 0, len(s.nodes))
	mm := s.modelMask(e.Model)
	for i := range s.nodes {
		sn := &s.nodes[i]
		nr := Reason{Node: sn.name}
		if sn.alive && e.MayRunOn(sn.name) && e.MIG != "" && !sn.hasMIG(e) {
			// No instance it names: what else would keep it off does not matter.
			nr.Code, nr.Words = WaitMIG, fmt.Sprintf("%s has no MIG instance %s", sn.name, termsafe.String(e.MIG))
			r.Nodes = append(r.Nodes, nr)
			continue
		}
		if c, w := s.offNode(sn, e); c != "" {
			nr.Code, nr.Words = c, w
			r.Nodes = append(r.Nodes, nr)
			continue
		}
		switch {
		case e.MIG != "":
			free := false
			sn.migFree(e, func(*nodeprobe.GPU, *nodeprobe.MIGDevice) bool { free = true; return false })
			nr.Code, nr.Words = WaitMIG, fmt.Sprintf("every MIG instance %s of %s is held", termsafe.String(e.MIG), sn.name)
			if free {
				nr.Code, nr.Words = WaitFits, fmt.Sprintf("%s has a MIG instance %s free", sn.name, termsafe.String(e.MIG))
			}
		default:
			most := uint64(0)
			room := s.sharedRooms(sn)
			for m := s.eligible(i, e, mm); m != 0; m &= m - 1 {
				most = max(most, room[bits.TrailingZeros64(m)])
			}
			nr.Code, nr.Words = WaitBudget, fmt.Sprintf("%s has at most %s free on one GPU, it asks for %s", sn.name, lease.FormatMem(most), lease.FormatMem(e.MemMiB))
			if most >= e.MemMiB {
				nr.Code, nr.Words = WaitFits, fmt.Sprintf("%s has %s free on one GPU", sn.name, lease.FormatMem(most))
			}
		}
		r.Nodes = append(r.Nodes, nr)
	}
}
