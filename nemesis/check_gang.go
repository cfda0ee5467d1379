package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// gangAttempt is one attempt of a gang: its entry (as its origin last
// wrote it) and the leases granted for each rank.
type gangAttempt struct {
	key    string
	entry  queue.QueueEntry
	known  bool // the entry's write was found
	entryW int  // that write, -1 when not found
	origin string
	nodes  int
	ranks  map[int][]*instance
}

// gangEvent is what breaks a running gang, so its other ranks must stop.
type gangEvent struct {
	at    int64
	what  string
	lines []string
	// self is the lease whose end is the event (it need not stop again).
	self *instance
}

// gangAttempts groups the gang leases by attempt.
func gangAttempts(x *index) []*gangAttempt {
	h := x.h
	by := map[string]*gangAttempt{}
	var out []*gangAttempt
	for _, in := range x.all {
		l, ok := grantOf(h, in)
		if !ok || l.Gang == "" || l.Entry == "" {
			continue
		}
		a := by[l.Entry]
		if a == nil {
			a = &gangAttempt{key: l.Entry, entryW: -1, ranks: map[int][]*instance{}}
			id := entryOf(l.Entry)
			a.origin, _ = queue.OriginOfQueueID(id)
			for _, w := range x.entryWrites[id] {
				if e := &h.Writes[w].Entry; h.Writes[w].Kind == WritePutEntry && e.Key() == l.Entry {
					a.entry, a.known, a.entryW, a.origin = *e, true, w, e.Origin
				}
			}
			by[l.Entry] = a
			out = append(out, a)
		}
		a.ranks[l.Rank] = append(a.ranks[l.Rank], in)
		a.nodes = max(a.nodes, l.Rank+1)
	}
	for _, a := range out {
		if a.known && a.entry.Nodes > a.nodes {
			a.nodes = a.entry.Nodes
		}
	}
	return out
}

// checkGangs checks that gangs run all or nothing:
//   - a reservation is committed or ended within ReservationTTL of being
//     made;
//   - once a gang breaks — a committed rank ends failed (lease.EndReason
//     Failed), a rank's reservation ends uncommitted while another rank is
//     committed, a rank holds nothing when another is committed, or a
//     committed rank's node stays unreachable from the origin (killed,
//     paused, partitioned) for LostAfter — every rank alive then ends within
//     ReservationTTL + LostAfter + PreemptGrace + GangSlack (the origin
//     hears, counts the rank lost, and stops the rest by cooperative
//     preemption, which ends them a PreemptGrace later).
//
// A rank whose node, or the gang's origin, could not be reached in that
// time is judged from when the fault healed. A rank that ends well (exit 0,
// released, its time limit) breaks nothing: dibs lets the other ranks run
// on, as a job's ranks often finish apart.
func checkGangs(x *index, o CheckOptions) []Violation {
	cfg := x.h.Sched.WithDefaults()
	var out []Violation
	for _, a := range gangAttempts(x) {
		out = append(out, checkReservations(x, a, cfg.ReservationTTL+o.GangSlack)...)
		if v, ok := checkGangStop(x, a, cfg, o.GangSlack); ok {
			out = append(out, v)
		}
	}
	return out
}

// deadline is from+bound, moved to a heal+bound for every fault in the
// way (faults that healed late enough to matter), as cut reports them.
func deadline(from int64, bound time.Duration, cut func(from, to int64) (int64, bool)) int64 {
	d := from + int64(bound)
	for range 16 {
		healed, ok := cut(from, d)
		if !ok || healed+int64(bound) <= d {
			return d
		}
		d = healed + int64(bound)
	}
	return d
}

// checkReservations checks each reservation of an attempt is committed or
// ended in time.
func checkReservations(x *index, a *gangAttempt, bound time.Duration) []Violation {
	h := x.h
	var out []Violation
	for r := range a.nodes {
		for _, in := range a.ranks[r] {
			put := &h.Writes[in.puts[0]]
			if put.Lease.ReservedUntil.IsZero() {
				continue
			}
			settled := Never
			if in.commit >= 0 {
				settled = h.Writes[in.commit].Start
			} else if in.end >= 0 {
				settled = h.Writes[in.end].Start
			}
			d := deadline(put.Done, bound, func(from, to int64) (int64, bool) { return x.downUntil(in.node, from, to) })
			if settled <= d || (settled == Never && h.End <= d) {
				continue
			}
			v := Violation{Check: CheckGang, Subject: "gang " + a.key,
				What: fmt.Sprintf("rank %d's reservation %s on %s held its GPUs uncommitted until %s ms, past %s ms (made at %s ms, reservations last %s)",
					r, in.id, in.node, ms(min(settled, h.End)), ms(d), ms(put.Done), h.Sched.WithDefaults().ReservationTTL)}
			v.History = append(v.History, rankLines(x, a, in)...)
			out = append(out, v)
		}
	}
	return out
}

