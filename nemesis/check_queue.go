package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// entryOf is the queue entry id an attempt key (QueueEntry.Key) names.
func entryOf(key string) string {
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		return key[:i]
	}
	return key
}

// grantOf is the lease as granted (its first put).
func grantOf(h *History, in *instance) (lease.Lease, bool) {
	if len(in.puts) == 0 {
		return lease.Lease{}, false
	}
	return h.Writes[in.puts[0]].Lease, true
}

// checkQueue finds queue entries lost: an OK submission its origin never
// wrote; an entry written and never deleted that is not among its origin's
// entries at the end (History.FinalEntries); an entry deleted that is
// there again; an entry deleted though it never ran and nobody cancelled
// it.
func checkQueue(x *index) []Violation {
	h := x.h
	var out []Violation
	acked := map[string]int{} // entry id → its OK submit
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Kind != OpSubmit || o.Outcome != OK || o.EntryID == "" {
			continue
		}
		acked[o.EntryID] = i
		origin := o.Node
		if n, ok := queue.OriginOfQueueID(o.EntryID); ok {
			origin = n
		}
		if !slices.ContainsFunc(x.entryWrites[o.EntryID], func(w int) bool {
			return h.Writes[w].Kind == WritePutEntry && h.Writes[w].Node == origin
		}) {
			out = append(out, Violation{Check: CheckQueueLost, Subject: "entry " + o.EntryID,
				What:    fmt.Sprintf("client %d was told %s is queued but %s never wrote it", o.Client, o.EntryID, origin),
				History: []string{opLine(h, i)}})
		}
	}
	ran := map[string]bool{}
	for _, in := range x.all {
		if l, ok := grantOf(h, in); ok && l.Entry != "" {
			ran[entryOf(l.Entry)] = true
			ran[parentOf(entryOf(l.Entry))] = true // an array ran when a task did
		}
	}
	cancelled := map[string]int{}
	for i := range h.Ops {
		if o := &h.Ops[i]; o.Kind == OpCancel && o.Outcome != Refused {
			cancelled[o.EntryID] = i
		}
	}
	// A task of a cancelled array is cancelled with it.
	for id := range x.entryWrites {
		if p := parentOf(id); p != id {
			if i, ok := cancelled[p]; ok {
				if _, own := cancelled[id]; !own {
					cancelled[id] = i
				}
			}
		}
	}
	ids := make([]string, 0, len(x.entryWrites))
	for id := range x.entryWrites {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if v, ok := entryFate(x, id, acked, ran, cancelled); ok {
			out = append(out, v)
		}
	}
	return out
}

// entryFate checks what became of one entry its origin wrote.
func entryFate(x *index, id string, acked map[string]int, ran map[string]bool, cancelled map[string]int) (Violation, bool) {
	h := x.h
	ws := x.entryWrites[id]
	last := ws[len(ws)-1]
	deleted := h.Writes[last].Kind == WriteDeleteEntry
	origin := h.Writes[last].Node
	hist := func() []string {
		var lines []string
		if i, ok := acked[id]; ok {
			lines = append(lines, opLine(h, i))
		}
		from := max(0, len(ws)-maxLines/2)
		for _, w := range ws[from:] {
			lines = append(lines, writeLine(h, w))
		}
		if i, ok := cancelled[id]; ok {
			lines = append(lines, opLine(h, i))
		}
		return lines
	}
	who := "written"
	if i, ok := acked[id]; ok {
		who = fmt.Sprintf("acknowledged to client %d", h.Ops[i].Client)
	}
	if final, read := h.FinalEntries[origin]; read {
		present := slices.Contains(final, id)
		if arr, _, ok := job.ArrayTaskOf(id); ok && !present && !deleted && slices.Contains(final, arr) {
			// `dibs queue` folds an array's tasks into its row: while the
			// array is there, its tasks are accounted for by it (and
			// array-task-lost checks every index once the array is gone).
			present = true
		}
		switch {
		case !deleted && !present:
			return Violation{Check: CheckQueueLost, Subject: "entry " + id,
				What:    fmt.Sprintf("%s (%s) was never deleted, but %s no longer has it at the end", id, who, origin),
				History: hist()}, true
		case deleted && present:
			return Violation{Check: CheckQueueLost, Subject: "entry " + id,
				What:    fmt.Sprintf("%s was deleted at %s ms, but %s has it again at the end", id, ms(h.Writes[last].Done), origin),
				History: hist()}, true
		}
	}
	_, wasCancelled := cancelled[id]
	if deleted && !ran[id] && !wasCancelled && !waitsToSucceed(x, id) {
		return Violation{Check: CheckQueueLost, Subject: "entry " + id,
			What:    fmt.Sprintf("%s (%s) was deleted though no lease ever ran it and no client cancelled it (only a node refusing it for good may drop it: see that agent's log)", id, who),
			History: hist()}, true
	}
	return Violation{}, false
}

