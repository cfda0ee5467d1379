package nemesis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/queue"
)

// parentOf is the job array a queue entry id is a task of, or the id
// itself.
func parentOf(id string) string {
	if arr, _, ok := job.ArrayTaskOf(id); ok {
		return arr
	}
	return id
}

// firstEntry is the entry as its origin first wrote it.
func firstEntry(x *index, id string) (queue.QueueEntry, bool) {
	for _, w := range x.entryWrites[id] {
		if x.h.Writes[w].Kind == WritePutEntry {
			return x.h.Writes[w].Entry, true
		}
	}
	return queue.QueueEntry{}, false
}

// held is when a lease surely held its GPUs: from its grant's return to
// its end's call (the end of the run while it lives), cut short where its
// node went down (its origin may then count the task lost and make
// another).
func held(x *index, in *instance) (from, to int64) {
	h := x.h
	from, to = h.Writes[in.puts[0]].Done, h.End
	if in.end >= 0 {
		to = h.Writes[in.end].Start
	}
	for _, f := range x.down[in.node] {
		if f.Start >= from && f.Start < to {
			to = f.Start
		}
	}
	return from, to
}

// partsOf are the committed leases that ran entry id: its own, or, for a
// job array, its tasks'.
func partsOf(x *index) map[string][]*instance {
	out := map[string][]*instance{}
	for _, in := range x.all {
		l, ok := grantOf(x.h, in)
		if !ok || l.Entry == "" || in.reservedAtEnd {
			continue
		}
		id := entryOf(l.Entry)
		out[id] = append(out[id], in)
		if p := parentOf(id); p != id {
			out[p] = append(out[p], in)
		}
	}
	return out
}

// checkArrays checks every acknowledged job array: none of its tasks is
// lost (the array not cancelled and gone at its origin at the end, every
// index ran), and never more than its throttle of its tasks held leases
// at once.
func checkArrays(x *index) []Violation {
	h := x.h
	runs := partsOf(x)
	cancelled := map[string]bool{}
	for i := range h.Ops {
		if o := &h.Ops[i]; o.Kind == OpCancel && o.Outcome != Refused {
			cancelled[parentOf(o.EntryID)] = true
		}
	}
	var out []Violation
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Kind != OpSubmit || o.Outcome != OK || o.EntryID == "" || o.Array == "" {
			continue
		}
		id := o.EntryID
		arr, err := queue.ParseArray(o.Array)
		if err != nil {
			continue
		}
		origin := o.Node
		if n, ok := queue.OriginOfQueueID(id); ok {
			origin = n
		}
		if final, read := h.FinalEntries[origin]; read && !cancelled[id] && !slices.Contains(final, id) {
			ran := map[int]bool{}
			for _, in := range runs[id] {
				if _, idx, ok := job.ArrayTaskOf(entryOf(h.Writes[in.puts[0]].Lease.Entry)); ok {
					ran[idx] = true
				}
			}
			var lost []int
			for _, idx := range arr.Indices() {
				if !ran[idx] {
					lost = append(lost, idx)
				}
			}
			if len(lost) > 0 {
				out = append(out, Violation{Check: CheckArrayLost, Subject: "array " + id,
					What:    fmt.Sprintf("array %s (%s, acknowledged to client %d, never cancelled) is gone from %s at the end, but tasks %v never ran", id, o.Array, o.Client, origin, lost),
					History: []string{opLine(h, i)}})
			}
		}
		if arr.Throttle > 0 {
			if v, ok := throttleBroken(x, id, arr.Throttle, runs[id]); ok {
				v.History = append([]string{opLine(h, i)}, v.History...)
				out = append(out, v)
			}
		}
	}
	return out
}

// throttleBroken finds the first moment more than throttle of an array's
// task leases surely held their GPUs at once.
func throttleBroken(x *index, id string, throttle int, tasks []*instance) (Violation, bool) {
	type edge struct {
		at    int64
		up    int
		lease *instance
	}
	var edges []edge
	for _, in := range tasks {
		from, to := held(x, in)
		if from >= to {
			continue
		}
		edges = append(edges, edge{from, 1, in}, edge{to, -1, in})
	}
	// At one instant, ends before starts: touching is not overlapping.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.up, b.up)) })
	var open []*instance
	for _, e := range edges {
		if e.up < 0 {
			open = slices.DeleteFunc(open, func(in *instance) bool { return in == e.lease })
			continue
		}
		open = append(open, e.lease)
		if len(open) > throttle {
			v := Violation{Check: CheckArrayThrottle, Subject: "array " + id,
				What: fmt.Sprintf("%d tasks of array %s held leases at once at %s ms; its throttle is %d", len(open), id, ms(e.at), throttle)}
			for _, in := range open {
				v.History = append(v.History, writeLine(x.h, in.puts[0]))
			}
			return v, true
		}
	}
	return Violation{}, false
}

