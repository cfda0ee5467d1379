package nemesis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"
	"github.com/dibs-gpu/dibs/base/refusal"
)

// gpuKey names one GPU of one node: the unit the lease model is checked on.
type gpuKey struct {
	node string
	gpu  int
}

func (k gpuKey) String() string { return fmt.Sprintf("%s GPU %d", k.node, k.gpu) }

// gop is one operation on one GPU as the model checks it, with where it
// came from.
type gop struct {
	in        modelInput
	call, ret int64
	client    int
	// op and write are the client operation and the durable write it was
	// made from (-1: none); more are further client operations about it
	// (a retried claim that got the same lease).
	op, write int
	more      []int
}

// gpuResult is what the per-GPU check found.
type gpuResult struct {
	gpus, chunks, undecided, readsSkipped int
	violations                            []Violation
}

// gpuBuilder turns a history into each GPU's operations.
type gpuBuilder struct {
	x     *index
	parts map[gpuKey][]gop
	// nodeClient numbers each node's writes as one more porcupine client,
	// after the real clients.
	nodeClient map[string]int
	skipped    int
}

// buildGPUOps is every GPU's operations. The node's own writes are the
// linearization points of its grants and ends: a change takes effect no
// sooner than the write's start, and no later than it is visible to
// readers (index.visible) or an OK answer about it returns.
func buildGPUOps(x *index) (map[gpuKey][]gop, int) {
	h := x.h
	b := &gpuBuilder{x: x, parts: map[gpuKey][]gop{}, nodeClient: map[string]int{}}
	base := 0
	for i := range h.Ops {
		base = max(base, h.Ops[i].Client+1)
	}
	nodes := make([]string, 0, len(x.byNode))
	for n := range x.byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for i, n := range nodes {
		b.nodeClient[n] = base + i
	}
	for _, in := range x.all {
		b.instance(in)
	}
	missing := map[leaseKey][]int{}
	for _, i := range x.missing {
		o := &h.Ops[i]
		if o.Lease == nil {
			continue
		}
		k := claimKey(o)
		missing[k] = o.Lease.GPUs
		b.add(k.node, o.Lease.GPUs, gop{in: modelInput{Step: stepAcquire, ID: k.id, Token: o.Lease.Token}, call: o.Call, ret: o.Return, client: o.Client, op: i, write: -1})
	}
	for i := range h.Ops {
		b.clientOp(i, missing)
	}
	return b.parts, b.skipped
}

func (b *gpuBuilder) add(node string, gpus []int, g gop) {
	g.ret = max(g.ret, g.call) // writes recorded out of order must not turn time back
	for _, gpu := range gpus {
		k := gpuKey{node, gpu}
		b.parts[k] = append(b.parts[k], g)
	}
}

// instance adds one lease life: its grant, its updates, its end.
func (b *gpuBuilder) instance(in *instance) {
	h := b.x.h
	client := b.nodeClient[in.node]
	if len(in.puts) > 0 {
		p := in.puts[0]
		w := &h.Writes[p]
		g := gop{in: modelInput{Step: stepAcquire, ID: in.id, Token: in.token}, call: w.Start, ret: b.x.visible[p], client: client, op: -1, write: p}
		for _, c := range in.claims {
			o := &h.Ops[c]
			if o.Return < w.Start {
				continue // acknowledged before written: checkAcked says so
			}
			g.ret = min(g.ret, o.Return)
			if g.op < 0 {
				g.op = c
			} else {
				g.more = append(g.more, c)
			}
		}
		g.more = append(g.more, in.unknown...)
		b.add(in.node, in.gpus, g)
		for _, p := range in.puts[1:] {
			w := &h.Writes[p]
			b.add(in.node, in.gpus, gop{in: modelInput{Step: stepHeld, ID: in.id}, call: w.Start, ret: b.x.visible[p], client: client, op: -1, write: p})
		}
	}
	switch {
	case in.end >= 0:
		w := &h.Writes[in.end]
		g := gop{in: modelInput{Step: stepRelease, ID: in.id}, call: w.Start, ret: b.x.visible[in.end], client: client, op: -1, write: in.end}
		for _, r := range in.releases {
			if o := &h.Ops[r]; o.Return >= w.Start && o.Return < g.ret {
				g.ret, g.op = o.Return, r
			}
		}
		b.add(in.node, w.Ledger.GPUs, g)
	case len(in.releases) > 0:
		// Released as far as the client knows, though no end was written.
		o := &h.Ops[in.releases[0]]
		b.add(in.node, in.gpus, gop{in: modelInput{Step: stepRelease, ID: in.id}, call: o.Call, ret: o.Return, client: o.Client, op: in.releases[0], write: -1})
	}
}