// rankKey names one rank of one attempt of a queue entry.
type rankKey struct {
	entry string
	rank  int
}

// checkRunTwice checks that no attempt of a queue entry runs twice: of
// the leases of one (attempt, rank), every one but the last ended as an
// uncommitted gang reservation — a placement that failed (expired, or
// given back by the scheduler when another rank could not be reserved);
// the scheduler may then place the same attempt again. Such a reservation
// may still stand when the next placement is granted: a node that made it
// durable as it went away (stopping, cut off) could not answer, so the
// scheduler placed the rank elsewhere, and the orphan expired unused —
// nothing ran in it, and nothing can commit it (a commit names its lease).
// A node refuses an attempt that ran there (committed) to ever run again,
// and a requeued entry runs under the next attempt's key, so any other
// second lease is the entry run twice.
func checkRunTwice(x *index) []Violation {
	h := x.h
	groups := map[rankKey][]*instance{}
	var keys []rankKey
	for _, in := range x.all {
		l, ok := grantOf(h, in)
		if !ok || l.Entry == "" {
			continue
		}
		k := rankKey{l.Entry, l.Rank}
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], in)
	}
	var out []Violation
	for _, k := range keys {
		g := groups[k]
		slices.SortStableFunc(g, func(a, b *instance) int {
			return cmp.Compare(h.Writes[a.puts[0]].Start, h.Writes[b.puts[0]].Start)
		})
	pairs:
		for j := 1; j < len(g); j++ {
			b := g[j]
			granted := h.Writes[b.puts[0]].Done
			for _, a := range g[:j] {
				if a.end >= 0 && a.reservedAtEnd {
					continue // nothing ran in it, whenever it ended
				}
				what := fmt.Sprintf("attempt %s rank %d was granted twice: %s on %s, then %s on %s", k.entry, k.rank, a.id, a.node, b.id, b.node)
				switch {
				case a.end < 0 || h.Writes[a.end].Start > granted:
					what += fmt.Sprintf(" while %s still held its GPUs", a.id)
				default:
					what += fmt.Sprintf(" after %s ran (it ended %s)", a.id, h.Writes[a.end].Ledger.Reason)
				}
				v := Violation{Check: CheckRunTwice, Subject: "entry " + k.entry, What: what}
				if p := parentOf(entryOf(k.entry)); p != entryOf(k.entry) {
					v.Check, v.Subject = CheckArrayTwice, "array task "+entryOf(k.entry)
				}
				v.History = append(v.History, writeLine(h, a.puts[0]))
				if a.commit >= 0 && a.commit != a.puts[0] {
					v.History = append(v.History, writeLine(h, a.commit))
				}
				if a.end >= 0 {
					v.History = append(v.History, writeLine(h, a.end))
				}
				v.History = append(v.History, writeLine(h, b.puts[0]))
				out = append(out, v)
				break pairs
			}
		}
	}
	return out
}

// waitsToSucceed reports whether an entry (or the array it is a task of)
// waits for another to succeed (--after): its origin ends it unrun when
// that one did not.
func waitsToSucceed(x *index, id string) bool {
	for _, e := range []string{id, parentOf(id)} {
		if q, ok := firstEntry(x, e); ok && slices.ContainsFunc(q.After, func(d queue.Dep) bool { return !d.Any }) {
			return true
		}
	}
	return false
}
