package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// The promises of services (issue 33), checked against what the observer
// saw of every copy (History.Seen) and what the service client did
// (History.SvcOps).
const (
	// CheckServiceCopies: never two copies of one replica (one owner's
	// service name and replica index) answer at once for longer than the
	// grace (SchedConfig.LostAfter) plus CheckOptions.CopySlack. A copy
	// cut off from the cluster fences itself a grace after its agent
	// lost touch, and the other side places the replica again only a
	// grace after it called that node dead: the two overlap only by the
	// difference of the two detections and the watchdog's seconds.
	CheckServiceCopies = "service-two-copies"
	// CheckServiceStopped: once `dibs stop` was answered OK, no copy of
	// the service answers later than CheckOptions.StopWithin after; a
	// copy on a node cut off when the stop came, which no stop reaches,
	// answers no later than it fences itself or hears of the stop when
	// the cut heals (stopDeadline).
	CheckServiceStopped = "service-came-back"
	// CheckServiceDown: a service started and not stopped, and not
	// crash-looping, answers again within its bound (serviceBound) of
	// the heal of every fault, unless another fault strikes first; and
	// while a fault holds its node cut off, it answers on another node
	// within the grace plus 5 s of the cut (moveBound).
	CheckServiceDown = "service-down"
)

// serviceBound is how soon a service must answer again after a fault
// heals, from the run's configuration: its node lost past the grace
// (LostAfter) once the failure detector calls it dead (DetectWithin),
// the move (MoveWithin: the scheduler's next pass, the claim, the tmux
// session, the first probe), and the longest backoff of a restart that
// is not yet a crash loop (Rules.Backoff of CrashRestarts-1 restarts in
// the window). With the nemesis's numbers: 5 s + 5 s + 3 s + 8 s = 21 s.
func serviceBound(sched queue.SchedConfig, r service.Rules, o CheckOptions) time.Duration {
	o = o.withDefaults()
	r = r.WithDefaults()
	return sched.WithDefaults().LostAfter + o.DetectWithin + o.MoveWithin + r.Backoff(r.CrashRestarts-1)
}

// replicaOf is the replica a service's lease runs: its index among the
// service's replicas (`--replicas`), which a move keeps.
func replicaOf(l *lease.Lease) int { return l.Service.Replica }

// svcReplica names one replica of one service across its moves.
type svcReplica struct {
	name    string
	replica int
}

func (r svcReplica) String() string {
	if r.replica == 0 {
		return "service " + r.name
	}
	return fmt.Sprintf("service %s replica %d", r.name, r.replica)
}

// ServiceFigures are what the service checks measured, for the report.
type ServiceFigures struct {
	// Started counts the services the client tried to start, Acked
	// those whose start was answered OK; Stopped the stops answered OK,
	// Kills the replicas SIGKILLed, CrashLooped the services that
	// crash-looped; Seen the runs of answers the observer recorded.
	Started, Acked, Stopped, Kills, CrashLooped, Seen int
	// Moved counts the leases seen answering that no serve was answered
	// with (a move placed them); Fenced the copies that stopped
	// answering while a fault held their node cut off (their watchdog
	// stopped them, or their node's end).
	Moved, Fenced int
	// Overlaps counts the times two copies of a replica answered at
	// once; LongestOverlap is the longest.
	Overlaps       int
	LongestOverlap time.Duration
	// Gaps counts the times a running service answered nowhere (for
	// more than two of the observer's rounds); Slowest is the longest
	// any took to answer again after the heal it was measured from (the
	// figure held against Bound).
	Gaps    int
	Slowest time.Duration
	Bound   time.Duration
}

// svcIndex is what the service checks look up.
type svcIndex struct {
	h *History
	// replica of each service lease, from the nodes' writes.
	replica map[string]svcReplica
	// seen are each replica's copies seen, by From.
	seen map[svcReplica][]*Seen
	// ops are each service's client operations, by name.
	ops map[string][]*SvcOp
	// crashLoop is when each service's first crash loop was written;
	// granted when each service lease's grant was durable.
	crashLoop map[string]int64
	granted   map[string]int64
}