// checkDependencies checks that no run waiting for others (--after,
// --after-any) started before every part of each (every lease of every
// attempt, rank and task) ended — or, once it was cancelled, every part
// that started after the cancel — nor, for --after, when the one it waited
// for was cancelled before it started or never ran at all.
func checkDependencies(x *index) []Violation {
	h := x.h
	runs := partsOf(x)
	// cancelledAt: each entry's first OK cancel; tried: its first cancel
	// not refused (it may have taken effect).
	cancelledAt, tried := map[string]int{}, map[string]int{}
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Kind != OpCancel || o.Outcome == Refused {
			continue
		}
		if _, seen := tried[o.EntryID]; !seen {
			tried[o.EntryID] = i
		}
		if _, seen := cancelledAt[o.EntryID]; !seen && o.Outcome == OK {
			cancelledAt[o.EntryID] = i
		}
	}
	ids := make([]string, 0, len(x.entryWrites))
	for id := range x.entryWrites {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []Violation
	for _, id := range ids {
		e, ok := firstEntry(x, id)
		if !ok || len(e.After) == 0 || len(runs[id]) == 0 {
			continue
		}
		first := runs[id][0]
		for _, in := range runs[id] {
			if h.Writes[in.puts[0]].Done < h.Writes[first.puts[0]].Done {
				first = in
			}
		}
		started := h.Writes[first.puts[0]].Done
		for _, d := range e.After {
			if v, ok := depBroken(x, id, d, started, first, runs[d.ID], cancelledAt, tried); ok {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

// depBroken judges one dependency of a run that started at started.
func depBroken(x *index, id string, d queue.Dep, started int64, first *instance, parts []*instance, cancelledAt, tried map[string]int) (Violation, bool) {
	h := x.h
	v := Violation{Check: CheckDependency, Subject: "entry " + id}
	// A cancel ends a run at once for those waiting on it (docs/queue.md),
	// while its sessions still get the preemption grace to stop: a part
	// still running then is not a part that had yet to end — nor is one
	// whose start was in flight then (its origin had let a scheduler start
	// that attempt before the cancel), which lands after the cancel and is
	// stopped the same way.
	cancelledBefore := false
	var cancelCall int64
	if c, ok := tried[d.ID]; ok && h.Ops[c].Call < started {
		cancelledBefore, cancelCall = true, h.Ops[c].Call
	}
	for _, p := range parts {
		before := cancelledBefore && (h.Writes[p.puts[0]].Done < cancelCall || placedBefore(x, p, cancelCall))
		if (p.end < 0 || h.Writes[p.end].Start >= started) && !before {
			v.What = fmt.Sprintf("%s (%s) started at %s ms before %s of %s ended", id, d, ms(started), p.id, d.ID)
			v.History = []string{writeLine(h, p.puts[0])}
			if p.end >= 0 {
				v.History = append(v.History, writeLine(h, p.end))
			}
			v.History = append(v.History, writeLine(h, first.puts[0]))
			return v, true
		}
	}
	if d.Any {
		return Violation{}, false
	}
	// A cancel counts if it came while a part still held its GPUs (or
	// before any ran): one after they all ended found it finished.
	var lastEnd int64 = -1
	for _, p := range parts {
		if p.end < 0 {
			lastEnd = Never
			break
		}
		lastEnd = max(lastEnd, h.Writes[p.end].Start)
	}
	if c, ok := cancelledAt[d.ID]; ok && h.Ops[c].Return < h.Writes[first.puts[0]].Start && (len(parts) == 0 || h.Ops[c].Call < lastEnd) {
		v.What = fmt.Sprintf("%s (%s) started at %s ms though %s was cancelled before", id, d, ms(started), d.ID)
		v.History = []string{opLine(h, c), writeLine(h, first.puts[0])}
		return v, true
	}
	if len(parts) == 0 {
		v.What = fmt.Sprintf("%s (%s) started at %s ms though %s never ran", id, d, ms(started), d.ID)
		v.History = []string{writeLine(h, first.puts[0])}
		return v, true
	}
	return Violation{}, false
}

// placedBefore reports whether the attempt p is a part of was let start
// (its origin durably wrote a placer for that attempt) before at: a start
// already in flight then.
func placedBefore(x *index, p *instance, at int64) bool {
	l, ok := grantOf(x.h, p)
	if !ok {
		return false
	}
	for _, i := range x.entryWrites[entryOf(l.Entry)] {
		w := &x.h.Writes[i]
		if w.Kind == WritePutEntry && w.Entry.Placer != "" && w.Entry.Key() == l.Entry && w.Done < at {
			return true
		}
	}
	return false
}
