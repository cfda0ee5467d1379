package queue

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// visit decides one entry.
func (s *scheduler) visit(e *QueueEntry, r *Ranked, plan *Plan) {
	if s.starting[e.Key()] {
		r.EstStart = s.now
		r.wait(WaitStarting, "", WaitingStarting)
		return
	}
	if e.MIG != "" {
		s.visitMIG(e, r, plan)
		return
	}
	if code, why := s.unservable(e); why != "" {
		r.wait(code, e.Node, why)
		if s.cfg.Explain && code != WaitNodes {
			s.explainWhole(e, s.modelMask(e.Model), r, nil, "")
			r.wait(code, e.Node, why)
		}
		return
	}
	if e.MemMiB > 0 {
		s.visitShared(e, r, plan)
		return
	}
	mm := s.modelMask(e.Model)
	if n := e.GPUs(); s.totalAvail >= n {
		picks, ok := s.place(e, mm, false)
		if !ok && s.head != nil && e.Duration > 0 && int64(e.Duration) <= s.headAt {
			picks, ok = s.place(e, mm, true)
		}
		if ok {
			plan.Start = append(plan.Start, s.commit(e, picks))
			r.EstStart = s.now
			return
		}
	}
	if s.head == nil {
		s.head, s.headRank = e, s.cur
		// Reclaim only what could serve it sooner than GPUs whose leases
		// end within the grace anyway.
		if soon, _ := s.estimate(e, mm, true); soon > int64(s.cfg.PreemptGrace) {
			if why := s.reclaim(e, mm, plan); why != "" {
				r.wait(WaitReclaim, "", why)
			}
		}
		at, picks := s.estimate(e, mm, false)
		if at == never {
			s.headAt = -1 // nothing to protect, nothing may use it
		} else {
			s.headAt = at
			for _, p := range picks {
				sn := &s.nodes[p.node]
				sn.protect |= p.mask & sn.avail
				sn.shadow |= p.mask
			}
		}
		if r.Waiting == "" {
			s.explainWhole(e, mm, r, picks, "next to start: ")
		} else if s.cfg.Explain {
			rc := r.Reason
			s.explainWhole(e, mm, r, picks, "")
			r.wait(rc.Code, rc.Node, rc.Words)
		}
		s.book(e, at, picks)
		s.setEst(r, at)
		return
	}
	on, why := s.reclaimOverdue(e, mm, plan)
	at, picks := s.estimate(e, mm, false)
	s.explainWhole(e, mm, r, picks, "")
	if why != "" {
		r.wait(WaitReclaim, on, why)
	}
	s.book(e, at, picks)
	s.setEst(r, at)
}

func (s *scheduler) setEst(r *Ranked, at int64) {
	if at != never {
		r.EstStart = s.now.Add(time.Duration(at))
	}
}

// unservable says why an entry cannot run on the nodes that are up, even
// with every GPU free, and its code; "" when it can.
func (s *scheduler) unservable(e *QueueEntry) (WaitCode, string) {
	switch {
	case e.Nodes < 1 || e.GPUsPerNode < 1:
		return WaitShape, "asks for no GPUs"
	case e.Nodes > 1 && e.Node != "":
		return WaitNodes, "a multi-node request cannot be pinned to one node"
	case e.GPUsPerNode > maxNodeGPUs:
		return WaitShape, fmt.Sprintf("no node offers %s", words.GPUCount(e.GPUsPerNode))
	}
	if e.Node != "" {
		i, ok := s.byName[e.Node]
		if !ok {
			return WaitNodes, fmt.Sprintf("node %s is not in the cluster", e.Node)
		}
		if !s.nodes[i].alive {
			return WaitDown, fmt.Sprintf("node %s is down", e.Node)
		}
	}
	mm := s.modelMask(e.Model)
	fit := 0
	for i := range s.nodes {
		if bits.OnesCount64(s.eligible(i, e, mm)) >= e.GPUsPerNode {
			fit++
		}
	}
	if fit >= e.Nodes {
		return "", ""
	}
	of := ""
	if e.Model != "" {
		of = fmt.Sprintf(" matching %q", e.Model)
	}
	pools, kept := s.poolNote(e)
	code := WaitShape
	if kept {
		code = WaitPool
	}
	of += pools
	if e.Nodes == 1 {
		if e.Node != "" {
			return code, fmt.Sprintf("%s has fewer than %d working %s%s", e.Node, e.GPUsPerNode, words.GPUWord(e.GPUsPerNode), of)
		}
		return code, fmt.Sprintf("no node that is up has %d working %s%s", e.GPUsPerNode, words.GPUWord(e.GPUsPerNode), of)
	}
	return code, fmt.Sprintf("needs %d nodes with %d working %s%s; %d are up", e.Nodes, e.GPUsPerNode, words.GPUWord(e.GPUsPerNode), of, fit)
}