func newSvcIndex(h *History) *svcIndex {
	x := &svcIndex{h: h, replica: map[string]svcReplica{}, seen: map[svcReplica][]*Seen{}, ops: map[string][]*SvcOp{}, crashLoop: map[string]int64{}, granted: map[string]int64{}}
	names := map[string]string{} // lease → service name
	for i := range h.Writes {
		w := &h.Writes[i]
		switch {
		case w.Kind == WritePut && w.Lease.IsService():
			x.replica[w.Lease.ID] = svcReplica{w.Lease.Service.Name, replicaOf(&w.Lease)}
			names[w.Lease.ID] = w.Lease.Service.Name
			if _, ok := x.granted[w.Lease.ID]; !ok {
				x.granted[w.Lease.ID] = w.Done
			}
		case w.Kind == WriteEnd && lease.EndReason(w.Ledger.Reason) == lease.EndCrashLoop:
			if n, ok := names[w.Ledger.LeaseID]; ok {
				if _, seen := x.crashLoop[n]; !seen {
					x.crashLoop[n] = w.Start
				}
			}
		}
	}
	for i := range h.Seen {
		s := &h.Seen[i]
		r, ok := x.replica[s.Lease]
		if !ok {
			r = svcReplica{s.Service, 0}
		}
		x.seen[r] = append(x.seen[r], s)
	}
	for _, ss := range x.seen {
		slices.SortStableFunc(ss, func(a, b *Seen) int { return cmp.Compare(a.From, b.From) })
	}
	for i := range h.SvcOps {
		o := &h.SvcOps[i]
		x.ops[o.Service] = append(x.ops[o.Service], o)
	}
	return x
}

// replicas are the replicas seen, in a fixed order.
func (x *svcIndex) replicas() []svcReplica {
	out := make([]svcReplica, 0, len(x.seen))
	for r := range x.seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b svcReplica) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.replica, b.replica))
	})
	return out
}

// checkServices runs the three service checks.
func checkServices(h *History, o CheckOptions) ([]Violation, ServiceFigures) {
	x := newSvcIndex(h)
	f := ServiceFigures{Seen: len(h.Seen), CrashLooped: len(x.crashLoop), Bound: serviceBound(h.Sched, h.SvcRules, o)}
	// A service of several replicas is started by one claim each: it
	// counts once, answered when every claim was.
	refused := map[string]bool{}
	var names []string
	for i := range h.SvcOps {
		if op := &h.SvcOps[i]; op.Kind == SvcServe {
			if !slices.Contains(names, op.Service) {
				names = append(names, op.Service)
			}
			refused[op.Service] = refused[op.Service] || op.Outcome != OK
		}
	}
	f.Started = len(names)
	for _, n := range names {
		if !refused[n] {
			f.Acked++
		}
	}
	for i := range h.SvcOps {
		op := &h.SvcOps[i]
		switch {
		case op.Kind == SvcStop && op.Outcome == OK:
			f.Stopped++
		case op.Kind == SvcKill && op.Outcome == OK:
			f.Kills++
		}
	}
	served := map[string]bool{}
	for i := range h.SvcOps {
		if op := &h.SvcOps[i]; op.Kind == SvcServe && op.LeaseID != "" {
			served[op.LeaseID] = true
		}
	}
	counted := map[string]bool{}
	for i := range h.Seen {
		s := &h.Seen[i]
		if !served[s.Lease] && !counted[s.Lease] {
			counted[s.Lease] = true
			f.Moved++
		}
		if s.To >= svcEnd(h)-int64(2*h.SvcRound) {
			continue // still answering at the end
		}
		for j := range h.Faults {
			if ft := &h.Faults[j]; ft.Start < s.To && s.To < ft.Healed && cutsOff(h, ft, s.Node) {
				f.Fenced++
				break
			}
		}
	}
	var out []Violation
	out = append(out, checkCopies(x, o, &f)...)
	out = append(out, checkStopped(x, o)...)
	out = append(out, checkDown(x, o, &f)...)
	return out, f
}

