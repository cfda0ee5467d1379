package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// svcBuilder is a builder with the service parts of a history: the grace
// and the supervisor's numbers of a nemesis run (bound 21 s).
func svcBuilder() *builder {
	b := newBuilder()
	b.h.Sched.LostAfter = 5 * time.Second
	b.h.SvcRules, b.h.SvcRound = svcRules, svcRound
	return b
}

// serve records an OK `dibs serve name` answered with lease token on
// node, and the node's grant of it.
func (b *builder) serve(name, node string, token uint64, call, ret float64) string {
	l := lease.Lease{ID: lease.LeaseID(node, token), Node: node, Token: token, Kind: lease.KindService, Service: &service.Service{Spec: service.Spec{Name: name, Port: 8000}}}
	b.put(l, call+1, call+2)
	b.h.SvcOps = append(b.h.SvcOps, SvcOp{Kind: SvcServe, Service: name, Via: node, Node: node, LeaseID: l.ID, Port: 8000, Call: at(call), Return: at(ret), Outcome: OK})
	return l.ID
}

// move records the grant of name's replica on node under a new lease, as
// a scheduler's move does (no client asked).
func (b *builder) move(name, node string, token uint64, start float64) string {
	l := lease.Lease{ID: lease.LeaseID(node, token), Node: node, Token: token, Kind: lease.KindService, Service: &service.Service{Spec: service.Spec{Name: name, Port: 8000}}}
	b.put(l, start, start+1)
	return l.ID
}

// stopSvc records an OK `dibs stop name` of lease id and its end.
func (b *builder) stopSvc(name, id string, call, ret float64) {
	b.end(id, nil, lease.EndReleased, call+1, call+2)
	node, _ := lease.NodeOfID(id)
	b.h.SvcOps = append(b.h.SvcOps, SvcOp{Kind: SvcStop, Service: name, Via: node, Node: node, LeaseID: id, Call: at(call), Return: at(ret), Outcome: OK})
}

// stopSvcVia records a stop of name asked of the agent on via that
// ended lease id there.
func (b *builder) stopSvcVia(name, id, via string, call, ret float64) {
	b.end(id, nil, lease.EndReleased, call+1, call+2)
	node, _ := lease.NodeOfID(id)
	b.h.SvcOps = append(b.h.SvcOps, SvcOp{Kind: SvcStop, Service: name, Via: via, Node: node, LeaseID: id, Call: at(call), Return: at(ret), Outcome: OK})
}

// seen records that node answered for name's lease id from from to to.
func (b *builder) seen(name, node, id string, from, to float64) {
	b.h.Seen = append(b.h.Seen, Seen{Service: name, Node: node, Lease: id, PID: 100, Token: id + "-t", From: at(from), To: at(to)})
}

func violationsOf(r Report, check string) []Violation {
	var out []Violation
	for _, v := range r.Violations {
		if v.Check == check {
			out = append(out, v)
		}
	}
	return out
}

// TestServiceChecksPassAMoveDoneRight: a replica whose node is cut off
// past the grace, placed again on another node while its old copy has not
// yet stopped itself (two copies for 2 s), back within its bound, then
// stopped: no service check fails, and the figures say what happened.
func TestServiceChecksPassAMoveDoneRight(t *testing.T) {
	b := svcBuilder()
	l1 := b.serve("web", "n1", 1, 1000, 1100)
	b.seen("web", "n1", l1, 1300, 17000)
	b.fault(FaultPartition, []string{"n1"}, 5000, 18000)
	l2 := b.move("web", "n2", 1, 14000)
	b.seen("web", "n2", l2, 15000, 40000)
	b.stopSvc("web", l2, 40100, 40200)
	r := Check(b.history(60000))
	for _, c := range []string{CheckServiceCopies, CheckServiceStopped, CheckServiceDown} {
		if vs := violationsOf(r, c); len(vs) > 0 {
			t.Errorf("%s: got %d violations, want none:\n%s", c, len(vs), r)
		}
	}
	s := r.Services
	if s.Started != 1 || s.Stopped != 1 || s.Fenced != 1 || s.Moved != 1 || s.Overlaps != 1 || s.LongestOverlap != 2*time.Second || s.Bound != 21*time.Second {
		t.Errorf("figures: got %+v, want 1 started, 1 stopped, 1 fenced, 1 moved, 1 overlap of 2s, bound 21s", s)
	}
	if !strings.Contains(r.String(), "two copies at once 1 times, the longest 2s") {
		t.Errorf("the report does not give the overlap:\n%s", r)
	}
}

