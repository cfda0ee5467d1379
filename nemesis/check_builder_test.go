package nemesis

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// at is a history time from milliseconds since the start.
func at(msec float64) int64 { return int64(msec * float64(time.Millisecond)) }

// builder makes histories by hand for tests: each call records what a
// client or a node did, with the times given in milliseconds.
type builder struct {
	h   History
	seq map[string]int
}

func newBuilder() *builder {
	return &builder{seq: map[string]int{}, h: History{
		GPUs:  map[string]int{"n1": 2, "n2": 2, "n3": 2},
		Sched: queue.SchedConfig{ReservationTTL: 30 * time.Second, LostAfter: 30 * time.Second, PreemptGrace: 10 * time.Second},
	}}
}

// history ends the run at end ms.
func (b *builder) history(end float64) *History {
	b.h.End = at(end)
	return &b.h
}

func (b *builder) write(w Write, start, done float64) int {
	b.seq[w.Node]++
	w.Seq, w.Start, w.Done = b.seq[w.Node], at(start), at(done)
	b.h.Writes = append(b.h.Writes, w)
	return len(b.h.Writes) - 1
}

// put writes a grant or an update of lease id (node-token) on node.
func (b *builder) put(l lease.Lease, start, done float64) int {
	if l.ID == "" {
		l.ID = lease.LeaseID(l.Node, l.Token)
	}
	return b.write(Write{Node: l.Node, Kind: WritePut, Lease: l}, start, done)
}

// end writes the end of lease id on its node.
func (b *builder) end(id string, gpus []int, reason lease.EndReason, start, done float64) int {
	node, _ := lease.NodeOfID(id)
	return b.write(Write{Node: node, Kind: WriteEnd, Ledger: lease.LedgerEntry{LeaseID: id, Node: node, GPUs: gpus, Reason: string(reason)}}, start, done)
}

func (b *builder) op(o Op, call, ret float64) int {
	o.Call = at(call)
	if ret < 0 {
		o.Return = Never
	} else {
		o.Return = at(ret)
	}
	if o.Via == "" {
		o.Via = o.Node
	}
	b.h.Ops = append(b.h.Ops, o)
	return len(b.h.Ops) - 1
}

// claim records client's OK claim of gpus on node, granted lease token,
// and the node's put of it in the middle of the call.
func (b *builder) claim(client int, node string, gpus []int, token uint64, call, ret float64) lease.Lease {
	l := lease.Lease{ID: lease.LeaseID(node, token), Node: node, GPUs: gpus, Token: token}
	mid := (call + ret) / 2
	b.put(l, mid-0.1, mid+0.1)
	b.op(Op{Client: client, Kind: OpClaim, Node: node, GPUs: gpus, LeaseID: l.ID, Lease: &l, Outcome: OK}, call, ret)
	return l
}

// release records client's OK release of l and the node's end of it in
// the middle of the call.
func (b *builder) release(client int, l lease.Lease, call, ret float64) {
	mid := (call + ret) / 2
	b.end(l.ID, l.GPUs, lease.EndReleased, mid-0.1, mid+0.1)
	b.op(Op{Client: client, Kind: OpRelease, Node: l.Node, LeaseID: l.ID, Outcome: OK}, call, ret)
}

// read records client's OK read of node's board.
func (b *builder) read(client int, node string, holders map[int]string, call, ret float64) int {
	return b.op(Op{Client: client, Kind: OpRead, Node: node, Holders: holders, Outcome: OK}, call, ret)
}

// fault records a fault on nodes from start to healed.
func (b *builder) fault(kind FaultKind, nodes []string, start, healed float64) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: kind, Nodes: nodes, Start: at(start), Healed: at(healed)})
}

// entry writes queue entry e at its origin.
func (b *builder) entry(e queue.QueueEntry, start, done float64) int {
	return b.write(Write{Node: e.Origin, Kind: WritePutEntry, Entry: e}, start, done)
}

// deleteEntry writes the deletion of entry id at origin.
func (b *builder) deleteEntry(origin, id string, start, done float64) int {
	return b.write(Write{Node: origin, Kind: WriteDeleteEntry, EntryID: id}, start, done)
}

// rank is a gang rank's lease, reserved (committed later by commit).
func rank(node string, token uint64, gpus []int, key string, r int) lease.Lease {
	return lease.Lease{ID: lease.LeaseID(node, token), Node: node, Token: token, GPUs: gpus, Entry: key, Gang: "g-" + key, Rank: r,
		ReservedUntil: time.Unix(1e9, 0)}
}

// commit is l committed.
func commit(l lease.Lease) lease.Lease {
	l.ReservedUntil = time.Time{}
	return l
}