// checkGangStop checks that once the attempt broke, every rank alive then
// ended in time.
func checkGangStop(x *index, a *gangAttempt, cfg queue.SchedConfig, slack time.Duration) (Violation, bool) {
	h := x.h
	ev, ok := firstBreak(x, a, cfg.LostAfter+slack)
	if !ok {
		return Violation{}, false
	}
	bound := cfg.ReservationTTL + cfg.LostAfter + cfg.PreemptGrace + slack
	for r := range a.nodes {
		for _, in := range a.ranks[r] {
			if in == ev.self || h.Writes[in.puts[0]].Start > ev.at {
				continue
			}
			ended := Never
			if in.end >= 0 {
				if ended = h.Writes[in.end].Start; ended <= ev.at {
					continue
				}
			}
			d := deadline(ev.at, bound, func(from, to int64) (int64, bool) { return x.cutOff(in.node, a.origin, from, to) })
			if ended <= d || (ended == Never && h.End <= d) {
				continue
			}
			until := "the end of the run"
			if ended != Never {
				until = ms(ended) + " ms"
			}
			v := Violation{Check: CheckGang, Subject: "gang " + a.key,
				What: fmt.Sprintf("%s at %s ms, but rank %d (%s on %s) held its GPUs until %s, past %s ms (allowed: %s after, or after its node or the origin came back)",
					ev.what, ms(ev.at), r, in.id, in.node, until, ms(d), bound)}
			v.History = append(v.History, ev.lines...)
			v.History = append(v.History, rankLines(x, a, in)...)
			return v, true
		}
	}
	return Violation{}, false
}

// firstBreak finds the first event that breaks a committed gang.
func firstBreak(x *index, a *gangAttempt, lostAfter time.Duration) (gangEvent, bool) {
	evs := gangBreaks(x, a, lostAfter)
	if len(evs) == 0 {
		return gangEvent{}, false
	}
	return slices.MinFunc(evs, func(p, q gangEvent) int { return cmp.Compare(p.at, q.at) }), true
}

// gangBreaks lists every event that breaks a committed gang.
func gangBreaks(x *index, a *gangAttempt, lostAfter time.Duration) []gangEvent {
	h := x.h
	t0 := Never
	var first *instance
	for r := range a.nodes {
		for _, in := range a.ranks[r] {
			if in.commit >= 0 && h.Writes[in.commit].Done < t0 {
				t0, first = h.Writes[in.commit].Done, in
			}
		}
	}
	if first == nil {
		return nil
	}
	var evs []gangEvent
	for r := range a.nodes {
		alive := false
		for _, in := range a.ranks[r] {
			put := &h.Writes[in.puts[0]]
			if put.Start <= t0 && (in.end < 0 || h.Writes[in.end].Done >= t0) {
				alive = true
			}
			evs = append(evs, rankBreaks(x, a, in, t0, lostAfter)...)
		}
		if !alive {
			evs = append(evs, gangEvent{at: t0, what: fmt.Sprintf("rank %d held nothing when %s (rank %d) was committed", r, first.id, h.Writes[first.puts[0]].Lease.Rank),
				lines: []string{writeLine(h, first.commit)}})
		}
	}
	return evs
}

// rankBreaks are the ways one rank's lease breaks its gang.
func rankBreaks(x *index, a *gangAttempt, in *instance, t0 int64, lostAfter time.Duration) []gangEvent {
	h := x.h
	rank := h.Writes[in.puts[0]].Lease.Rank
	var out []gangEvent
	if in.end >= 0 {
		end := &h.Writes[in.end]
		reason := lease.EndReason(end.Ledger.Reason)
		switch {
		case in.commit >= 0 && reason.Failed(interactive(a.entry)):
			out = append(out, gangEvent{at: end.Done, what: fmt.Sprintf("rank %d (%s) ended %s", rank, in.id, reason), lines: []string{writeLine(h, in.end)}, self: in})
		case in.reservedAtEnd && end.Done >= t0:
			out = append(out, gangEvent{at: end.Done, what: fmt.Sprintf("rank %d's reservation %s ended uncommitted (%s) while another rank ran", rank, in.id, reason), lines: []string{writeLine(h, in.end)}, self: in})
		}
	}
	// A rank running (or still reserved when another was committed) on a
	// node the origin cannot reach is counted lost after LostAfter.
	var from int64
	switch put := &h.Writes[in.puts[0]]; {
	case in.commit >= 0:
		from = h.Writes[in.commit].Done
	case put.Start <= t0 && (in.end < 0 || h.Writes[in.end].Done >= t0):
		from = t0
	default:
		return out
	}
	to := Never
	if in.end >= 0 {
		to = h.Writes[in.end].Start
	}
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.Start >= to || f.Healed <= from {
			continue
		}
		cut := (agentDown(f.Kind) || f.Kind == FaultPause) && slices.Contains(f.Nodes, in.node)
		if f.Kind == FaultPartition && slices.Contains(f.Nodes, in.node) != slices.Contains(f.Nodes, a.origin) {
			cut = true
		}
		if start := max(f.Start, from); cut && f.Healed-start >= int64(lostAfter) {
			out = append(out, gangEvent{at: start, what: fmt.Sprintf("rank %d's node %s could not be reached (%s) while it held %s", rank, in.node, f.Kind, in.id),
				lines: []string{faultLine(f)}})
		}
	}
	return out
}

// rankLines are the writes of one rank's lease, after its entry's.
func rankLines(x *index, a *gangAttempt, in *instance) []string {
	h := x.h
	var lines []string
	if a.entryW >= 0 {
		lines = append(lines, writeLine(h, a.entryW))
	}
	lines = append(lines, writeLine(h, in.puts[0]))
	if in.commit >= 0 && in.commit != in.puts[0] {
		lines = append(lines, writeLine(h, in.commit))
	}
	if in.end >= 0 {
		lines = append(lines, writeLine(h, in.end))
	}
	return lines
}