// modelMask returns, per node, the GPUs matching model; nil for any model.
func (s *scheduler) modelMask(model string) []uint64 {
	if model == "" {
		return nil
	}
	if m, ok := s.models[model]; ok {
		return m
	}
	want := strings.ToLower(model)
	m := make([]uint64, len(s.nodes))
	for i := range s.nodes {
		sn := &s.nodes[i]
		for b := range sn.gpus {
			p := slices.IndexFunc(sn.snap.GPUs, func(g nodeprobe.GPU) bool { return g.Index == sn.gpus[b].index })
			if p >= 0 && strings.Contains(strings.ToLower(sn.snap.GPUs[p].Model), want) {
				m[i] |= 1 << b
			}
		}
	}
	if s.models == nil {
		s.models = make(map[string][]uint64)
	}
	s.models[model] = m
	return m
}

// eligible is the set of the node's working GPUs the entry may ever use.
func (s *scheduler) eligible(i int, e *QueueEntry, mm []uint64) uint64 {
	sn := &s.nodes[i]
	if !sn.alive || !e.MayRunOn(sn.name) || !s.allows(sn, e) {
		return 0
	}
	if mm != nil {
		return sn.usable & mm[i]
	}
	return sn.usable
}

// place finds where the entry starts now, on free GPUs (and protected ones
// when withProtected), or reports that it does not fit.
func (s *scheduler) place(e *QueueEntry, mm []uint64, withProtected bool) ([]pick, bool) {
	g := e.GPUsPerNode
	s.picks = s.picks[:0]
	for i := range s.nodes {
		sn := &s.nodes[i]
		free := sn.avail & s.eligible(i, e, mm) &^ sn.bookedWithin(e.Duration)
		if !withProtected {
			free &^= sn.protect
		}
		if c := bits.OnesCount64(free); c >= g {
			s.picks = append(s.picks, pick{node: i, mask: free, left: c - g})
		}
	}
	if len(s.picks) < e.Nodes {
		return nil, false
	}
	if e.Nodes == 1 {
		// ChooseNode's preference: fewest left over, closest, origin, name.
		best := -1
		for k := range s.picks {
			p := &s.picks[k]
			if best >= 0 && p.left > s.picks[best].left {
				continue
			}
			p.place = s.placeOn(p.node, p.mask, g)
			if best < 0 {
				best = k
				continue
			}
			b := &s.picks[best]
			switch {
			case p.left != b.left:
				best = k
			case p.place.spread != b.place.spread:
				if p.place.spread < b.place.spread {
					best = k
				}
			case s.nodes[p.node].name == e.Origin:
				best = k
			}
		}
		s.picks[0], s.picks = s.picks[best], s.picks[:1]
	} else {
		slices.SortStableFunc(s.picks, func(a, b pick) int { return cmp.Compare(a.left, b.left) })
		s.picks = s.picks[:e.Nodes]
		slices.SortFunc(s.picks, func(a, b pick) int { return cmp.Compare(a.node, b.node) })
		for k := range s.picks {
			s.picks[k].place = s.placeOn(s.picks[k].node, s.picks[k].mask, g)
		}
	}
	return s.picks, true
}

// placeOn runs Place on a node's free set, cached: nodes with the same
// topology and free set get the same GPUs, and a pass asks the same
// question many times.
func (s *scheduler) placeOn(i int, free uint64, n int) *placeResult {
	sn := &s.nodes[i]
	key := placeKey{topo: sn.topo, mask: free, n: n}
	if r, ok := s.places[key]; ok {
		return r
	}
	idx := make([]int, 0, bits.OnesCount64(free))
	for m := free; m != 0; m &= m - 1 {
		idx = append(idx, sn.gpus[bits.TrailingZeros64(m)].index)
	}
	r := &placeResult{gpus: lease.Place(*sn.snap, idx, n)}
	for _, x := range r.gpus {
		r.mask |= 1 << sn.bit(x)
	}
	r.spread = lease.Spread(*sn.snap, r.gpus)
	s.places[key] = r
	return r
}