// checkCopies finds the times two copies of one replica answered at once
// (on two nodes: one node's address answers for one copy at a time), and
// fails those that lasted past the grace plus CopySlack.
func checkCopies(x *svcIndex, o CheckOptions, f *ServiceFigures) []Violation {
	h := x.h
	allowed := h.Sched.WithDefaults().LostAfter + o.CopySlack
	var out []Violation
	for _, r := range x.replicas() {
		ss := x.seen[r]
		// Each pair's overlap, then overlaps that touch merged into one
		// period of two copies or more.
		type period struct {
			from, to int64
			who      []*Seen
		}
		var ps []period
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if b.From > a.To {
					break // sorted by From: none later overlaps a
				}
				if a.Node == b.Node {
					continue
				}
				ps = append(ps, period{from: max(a.From, b.From), to: min(a.To, b.To), who: []*Seen{a, b}})
			}
		}
		slices.SortFunc(ps, func(a, b period) int { return cmp.Compare(a.from, b.from) })
		var merged []period
		for _, p := range ps {
			if n := len(merged); n > 0 && p.from <= merged[n-1].to {
				m := &merged[n-1]
				m.to = max(m.to, p.to)
				for _, s := range p.who {
					if !slices.Contains(m.who, s) {
						m.who = append(m.who, s)
					}
				}
				continue
			}
			merged = append(merged, p)
		}
		for _, p := range merged {
			f.Overlaps++
			d := time.Duration(p.to - p.from)
			f.LongestOverlap = max(f.LongestOverlap, d)
			if d <= allowed {
				continue
			}
			v := Violation{Check: CheckServiceCopies, Subject: r.String(),
				What: fmt.Sprintf("two copies answered at once for %s (%s–%s ms), longer than the grace (%s) plus %s",
					d.Round(time.Millisecond), ms(p.from), ms(p.to), h.Sched.WithDefaults().LostAfter, o.CopySlack)}
			for _, s := range p.who {
				v.History = append(v.History, seenLine(s))
			}
			v.History = append(v.History, faultsAround(h, p.from-int64(allowed)-int64(o.DetectWithin), p.to)...)
			v.History = append(v.History, svcOpLines(x, r.name)...)
			out = append(out, v)
		}
	}
	return out
}

// checkStopped finds copies that answered after their service's stop was
// acknowledged (and StopWithin more).
func checkStopped(x *svcIndex, o CheckOptions) []Violation {
	h := x.h
	var out []Violation
	for _, r := range x.replicas() {
		acked, via := Never, ""
		for _, op := range x.ops[r.name] {
			if op.Kind == SvcStop && op.Outcome == OK && op.Return < acked {
				acked, via = op.Return, op.Via
			}
		}
		if acked == Never {
			continue
		}
		for _, s := range x.seen[r] {
			if s.To <= stopDeadline(h, o, s.Node, via, acked) {
				continue
			}
			v := Violation{Check: CheckServiceStopped, Subject: r.String(),
				What: fmt.Sprintf("its stop was acknowledged at %s ms, and a copy on %s still answered at %s ms (%s later; the promise: %s)",
					ms(acked), s.Node, ms(s.To), time.Duration(s.To-acked).Round(time.Millisecond), o.StopWithin)}
			v.History = append(v.History, seenLine(s))
			v.History = append(v.History, svcOpLines(x, r.name)...)
			v.History = append(v.History, svcWriteLines(x, r.name)...)
			v.History = append(v.History, faultsAround(h, s.From-int64(h.Sched.WithDefaults().LostAfter)*3, s.To)...)
			out = append(out, v)
			break // one a replica: the rest say the same
		}
	}
	return out
}