// clientOp adds what a client's extend, refused release or read says
// about the GPUs.
func (b *gpuBuilder) clientOp(i int, missing map[leaseKey][]int) {
	h := b.x.h
	o := &h.Ops[i]
	g := gop{call: o.Call, ret: o.Return, client: o.Client, op: i, write: -1}
	switch {
	case o.Kind == OpRead && o.Outcome == OK:
		if o.Via != "" && o.Via != o.Node {
			b.skipped++
			return
		}
		for gpu, id := range o.Holders {
			g.in = modelInput{Step: stepRead, ID: id}
			b.add(o.Node, []int{gpu}, g)
		}
		return
	case o.Kind == OpExtend && o.Outcome == OK:
		g.in = modelInput{Step: stepHeld, ID: o.LeaseID}
	case (o.Kind == OpExtend || o.Kind == OpRelease) && o.Outcome == Refused && o.Code == refusal.CodeNotFound:
		if !ownerSaidNotFound(o) {
			return
		}
		g.in = modelInput{Step: stepNotHeld, ID: o.LeaseID}
	case o.Kind == OpRelease && o.Outcome == OK:
		k := opLeaseKey(o)
		if gpus, ok := missing[k]; ok && b.x.instanceAt(k, o.Return) == nil {
			g.in = modelInput{Step: stepRelease, ID: o.LeaseID}
			b.add(k.node, gpus, g)
		}
		return
	default:
		return
	}
	k := opLeaseKey(o)
	gpus := missing[k]
	if in := b.x.instanceAt(k, o.Return); in != nil {
		gpus = in.gpus
	}
	b.add(k.node, gpus, g)
}

// ownerSaidNotFound reports whether a not-found refusal came from the
// lease's own node, so it says the lease is gone. An agent that does not
// know the node (not joined yet, or reaped as dead) also answers not
// found, with "no node …", which says nothing about the lease; the node's
// own table answers "no lease …".
func ownerSaidNotFound(o *Op) bool {
	k := opLeaseKey(o)
	return o.Via == "" || o.Via == k.node || strings.Contains(o.Err, "no lease ")
}

// chunk is a piece of one GPU's history, cut at a quiescent point: no
// grant or end was open there, and every read open there agrees with the
// state there, so the state there is known and the pieces can be checked
// one by one.
type chunk struct {
	key  gpuKey
	init gpuState
	// initFrom are the grants that explain init: the holder's, and the
	// one with the last token.
	initFrom []gop
	ops      []gop
}

