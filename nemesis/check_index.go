package nemesis

import (
	"cmp"
	"slices"

	"github.com/dibs-gpu/dibs/lease"
)

// leaseKey names a lease on its node.
type leaseKey struct{ node, id string }

// instance is one life of a lease as its node wrote it: granted by its
// first put, changed by later puts (extend, flags, the commit of a
// reservation), ended by an end. A node that reissued a token would give
// the same id a second life: a second instance.
type instance struct {
	node, id string
	token    uint64
	gpus     []int
	// puts are indices into History.Writes; puts[0] granted it. None: an
	// end of a lease this node never wrote.
	puts []int
	// end is the end's write, -1 while it lives.
	end int
	// commit is the put that made it a lease proper (the commit of a gang
	// reservation, or the grant of anything else), -1 while it is a
	// reservation.
	commit int
	// reservedAtEnd: it ended still an uncommitted reservation (nothing
	// ran on it).
	reservedAtEnd bool
	// claims are the OK claims that returned it, releases the OK releases
	// of it, unknown the claims with no answer whose request made it.
	claims, releases, unknown []int
}

// first is the index of its first write.
func (in *instance) first() int {
	if len(in.puts) > 0 {
		return in.puts[0]
	}
	return in.end
}

// lease is the lease as last put (zero when never put).
func (in *instance) lease(h *History) lease.Lease {
	if len(in.puts) == 0 {
		return lease.Lease{ID: in.id, Node: in.node, GPUs: in.gpus}
	}
	return h.Writes[in.puts[len(in.puts)-1]].Lease
}

// index is what every check looks up in a history, built once.
type index struct {
	h *History
	// byNode are each node's lease writes (put, end) in the order it made
	// them.
	byNode map[string][]int
	// visible is, for a lease write, when readers see it at the latest:
	// the node publishes a change before it starts its next lease write
	// (under the lock that write takes), and within PublishWithin of the
	// write's end (or of the node's return, if it was killed or paused).
	visible map[int]int64
	leases  map[leaseKey][]*instance
	// all are the instances in the order they were first written.
	all []*instance
	// missing are OK claims whose lease no node wrote.
	missing []int
	// entryWrites are each queue entry's writes, in order.
	entryWrites map[string][]int
	// down are each node's kills and pauses.
	down map[string][]*Fault
}

func newIndex(h *History, o CheckOptions) *index {
	x := &index{h: h, byNode: map[string][]int{}, visible: map[int]int64{},
		leases: map[leaseKey][]*instance{}, entryWrites: map[string][]int{}, down: map[string][]*Fault{}}
	for i := range h.Writes {
		w := &h.Writes[i]
		switch w.Kind {
		case WritePut, WriteEnd:
			x.byNode[w.Node] = append(x.byNode[w.Node], i)
		case WritePutEntry:
			x.entryWrites[w.Entry.ID] = append(x.entryWrites[w.Entry.ID], i)
		case WriteDeleteEntry:
			x.entryWrites[w.EntryID] = append(x.entryWrites[w.EntryID], i)
		}
	}
	for i := range h.Faults {
		f := &h.Faults[i]
		if !agentDown(f.Kind) && f.Kind != FaultPause {
			continue
		}
		for _, n := range f.Nodes {
			x.down[n] = append(x.down[n], f)
		}
	}
	bySeq := func(a, b int) int { return cmp.Compare(h.Writes[a].Seq, h.Writes[b].Seq) }
	for node, ws := range x.byNode {
		slices.SortStableFunc(ws, bySeq)
		for k, i := range ws {
			x.visible[i] = deadline(h.Writes[i].Done, o.PublishWithin, func(from, to int64) (int64, bool) { return x.downUntil(node, from, to) })
			if k+1 < len(ws) {
				x.visible[i] = min(x.visible[i], h.Writes[ws[k+1]].Start)
			}
		}
		x.walk(node, ws)
	}
	for _, ws := range x.entryWrites {
		slices.SortStableFunc(ws, bySeq)
	}
	slices.SortStableFunc(x.all, func(a, b *instance) int {
		return cmp.Or(cmp.Compare(h.Writes[a.first()].Start, h.Writes[b.first()].Start), cmp.Compare(a.node, b.node))
	})
	byRequest := map[leaseKey]*instance{} // (node, request id) → the lease it made
	for _, in := range x.all {
		if len(in.puts) > 0 {
			if r := h.Writes[in.puts[0]].Lease.RequestID; r != "" {
				byRequest[leaseKey{in.node, r}] = in
			}
		}
	}
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Kind == OpClaim && o.Outcome == Unknown && o.RequestID != "" {
			if in := byRequest[leaseKey{o.Node, o.RequestID}]; in != nil {
				in.unknown = append(in.unknown, i)
			}
		}
		if o.Outcome != OK {
			continue
		}
		switch o.Kind {
		case OpClaim:
			in := x.instanceAt(claimKey(o), o.Return)
			if in == nil {
				x.missing = append(x.missing, i)
				continue
			}
			in.claims = append(in.claims, i)
		case OpRelease:
			if in := x.instanceAt(opLeaseKey(o), o.Return); in != nil {
				in.releases = append(in.releases, i)
			}
		}
	}
	return x
}