// stopDeadline is how long after a stop acknowledged at acked (asked of
// the agent on via) a copy on node may still answer: StopWithin; or, when
// a fault kept the stop from reaching node at acked, longer. A copy on a
// node cut off then answers until it fences itself (the cut, the fence's
// 5 s of not hearing its peers, the grace and CopySlack) or hears of the
// stop when the cut heals (and StopWithin), whichever comes first; a copy
// on the side in touch, when the stop was asked on a cut-off node, until
// the cut heals (and StopWithin): it never fences, and hears of the stop
// at the heal.
func stopDeadline(h *History, o CheckOptions, node, via string, acked int64) int64 {
	deadline := acked + int64(o.StopWithin)
	if node == via {
		return deadline // the stop ended it where it ran
	}
	grace := int64(h.Sched.WithDefaults().LostAfter)
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.Start > acked || f.Healed < acked {
			continue
		}
		healed := f.Healed + int64(o.StopWithin)
		switch {
		case cutsOff(h, f, node):
			fenced := f.Start + int64(5*time.Second) + grace + int64(o.CopySlack)
			deadline = max(deadline, min(fenced, healed))
		case cutsOff(h, f, via):
			deadline = max(deadline, healed)
		}
	}
	return deadline
}

// checkDown finds the times a running service answered nowhere for longer
// than its bound after the fault it was measured from. A service runs
// from its serve's OK answer until its first stop is tried (whatever the
// answer) or the run ends; one that crash-looped is not held to it, nor
// one whose serve was never answered. Within that time, each gap between
// copies seen is measured from its start, or from the heal of a fault
// that struck during it (a SIGKILL of its process counts as one that
// heals at once): the service must answer within the bound of it, unless
// a further fault begins first, which the gap is then measured from in
// turn; a gap that ends while a fault holds is not judged.
func checkDown(x *svcIndex, o CheckOptions, f *ServiceFigures) []Violation {
	h := x.h
	bound := f.Bound
	type window struct{ from, to int64 }
	var out []Violation
	var names []string
	for n := range x.ops {
		names = append(names, n)
	}
	slices.Sort(names)
	// The faults and kills, by start.
	type strike struct{ start, healed int64 }
	var strikes []strike
	for _, ft := range h.Faults {
		strikes = append(strikes, strike{ft.Start, ft.Healed})
	}
	for i := range h.SvcOps {
		if op := &h.SvcOps[i]; op.Kind == SvcKill && op.Outcome == OK {
			strikes = append(strikes, strike{op.Call, op.Return})
		}
	}
	slices.SortFunc(strikes, func(a, b strike) int { return cmp.Compare(a.start, b.start) })
	for _, name := range names {
		if _, looped := x.crashLoop[name]; looped {
			continue
		}
		w := window{from: Never, to: svcEnd(h)}
		for _, op := range x.ops[name] {
			switch {
			case op.Kind == SvcServe && op.Outcome == OK:
				w.from = min(w.from, op.Return)
			case op.Kind == SvcStop:
				w.to = min(w.to, op.Call)
			}
		}
		if w.from == Never || w.from >= w.to {
			continue
		}
		// Every replica seen (one, until services have several).
		rs := []svcReplica{{name, 0}}
		for _, r := range x.replicas() {
			if r.name == name && r.replica != 0 {
				rs = append(rs, r)
			}
		}
		for _, r := range rs {
			cursor := w.from
			var gaps [][2]int64
			for _, s := range x.seen[r] {
				if s.To < w.from || s.From > w.to {
					continue
				}
				if s.From > cursor {
					gaps = append(gaps, [2]int64{cursor, s.From})
				}
				cursor = max(cursor, s.To)
			}
			if cursor < w.to {
				gaps = append(gaps, [2]int64{cursor, w.to})
			}
			for _, g := range gaps {
				d0, d1 := g[0], g[1]
				// A gap of one round is no gap: the copy moved between
				// two addresses from one round to the next, or a round
				// was late.
				if time.Duration(d1-d0) <= 2*h.SvcRound {
					continue
				}
				f.Gaps++
				if v, ok := notMoved(x, o, r, d0, d1); ok {
					out = append(out, v)
					continue
				}
				// The anchor: d0, or the heal of a fault holding at d0;
				// then each fault that begins before the service is
				// back and within the bound of the anchor moves the
				// anchor to its heal.
				a, excused := d0, false
				for _, st := range strikes {
					if st.start > d1 || st.start > a+int64(bound) {
						break // back first, or overdue before it struck
					}
					if st.healed >= d1 {
						excused = true // still holding when it came back
						break
					}
					a = max(a, st.healed)
				}
				if excused {
					continue
				}
				took := time.Duration(d1 - a)
				f.Slowest = max(f.Slowest, took)
				if took <= bound {
					continue
				}
				what := fmt.Sprintf("answered nowhere from %s ms to %s ms: %s after the last fault healed (or it went down), its bound is %s", ms(d0), ms(d1), took.Round(time.Millisecond), bound)
				if d1 == svcEnd(h) {
					what = fmt.Sprintf("answered nowhere from %s ms to the end of the run (%s ms): %s after the last fault healed (or it went down), its bound is %s", ms(d0), ms(d1), took.Round(time.Millisecond), bound)
				}
				v := Violation{Check: CheckServiceDown, Subject: r.String(), What: what}
				for _, s := range x.seen[r] {
					if s.To >= d0-int64(time.Second) && s.From <= d1+int64(time.Second) {
						v.History = append(v.History, seenLine(s))
					}
				}
				v.History = append(v.History, svcOpLines(x, name)...)
				v.History = append(v.History, svcWriteLines(x, name)...)
				v.History = append(v.History, faultsAround(h, d0-int64(bound), d1)...)
				out = append(out, v)
			}
		}
	}
	return out
}

