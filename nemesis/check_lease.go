package nemesis

import (
	"cmp"
	"fmt"
	"slices"
)

// checkAcked finds acknowledged leases that were lost: an OK claim whose
// lease its node never wrote, or wrote only after answering; and a lease
// durable when its node was killed that a read after the restart no longer
// shows, though no end of it was written. The per-GPU model sees most of
// these as a read that does not fit; this check names the lease.
func checkAcked(x *index) []Violation {
	h := x.h
	var out []Violation
	for _, i := range x.missing {
		o := &h.Ops[i]
		k := claimKey(o)
		v := Violation{Check: CheckAckedLease, Subject: "lease " + k.id,
			What:    fmt.Sprintf("client %d was told it holds %s but %s never wrote it", o.Client, k.id, k.node),
			History: []string{opLine(h, i)}}
		v.History = append(v.History, nodeWrites(x, k.node, o.Call, o.Return, 10)...)
		out = append(out, v)
	}
	for _, in := range x.all {
		if len(in.puts) == 0 {
			continue
		}
		put := &h.Writes[in.puts[0]]
		for _, c := range in.claims {
			if o := &h.Ops[c]; o.Return < put.Start {
				out = append(out, Violation{Check: CheckAckedLease, Subject: "lease " + in.id,
					What:    fmt.Sprintf("client %d was told it holds %s before %s began to write it", o.Client, in.id, in.node),
					History: []string{opLine(h, c), writeLine(h, in.puts[0])}})
			}
		}
	}
	return append(out, checkRestarts(x)...)
}

// checkRestarts checks that every lease durable when its node was killed
// is still held after the restart, as reads of that node show, until an
// end of it is written.
func checkRestarts(x *index) []Violation {
	h := x.h
	reads := map[string][]int{} // node → its OK reads answered by itself, by call
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Kind == OpRead && o.Outcome == OK && (o.Via == "" || o.Via == o.Node) {
			reads[o.Node] = append(reads[o.Node], i)
		}
	}
	for _, rs := range reads {
		slices.SortStableFunc(rs, func(a, b int) int { return cmp.Compare(h.Ops[a].Call, h.Ops[b].Call) })
	}
	reported := map[*instance]bool{}
	var out []Violation
	for fi := range h.Faults {
		f := &h.Faults[fi]
		if !agentDown(f.Kind) {
			continue
		}
		for _, node := range f.Nodes {
			for _, in := range x.all {
				if in.node != node || reported[in] || len(in.puts) == 0 || h.Writes[in.puts[0]].Done > f.Start {
					continue
				}
				until := Never
				if in.end >= 0 {
					if until = h.Writes[in.end].Start; until < f.Start {
						continue
					}
				}
				if v, ok := lostInRestart(x, in, f, reads[node], until); ok {
					out = append(out, v)
					reported[in] = true
				}
			}
		}
	}
	return out
}

// lostInRestart looks for a read of in's node after the restart f ended,
// and before in's end was written, that does not show in on its GPUs.
func lostInRestart(x *index, in *instance, f *Fault, reads []int, until int64) (Violation, bool) {
	h := x.h
	from, _ := slices.BinarySearchFunc(reads, f.Healed, func(i int, t int64) int { return cmp.Compare(h.Ops[i].Call, t) })
	for _, r := range reads[from:] {
		o := &h.Ops[r]
		if o.Call >= until {
			break
		}
		if o.Return >= until {
			continue
		}
		for _, g := range in.gpus {
			seen, ok := o.Holders[g]
			if !ok || seen == in.id {
				continue
			}
			what := "free"
			if seen != "" {
				what = "held by " + seen
			}
			acked := "written"
			if len(in.claims) > 0 {
				acked = fmt.Sprintf("acknowledged to client %d", h.Ops[in.claims[0]].Client)
			}
			v := Violation{Check: CheckAckedLease, Subject: "lease " + in.id,
				What: fmt.Sprintf("%s (%s) held GPUs %v when %s was killed at %s ms; after the restart at %s ms a read saw GPU %d %s, and no end of %s was written before it",
					in.id, acked, in.gpus, in.node, ms(f.Start), ms(f.Healed), g, what, in.id)}
			for _, c := range in.claims {
				v.History = append(v.History, opLine(h, c))
			}
			v.History = append(v.History, writeLine(h, in.puts[0]), faultLine(f), opLine(h, r))
			if in.end >= 0 {
				v.History = append(v.History, writeLine(h, in.end))
			}
			return v, true
		}
	}
	return Violation{}, false
}

// nodeWrites prints a node's lease writes that overlap [from, to], at
// most n of them.
func nodeWrites(x *index, node string, from, to int64, n int) []string {
	var out []string
	for _, i := range x.byNode[node] {
		w := &x.h.Writes[i]
		if w.Done >= from && w.Start <= to {
			out = append(out, writeLine(x.h, i))
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// checkTokens checks that each node's grants carry growing fencing tokens,
// across its restarts: a node that reissued a token would let a stale
// holder's writes pass the fence.
func checkTokens(x *index) []Violation {
	h := x.h
	grants := map[int]*instance{}
	for _, in := range x.all {
		if len(in.puts) > 0 {
			grants[in.puts[0]] = in
		}
	}
	nodes := make([]string, 0, len(x.byNode))
	for n := range x.byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	var out []Violation
	for _, node := range nodes {
		top := -1
		var first *Violation
		later := 0
		for _, i := range x.byNode[node] {
			in := grants[i]
			if in == nil {
				continue
			}
			if top >= 0 && in.token <= h.Writes[top].Lease.Token && first != nil {
				later++
				continue
			}
			if top >= 0 && in.token <= h.Writes[top].Lease.Token {
				prev := &h.Writes[top].Lease
				v := Violation{Check: CheckTokens, Subject: node,
					What:    fmt.Sprintf("%s granted %s with token %d after %s with token %d: tokens must grow, restarts included", node, in.id, in.token, prev.ID, prev.Token),
					History: []string{writeLine(h, top)}}
				for fi := range h.Faults {
					f := &h.Faults[fi]
					if agentDown(f.Kind) && slices.Contains(f.Nodes, node) && f.Start <= h.Writes[i].Start && f.Healed >= h.Writes[top].Done {
						v.History = append(v.History, faultLine(f))
					}
				}
				v.History = append(v.History, writeLine(h, i))
				first = &v
				continue
			}
			top = i
		}
		if first != nil {
			if later > 0 {
				first.What += fmt.Sprintf(" (and %d later grants of %s not above the highest token either)", later, node)
			}
			out = append(out, *first)
		}
	}
	return out
}