// TestServiceCopiesCheckFailsTwoCopiesPastTheGrace: the old copy never
// stopped itself, and answered beside the new one for 20 s (the grace,
// 5 s, plus 5 s allowed).
func TestServiceCopiesCheckFailsTwoCopiesPastTheGrace(t *testing.T) {
	b := svcBuilder()
	l1 := b.serve("web", "n1", 1, 1000, 1100)
	b.seen("web", "n1", l1, 1300, 35000)
	b.fault(FaultPartition, []string{"n1"}, 5000, 18000)
	l2 := b.move("web", "n2", 1, 14000)
	b.seen("web", "n2", l2, 15000, 40000)
	r := Check(b.history(40000))
	vs := violationsOf(r, CheckServiceCopies)
	if len(vs) != 1 {
		t.Fatalf("got %d violations of %s, want 1:\n%s", len(vs), CheckServiceCopies, r)
	}
	if v := vs[0]; v.Subject != "service web" || !strings.Contains(v.What, "two copies answered at once for 20s") || len(v.History) < 3 {
		t.Errorf("violation: got %s: %s %q", v.Subject, v.What, v.History)
	}
	if !r.Failed() {
		t.Error("the report does not fail")
	}
}

// TestServiceStoppedCheckFailsAStopUndone: `dibs stop` was answered, and a
// copy (the one a move placed while the stop ended the other) answers on.
func TestServiceStoppedCheckFailsAStopUndone(t *testing.T) {
	b := svcBuilder()
	l1 := b.serve("web", "n1", 1, 1000, 1100)
	b.seen("web", "n1", l1, 1300, 9000)
	b.fault(FaultPartition, []string{"n1"}, 5000, 25000)
	l2 := b.move("web", "n2", 1, 14000)
	b.seen("web", "n2", l2, 15000, 19900)
	b.stopSvc("web", l2, 20000, 20100)
	l3 := b.move("web", "n3", 1, 21000)
	b.seen("web", "n3", l3, 22000, 40000)
	r := Check(b.history(40000))
	vs := violationsOf(r, CheckServiceStopped)
	if len(vs) != 1 {
		t.Fatalf("got %d violations of %s, want 1:\n%s", len(vs), CheckServiceStopped, r)
	}
	if v := vs[0]; !strings.Contains(v.What, "a copy on n3 still answered at 40000.0 ms") {
		t.Errorf("violation: %s", v.What)
	}
	// Gone within StopWithin (2 s) of the answer: no violation.
	b = svcBuilder()
	l1 = b.serve("web", "n1", 1, 1000, 1100)
	b.seen("web", "n1", l1, 1300, 21500)
	b.stopSvc("web", l1, 20000, 20100)
	if vs := violationsOf(Check(b.history(40000)), CheckServiceStopped); len(vs) > 0 {
		t.Errorf("a copy gone 1.4 s after its stop's answer: got %v", vs)
	}
	// A copy on a node cut off when the stop came (no stop reaches it)
	// may answer until it fences itself (the cut + 5 s + the grace 5 s +
	// CopySlack 5 s = 35 s here), not past it. (A CI run found the first:
	// the cut-off copy answered 4.3 s after the stop, 11.8 s after the
	// cut.)
	for _, c := range []struct {
		lastSeen float64
		want     int
	}{{lastSeen: 31800}, {lastSeen: 36000, want: 1}} {
		b = svcBuilder()
		l1 = b.serve("web", "n1", 1, 1000, 1100)
		b.fault(FaultPartition, []string{"n1"}, 20000, 45000)
		b.seen("web", "n1", l1, 1300, c.lastSeen)
		l2 = b.move("web", "n2", 1, 26000)
		b.seen("web", "n2", l2, 27000, 27400)
		b.stopSvc("web", l2, 27500, 27600)
		if vs := violationsOf(Check(b.history(60000)), CheckServiceStopped); len(vs) != c.want {
			t.Errorf("a cut-off copy last seen at %.0f ms, stop answered at 27600 ms: got %d violations, want %d: %v", c.lastSeen, len(vs), c.want, vs)
		}
	}
	// A stop asked on the cut-off node reaches the other side's copy only
	// at the heal (45 s here): it may answer until the heal + 2 s.
	for _, c := range []struct {
		lastSeen float64
		want     int
	}{{lastSeen: 46500}, {lastSeen: 48000, want: 1}} {
		b = svcBuilder()
		l1 = b.serve("web", "n1", 1, 1000, 1100)
		b.seen("web", "n1", l1, 1300, 19000)
		b.fault(FaultPartition, []string{"n1"}, 20000, 45000)
		l2 = b.move("web", "n2", 1, 26000)
		b.seen("web", "n2", l2, 27000, c.lastSeen)
		b.stopSvcVia("web", l1, "n1", 30000, 30100)
		if vs := violationsOf(Check(b.history(60000)), CheckServiceStopped); len(vs) != c.want {
			t.Errorf("the other side's copy last seen at %.0f ms, stop asked on cut-off n1: got %d violations, want %d: %v", c.lastSeen, len(vs), c.want, vs)
		}
	}
}