// moveBound is how soon a replica whose node was cut off answers on
// another node at the latest, counted from the cut: the grace (counted
// from when the node was last heard) and 5 s — the figure for a
// move (the scheduler's pass, the claim, the session, the first probe).
func moveBound(h *History, o CheckOptions) time.Duration {
	return h.Sched.WithDefaults().LostAfter + o.DetectWithin
}

// notMoved judges a gap that a fault cutting off the replica's node
// explains, while it holds: the replica's node (where it answered last
// before the gap) killed, restarted, paused, rebooted or powered off, or
// on the smaller side of a partition (of two equal halves, the one
// without the lowest-named node). Past moveBound of the cut, the replica
// must answer on another node if the fault still holds: a service is
// moved when its node is lost past the grace. A lease granted after the
// cut, or too late before it to reach the others (PublishWithin), is not
// held to it: the rest of the cluster never heard of it.
func notMoved(x *svcIndex, o CheckOptions, r svcReplica, d0, d1 int64) (Violation, bool) {
	h := x.h
	var last *Seen
	for _, s := range x.seen[r] {
		if s.To <= d0 {
			last = s
		}
	}
	if last == nil {
		return Violation{}, false
	}
	node := last.Node
	granted, ok := x.granted[last.Lease]
	mb := int64(moveBound(h, o))
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.Start > d0 || f.Healed < d0 || !cutsOff(h, f, node) {
			continue
		}
		if !ok || granted+int64(o.PublishWithin) > f.Start {
			continue // granted on a node already cut off: unknown elsewhere
		}
		due := f.Start + mb
		// Down past the move's bound, while the fault still held: by
		// more than two of the observer's rounds.
		if min(d1, f.Healed)-max(d0, due) <= int64(2*h.SvcRound) {
			continue
		}
		v := Violation{Check: CheckServiceDown, Subject: r.String(),
			What: fmt.Sprintf("its node %s was cut off at %s ms (%s) and it answered nowhere from %s ms to %s ms: not placed on another node within the grace plus %s (%s) of the cut",
				node, ms(f.Start), f.Kind, ms(d0), ms(min(d1, f.Healed)), o.DetectWithin, time.Duration(mb))}
		for _, s := range x.seen[r] {
			if s.To >= d0-int64(time.Second) && s.From <= d1+int64(time.Second) {
				v.History = append(v.History, seenLine(s))
			}
		}
		v.History = append(v.History, svcOpLines(x, r.name)...)
		v.History = append(v.History, svcWriteLines(x, r.name)...)
		v.History = append(v.History, faultLine(f))
		return v, true
	}
	return Violation{}, false
}