// walk cuts one node's lease writes into instances.
func (x *index) walk(node string, ws []int) {
	h := x.h
	open := map[string]*instance{}
	for _, i := range ws {
		w := &h.Writes[i]
		switch w.Kind {
		case WritePut:
			l := &w.Lease
			in := open[l.ID]
			if in == nil {
				in = &instance{node: node, id: l.ID, token: l.Token, gpus: l.GPUs, end: -1, commit: -1}
				open[l.ID] = in
				x.add(in)
			}
			in.puts = append(in.puts, i)
			if in.commit < 0 && l.ReservedUntil.IsZero() {
				in.commit = i
			}
		case WriteEnd:
			id := w.Ledger.LeaseID
			in := open[id]
			if in == nil {
				in = &instance{node: node, id: id, gpus: w.Ledger.GPUs, commit: -1}
				x.add(in)
			}
			in.end = i
			in.reservedAtEnd = len(in.puts) > 0 && in.commit < 0
			delete(open, id)
		}
	}
}

func (x *index) add(in *instance) {
	k := leaseKey{in.node, in.id}
	x.leases[k] = append(x.leases[k], in)
	x.all = append(x.all, in)
}

// instanceAt is the life of lease k that an op returning at t is about:
// the latest one written before t (the first one when none was).
func (x *index) instanceAt(k leaseKey, t int64) *instance {
	ins := x.leases[k]
	if len(ins) == 0 {
		return nil
	}
	best := ins[0]
	for _, in := range ins[1:] {
		if x.h.Writes[in.first()].Start <= t {
			best = in
		}
	}
	return best
}

// claimKey is the lease an OK claim returned.
func claimKey(o *Op) leaseKey {
	if o.Lease != nil {
		return keyOf(o.Lease.ID, o.Lease.Node, o.Node)
	}
	return opLeaseKey(o)
}

// opLeaseKey is the lease a release or extend names (or a claim got).
func opLeaseKey(o *Op) leaseKey { return keyOf(o.LeaseID, "", o.Node) }

// keyOf names lease id on its node: the node its id names (ids are
// node-token), else node, else the op's node.
func keyOf(id, node, opNode string) leaseKey {
	if n, ok := lease.NodeOfID(id); ok {
		return leaseKey{n, id}
	}
	if node == "" {
		node = opNode
	}
	return leaseKey{node, id}
}

// downUntil says whether node was killed or paused at some time in
// [from, to], and when the last such fault healed.
func (x *index) downUntil(node string, from, to int64) (int64, bool) {
	var healed int64
	found := false
	for _, f := range x.down[node] {
		if f.Start <= to && f.Healed >= from {
			healed, found = max(healed, f.Healed), true
		}
	}
	return healed, found
}

// cutOff says whether node could not reach other at some time in
// [from, to] — one of them killed or paused, or a partition between them
// — and when the last such fault healed.
func (x *index) cutOff(node, other string, from, to int64) (int64, bool) {
	healed, found := x.downUntil(node, from, to)
	if node == other {
		return healed, found
	}
	if t, ok := x.downUntil(other, from, to); ok {
		healed, found = max(healed, t), true
	}
	for i := range x.h.Faults {
		f := &x.h.Faults[i]
		if f.Kind != FaultPartition || f.Start > to || f.Healed < from {
			continue
		}
		if slices.Contains(f.Nodes, node) != slices.Contains(f.Nodes, other) {
			healed, found = max(healed, f.Healed), true
		}
	}
	return healed, found
}