// TestServiceDownCheck: a running service must answer again within its
// bound (21 s) of the heal of the fault that took it down, unless another
// fault strikes first.
func TestServiceDownCheck(t *testing.T) {
	cases := []struct {
		name string
		// back is when the moved copy first answers (ms); end the run's.
		back, end float64
		// more faults after the first.
		more      [][2]float64
		crashLoop bool
		want      int
	}{
		{name: "back 13 s after the heal", back: 25000, end: 60000},
		{name: "back 28 s after the heal", back: 40000, end: 60000, want: 1},
		{name: "never back", back: 0, end: 60000, want: 1},
		{name: "another fault before the bound", back: 40000, end: 60000, more: [][2]float64{{20000, 30000}}},
		{name: "another fault past the bound", back: 40000, end: 60000, more: [][2]float64{{34000, 36000}}, want: 1},
		{name: "back while a fault holds", back: 40000, end: 60000, more: [][2]float64{{30000, 45000}}},
		{name: "crash-looped", back: 0, end: 60000, crashLoop: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := svcBuilder()
			l1 := b.serve("web", "n1", 1, 1000, 1100)
			b.seen("web", "n1", l1, 1300, 9000)
			b.fault(FaultKill, []string{"n1"}, 9000, 12000)
			for _, f := range c.more {
				b.fault(FaultClockStep, []string{"n3"}, f[0], f[1])
			}
			if c.crashLoop {
				b.end(l1, nil, lease.EndCrashLoop, 13000, 13001)
			}
			if c.back > 0 {
				l2 := b.move("web", "n2", 1, c.back-1000)
				b.seen("web", "n2", l2, c.back, c.end)
			}
			r := Check(b.history(c.end))
			vs := violationsOf(r, CheckServiceDown)
			if len(vs) != c.want {
				t.Fatalf("got %d violations of %s, want %d:\n%s", len(vs), CheckServiceDown, c.want, r)
			}
			if c.want > 0 && !strings.Contains(vs[0].What, "its bound is 21s") {
				t.Errorf("violation: %s", vs[0].What)
			}
		})
	}
}

// TestServiceBoundFromTheConfig: the bound is the grace, the detector's
// and the move's seconds, and the longest backoff short of a crash loop.
func TestServiceBoundFromTheConfig(t *testing.T) {
	b := svcBuilder()
	if got, want := serviceBound(b.h.Sched, b.h.SvcRules, CheckOptions{}), 5*time.Second+5*time.Second+3*time.Second+8*time.Second; got != want {
		t.Errorf("bound: got %s, want %s", got, want)
	}
	r := service.Rules{BackoffBase: 2 * time.Second, CrashRestarts: 3}
	if got, want := serviceBound(b.h.Sched, r, CheckOptions{}), 5*time.Second+5*time.Second+3*time.Second+4*time.Second; got != want {
		t.Errorf("bound with a 2 s backoff and 3 restarts: got %s, want %s", got, want)
	}
}