// cutsOff reports whether fault f takes node away from the rest of the
// cluster.
func cutsOff(h *History, f *Fault, node string) bool {
	switch {
	case agentDown(f.Kind) || f.Kind == FaultPause:
		return slices.Contains(f.Nodes, node)
	case f.Kind != FaultPartition:
		return false
	}
	var all []string
	for n := range h.GPUs {
		all = append(all, n)
	}
	slices.Sort(all)
	in := slices.Contains(f.Nodes, node)
	side := len(f.Nodes)
	if !in {
		side = len(all) - side
	}
	switch {
	case 2*side < len(all):
		return true
	case 2*side > len(all):
		return false
	}
	// Two equal halves: the one with the lowest-named node stays in touch.
	return len(all) > 0 && slices.Contains(f.Nodes, all[0]) != in
}

// svcEnd is when the observer stopped: the end of what it saw.
func svcEnd(h *History) int64 {
	if h.SvcEnd > 0 {
		return h.SvcEnd
	}
	return h.End
}

// seenLine is one run of answers as a person reads it.
func seenLine(s *Seen) string {
	return fmt.Sprintf("%s  observer: %s answers on %s (lease %s, pid %d, start %s)", span(s.From, s.To), s.Service, s.Node, s.Lease, s.PID, s.Token)
}

// svcOpLines are the client's operations on service name.
func svcOpLines(x *svcIndex, name string) []string {
	var out []string
	for _, o := range x.ops[name] {
		via := ""
		if o.Via != "" {
			via = " via " + o.Via
		}
		l := fmt.Sprintf("%s  service client%s: %s %s", span(o.Call, o.Return), via, o.Kind, o.Service)
		switch o.Kind {
		case SvcServe:
			l += fmt.Sprintf(" -g %d --port %d", o.GPUs, o.Port)
		case SvcKill:
			l += fmt.Sprintf(" (SIGKILL pid %d on %s)", o.PID, o.Node)
		}
		if o.LeaseID != "" {
			l += " → lease " + o.LeaseID
		}
		l += ": " + o.Outcome.String()
		if o.Err != "" {
			l += " (" + o.Err + ")"
		}
		out = append(out, l)
	}
	return out
}

// svcWriteLines are the nodes' writes of service name's leases: grants,
// and ends (a status change is a put too, and is left out).
func svcWriteLines(x *svcIndex, name string) []string {
	h := x.h
	var out []string
	granted := map[string]bool{}
	for i := range h.Writes {
		w := &h.Writes[i]
		switch w.Kind {
		case WritePut:
			if w.Lease.IsService() && w.Lease.Service.Name == name && !granted[w.Lease.ID] {
				granted[w.Lease.ID] = true
				out = append(out, writeLine(h, i))
			}
		case WriteEnd:
			if granted[w.Ledger.LeaseID] {
				out = append(out, writeLine(h, i))
			}
		}
	}
	return out
}

// faultsAround are the faults that held at some time in [from, to].
func faultsAround(h *History, from, to int64) []string {
	var out []string
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.Start <= to && f.Healed >= from {
			out = append(out, faultLine(f))
		}
	}
	return out
}