// cutChunks cuts one GPU's operations, sorted by call, into chunks of at
// least minChunk operations.
func cutChunks(key gpuKey, ops []gop, minChunk int) []chunk {
	var out []chunk
	cur := chunk{key: key}
	held := map[string]gop{} // lease id → its grant, for grants not yet ended
	var last gop
	maxMutRet := int64(math.MinInt64)
	start := 0
	var pending []int // non-mutating ops that may still be open
	for i := range ops {
		op := &ops[i]
		switch op.in.Step {
		case stepAcquire:
			held[op.in.ID] = *op
			if op.in.Token >= last.in.Token {
				last = *op
			}
			maxMutRet = max(maxMutRet, op.ret)
		case stepRelease:
			delete(held, op.in.ID)
			maxMutRet = max(maxMutRet, op.ret)
		default:
			pending = append(pending, i)
		}
		if i+1 == len(ops) {
			break
		}
		t := ops[i+1].call
		if len(pending) > 4*minChunk {
			pending = slices.DeleteFunc(pending, func(j int) bool { return ops[j].ret < t })
		}
		if i+1-start < minChunk || maxMutRet >= t {
			continue
		}
		state, from := stateOf(held, last)
		pending = slices.DeleteFunc(pending, func(j int) bool { return ops[j].ret < t })
		if slices.ContainsFunc(pending, func(j int) bool { ok, _ := apply(state, ops[j].in); return !ok }) {
			continue
		}
		// The open reads agree with the state at t: linearize them there
		// and leave them out of both pieces.
		cur.ops = make([]gop, 0, i+1-start-len(pending))
		for j := start; j <= i; j++ {
			if !slices.Contains(pending, j) {
				cur.ops = append(cur.ops, ops[j])
			}
		}
		out = append(out, cur)
		cur = chunk{key: key, init: state, initFrom: from}
		start, pending = i+1, pending[:0]
	}
	cur.ops = ops[start:]
	return append(out, cur)
}

// stateOf is the state after a prefix whose grants and ends all returned:
// the one lease granted and not ended (the latest granted, if the prefix
// wrongly holds more), and the last token.
func stateOf(held map[string]gop, last gop) (gpuState, []gop) {
	s := gpuState{Last: last.in.Token}
	var from []gop
	var holder gop
	for _, g := range held {
		if s.Holder == "" || g.call > holder.call || (g.call == holder.call && g.in.ID > holder.in.ID) {
			s.Holder, holder = g.in.ID, g
		}
	}
	if s.Holder != "" {
		from = append(from, holder)
	}
	if s.Last > 0 && last.in.ID != s.Holder {
		from = append(from, last)
	}
	return s, from
}

// porcupineOps is a chunk's operations as porcupine takes them; Metadata
// is the index in the chunk.
func porcupineOps(ops []gop) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, g := range ops {
		out[i] = porcupine.Operation{ClientId: g.client, Input: g.in, Call: g.call, Return: g.ret, Metadata: i}
	}
	return out
}

// checkGPUs checks every GPU's history against the lease model, chunk by
// chunk, in parallel, and reports the first violation of each GPU with its
// shortest history.
func checkGPUs(x *index, o CheckOptions) gpuResult {
	parts, skipped := buildGPUOps(x)
	keys := make([]gpuKey, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b gpuKey) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.gpu, b.gpu)) })
	var chunks []chunk
	for _, k := range keys {
		ops := parts[k]
		slices.SortStableFunc(ops, func(a, b gop) int { return cmp.Or(cmp.Compare(a.call, b.call), cmp.Compare(a.ret, b.ret)) })
		chunks = append(chunks, cutChunks(k, ops, o.MinChunk)...)
	}
	results := make([]porcupine.CheckResult, len(chunks))
	work := make(chan int)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for i := range work {
				c := &chunks[i]
				results[i] = porcupine.CheckOperationsTimeout(gpuModel(c.init), porcupineOps(c.ops), o.Timeout)
			}
		})
	}
	for i := range chunks {
		work <- i
	}
	close(work)
	wg.Wait()
	r := gpuResult{gpus: len(keys), chunks: len(chunks), readsSkipped: skipped}
	var first *Violation
	var firstKey gpuKey
	later := 0
	flush := func() {
		if first == nil {
			return
		}
		if later > 0 {
			first.What += fmt.Sprintf(" (and %d later pieces of %s's history failed too, not shown: they may follow from this one)", later, firstKey)
		}
		r.violations = append(r.violations, *first)
		first, later = nil, 0
	}
	for i, res := range results {
		c := &chunks[i]
		if first != nil && c.key != firstKey {
			flush()
		}
		switch res {
		case porcupine.Unknown:
			r.undecided++
		case porcupine.Illegal:
			if first != nil {
				later++
				continue
			}
			v := explainChunk(x.h, c, o)
			first, firstKey = &v, c.key
		}
	}
	flush()
	return r
}