// commit takes the picked GPUs for the entry and builds its start.
func (s *scheduler) commit(e *QueueEntry, picks []pick) Start {
	st := Start{
		Entry:    *e,
		Ranks:    make([]RankPlacement, len(picks)),
		Borrowed: s.borrows(e.User, float64(e.GPUs())),
		Backfill: s.head != nil,
	}
	end := never
	if e.Duration > 0 {
		end = int64(e.Duration)
	}
	for k, p := range picks {
		sn := &s.nodes[p.node]
		st.Ranks[k] = RankPlacement{Node: sn.name, GPUs: slices.Clone(p.place.gpus)}
		sn.avail &^= p.place.mask
		sn.taken |= p.place.mask
		s.charge(sn, e.User, float64(len(p.place.gpus)))
		if sn.room != nil {
			for m := p.place.mask; m != 0; m &= m - 1 {
				sn.room[bits.TrailingZeros64(m)] = 0
			}
		}
		for m := p.place.mask; m != 0; m &= m - 1 {
			g := &sn.gpus[bits.TrailingZeros64(m)]
			g.freeAt, g.late = end, false
			g.by, g.who, g.whoRank = causeAhead, e.ID, s.cur
		}
		s.totalAvail -= bits.OnesCount64(p.place.mask)
	}
	return st
}

// estimate finds the earliest time the entry could start from the GPUs'
// expected free times, and where: per node the GPUsPerNode GPUs that come
// free first, then the nodes whose GPUs come free first (fewest GPUs that
// are free now, then the name, on ties). It returns never when no such time
// is known. strict counts GPUs of leases whose time is up as never free.
func (s *scheduler) estimate(e *QueueEntry, mm []uint64, strict bool) (int64, []pick) {
	g := e.GPUsPerNode
	s.picks = s.picks[:0]
	var at [maxNodeGPUs]int64
	var bs [maxNodeGPUs]int
	for i := range s.nodes {
		sn := &s.nodes[i]
		el := s.eligible(i, e, mm)
		if bits.OnesCount64(el) < g {
			continue
		}
		k := 0
		for m := el; m != 0; m &= m - 1 {
			b := bits.TrailingZeros64(m)
			at[k], bs[k] = sn.gpus[b].freeAt, b
			if strict && sn.gpus[b].late {
				at[k] = never
			}
			if sn.books != nil {
				at[k] = sn.fit(b, at[k], int64(e.Duration))
			}
			k++
		}
		// Partial selection sort: the g earliest, ties by index.
		for x := 0; x < g; x++ {
			min := x
			for y := x + 1; y < k; y++ {
				if at[y] < at[min] {
					min = y
				}
			}
			at[x], at[min] = at[min], at[x]
			bs[x], bs[min] = bs[min], bs[x]
		}
		if at[g-1] == never {
			continue
		}
		p := pick{node: i, at: at[g-1]}
		for x := 0; x < g; x++ {
			p.mask |= 1 << bs[x]
		}
		p.nowFree = bits.OnesCount64(p.mask & sn.avail)
		s.picks = append(s.picks, p)
	}
	if len(s.picks) < e.Nodes {
		return never, nil
	}
	// Partial selection of the e.Nodes best: a full sort of every node for
	// every waiting entry is most of a pass's time.
	before := func(a, b *pick) bool {
		if a.at != b.at {
			return a.at < b.at
		}
		if a.nowFree != b.nowFree {
			return a.nowFree < b.nowFree
		}
		return a.node < b.node
	}
	for x := 0; x < e.Nodes; x++ {
		best := x
		for y := x + 1; y < len(s.picks); y++ {
			if before(&s.picks[y], &s.picks[best]) {
				best = y
			}
		}
		s.picks[x], s.picks[best] = s.picks[best], s.picks[x]
	}
	s.picks = s.picks[:e.Nodes]
	return s.picks[e.Nodes-1].at, s.picks
}

// book writes an estimated run into the GPUs' expected free times, so the
// entries behind it are estimated after it.
func (s *scheduler) book(e *QueueEntry, at int64, picks []pick) {
	if at == never {
		return
	}
	end := never
	if e.Duration > 0 && at <= never-int64(e.Duration) {
		end = at + int64(e.Duration)
	}
	for _, p := range picks {
		sn := &s.nodes[p.node]
		for m := p.mask; m != 0; m &= m - 1 {
			g := &sn.gpus[bits.TrailingZeros64(m)]
			g.freeAt, g.late = end, false
			g.by, g.who, g.whoRank = causeAhead, e.ID, s.cur
		}
	}
}