// TestServiceDownCheckWantsAMove: while a fault holds its node cut off,
// a replica must answer on another node within the grace plus 5 s of the
// cut (10 s here), however late the fault heals.
func TestServiceDownCheckWantsAMove(t *testing.T) {
	cases := []struct {
		name string
		kind FaultKind
		side []string
		// back is when a copy answers again, on node.
		back float64
		node string
		// cutAt is when the fault strikes (default 9000 ms).
		cutAt float64
		want  int
	}{
		{name: "moved 8 s after the kill", kind: FaultKill, side: []string{"n1"}, back: 17000, node: "n2"},
		{name: "moved 14 s after the kill", kind: FaultKill, side: []string{"n1"}, back: 23000, node: "n2", want: 1},
		{name: "back on its node only at the heal", kind: FaultPause, side: []string{"n1"}, back: 26000, node: "n1", want: 1},
		{name: "cut off alone by a partition", kind: FaultPartition, side: []string{"n2", "n3"}, back: 26000, node: "n1", want: 1},
		{name: "on the side in touch", kind: FaultPartition, side: []string{"n1", "n2"}, back: 26000, node: "n1"},
		{name: "granted after the cut, unknown to the rest", kind: FaultPartition, side: []string{"n1"}, cutAt: 500, back: 26000, node: "n2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := svcBuilder()
			l1 := b.serve("web", "n1", 1, 1000, 1100)
			b.seen("web", "n1", l1, 1300, 9000)
			cut := 9000.0
			if c.cutAt > 0 {
				cut = c.cutAt
			}
			b.fault(c.kind, c.side, cut, 25000)
			id := l1
			if c.node != "n1" {
				id = b.move("web", c.node, 1, c.back-500)
			}
			b.seen("web", c.node, id, c.back, 60000)
			r := Check(b.history(60000))
			vs := violationsOf(r, CheckServiceDown)
			if len(vs) != c.want {
				t.Fatalf("got %d violations of %s, want %d:\n%s", len(vs), CheckServiceDown, c.want, r)
			}
			if c.want > 0 && !strings.Contains(vs[0].What, "not placed on another node within the grace plus 5s (10s) of the cut") {
				t.Errorf("violation: %s", vs[0].What)
			}
		})
	}
}

// TestServiceCopiesCheckTellsReplicasApart: two replicas of one service
// (`--replicas 2`) answer side by side for as long as they run; two
// copies of one replica may not.
func TestServiceCopiesCheckTellsReplicasApart(t *testing.T) {
	for _, c := range []struct {
		name    string
		replica int
		want    int
	}{{"replicas 0 and 1", 1, 0}, {"replica 0 twice", 0, 1}} {
		t.Run(c.name, func(t *testing.T) {
			b := svcBuilder()
			l1 := b.serve("web", "n1", 1, 1000, 1100)
			l := lease.Lease{ID: lease.LeaseID("n2", 1), Node: "n2", Token: 1, Kind: lease.KindService,
				Service: &service.Service{Spec: service.Spec{Name: "web", Port: 8000, Replica: c.replica, Replicas: 2}}}
			b.put(l, 1001, 1002)
			b.seen("web", "n1", l1, 1300, 40000)
			b.seen("web", "n2", l.ID, 1300, 40000)
			if vs := violationsOf(Check(b.history(40000)), CheckServiceCopies); len(vs) != c.want {
				t.Errorf("got %d violations of %s, want %d: %v", len(vs), CheckServiceCopies, c.want, vs)
			}
		})
	}
}

// TestServiceDownEndsWithTheObserver: the run goes on after the observer
// stopped (the last reads of every agent, however long the boards take to
// agree); a service seen until then is not down for it.
func TestServiceDownEndsWithTheObserver(t *testing.T) {
	b := svcBuilder()
	l1 := b.serve("web", "n1", 1, 1000, 1100)
	b.seen("web", "n1", l1, 1300, 40000)
	b.h.SvcEnd = at(40100)
	if vs := violationsOf(Check(b.history(70000)), CheckServiceDown); len(vs) != 0 {
		t.Errorf("got %v, want none", vs)
	}
	b.h.SvcEnd = 0 // a history from before SvcEnd: its End is the observer's
	if vs := violationsOf(Check(b.history(70000)), CheckServiceDown); len(vs) != 1 {
		t.Errorf("without SvcEnd: got %d violations, want 1 (30 s unseen at the end)", len(vs))
	}
}
