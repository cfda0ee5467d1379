package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// checkCase is one hand-made history and what the checker must say of it.
type checkCase struct {
	name  string
	build func(b *builder) *History
	// fails is the check that must report a violation ("" : none may).
	fails string
	// names must all appear in that violation's history.
	names []string
	// also are other checks allowed to fail with it (the same fault seen
	// another way).
	also []string
}

func runCases(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckWith(c.build(newBuilder()), CheckOptions{Timeout: 5 * time.Second})
			if c.fails == "" {
				if r.Failed() {
					t.Fatalf("a history that keeps every promise was reported broken:\n%s", r)
				}
				return
			}
			var found *Violation
			for i, v := range r.Violations {
				switch {
				case v.Check == c.fails && found == nil:
					found = &r.Violations[i]
				case v.Check != c.fails && !contains(c.also, v.Check):
					t.Errorf("unexpected %s violation: %s", v.Check, v.What)
				}
			}
			if found == nil {
				t.Fatalf("no %s violation reported:\n%s", c.fails, r)
			}
			hist := strings.Join(found.History, "\n")
			for _, n := range c.names {
				if !strings.Contains(hist, n) {
					t.Errorf("the violation's history does not name %q:\n%s: %s\n%s", n, found.Subject, found.What, hist)
				}
			}
			if !strings.Contains(r.String(), found.What) {
				t.Errorf("the summary does not print the violation:\n%s", r)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCheckGPUs(t *testing.T) {
	runCases(t, []checkCase{
		{name: "claims and releases one after another pass", build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 12, 14)
			b.release(0, a, 20, 30)
			c := b.claim(1, "n1", []int{0}, 2, 40, 50)
			b.read(2, "n1", map[int]string{0: c.ID, 1: ""}, 60, 70)
			return b.history(100)
		}},
		{name: "a double grant fails", fails: CheckGPU, names: []string{"acquire n1-1", "acquire n1-2", "client 1 via n1: claim"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.claim(1, "n1", []int{0}, 2, 20, 30)
			return b.history(100)
		}},
		{name: "overlapping claims both granted fail", fails: CheckGPU, names: []string{"acquire n1-1", "acquire n1-2"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{1}, 1, 0, 10)
			b.claim(1, "n1", []int{1}, 2, 5, 15)
			return b.history(100)
		}},
		{name: "a read that sees a released lease fails", fails: CheckGPU, names: []string{"release n1-1", "read: n1-1", "board of n1"}, build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.release(0, a, 20, 30)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 40, 50)
			return b.history(100)
		}},
		{name: "a token that goes backwards fails", fails: CheckGPU, also: []string{CheckTokens}, names: []string{"acquire n1-5 (token 5)", "acquire n1-3 (token 3)"}, build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 5, 0, 10)
			b.release(0, a, 20, 30)
			b.claim(1, "n1", []int{0}, 3, 40, 50)
			return b.history(100)
		}},
		{name: "an unknown claim that took effect is no violation", build: func(b *builder) *History {
			l := lease.Lease{Node: "n1", Token: 1, GPUs: []int{0}, RequestID: "req-000001"}
			b.op(Op{Client: 0, Kind: OpClaim, Node: "n1", GPUs: []int{0}, RequestID: l.RequestID, Outcome: Unknown, Err: "connection reset"}, 0, -1)
			b.read(1, "n1", map[int]string{0: "", 1: ""}, 1, 2)
			b.put(l, 50, 51)
			b.read(1, "n1", map[int]string{0: "n1-1", 1: ""}, 60, 61)
			b.end("n1-1", []int{0}, lease.EndExpired, 70, 71)
			b.read(1, "n1", map[int]string{0: "", 1: ""}, 80, 81)
			return b.history(100)
		}},
		{name: "an unknown claim that took effect, then vanished, fails", fails: CheckGPU, names: []string{"→ unknown (connection reset)", "put n1-1", "read: free"}, build: func(b *builder) *History {
			l := lease.Lease{Node: "n1", Token: 1, GPUs: []int{0}, RequestID: "req-000001"}
			b.op(Op{Client: 0, Kind: OpClaim, Node: "n1", GPUs: []int{0}, RequestID: l.RequestID, Outcome: Unknown, Err: "connection reset"}, 0, -1)
			b.put(l, 50, 51)
			b.read(1, "n1", map[int]string{0: "", 1: ""}, 400, 401)
			return b.history(1000)
		}},
		{name: "an unknown claim that did not take effect is no violation", build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpClaim, Node: "n1", GPUs: []int{0}, RequestID: "req-000002", Outcome: Unknown}, 0, -1)
			b.read(1, "n1", map[int]string{0: "", 1: ""}, 10, 12)
			c := b.claim(1, "n1", []int{0}, 1, 20, 30)
			b.read(2, "n1", map[int]string{0: c.ID, 1: ""}, 40, 41)
			return b.history(100)
		}},
		{name: "a 2-GPU claim holds both", build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0, 1}, 1, 0, 10)
			b.read(1, "n1", map[int]string{0: a.ID, 1: a.ID}, 12, 14)
			b.release(0, a, 20, 30)
			c := b.claim(1, "n1", []int{1}, 2, 40, 50)
			b.read(2, "n1", map[int]string{0: "", 1: c.ID}, 60, 70)
			return b.history(100)
		}},
		{name: "a 2-GPU claim read as holding one fails", fails: CheckGPU, names: []string{"acquire n1-1", "read: free"}, build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0, 1}, 1, 0, 10)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 12, 14)
			return b.history(100)
		}},
		{name: "a release refused as not found while held fails", fails: CheckGPU, names: []string{"not-held n1-1", "not_found"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.op(Op{Client: 0, Kind: OpRelease, Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeNotFound}, 20, 30)
			return b.history(100)
		}},
		{name: "a release refused after expiry passes, an unavailable one says nothing", build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.op(Op{Client: 0, Kind: OpExtend, Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeUnavailable}, 11, 12)
			b.op(Op{Client: 0, Kind: OpExtend, Node: "n1", LeaseID: "n1-1", Outcome: OK}, 12, 13)
			b.end("n1-1", []int{0}, lease.EndExpired, 15, 16)
			b.op(Op{Client: 0, Kind: OpRelease, Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeNotFound}, 20, 30)
			b.op(Op{Client: 0, Kind: OpRelease, Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeUnavailable}, 40, 50)
			return b.history(100)
		}},
		{name: "a not-found from an agent that does not know the node says nothing", build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.op(Op{Client: 0, Kind: OpRelease, Via: "n2", Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeNotFound,
				Err: "no node n1 in this cluster: `dibs ls` shows the nodes"}, 20, 30)
			return b.history(100)
		}},
		{name: "a not-found the owner sent through another agent fails while held", fails: CheckGPU, names: []string{"not-held n1-1", "via n2"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.op(Op{Client: 0, Kind: OpExtend, Via: "n2", Node: "n1", LeaseID: "n1-1", Outcome: Refused, Code: refusal.CodeNotFound,
				Err: "no lease n1-1 on n1: `dibs ls` shows the live ones"}, 20, 30)
			return b.history(100)
		}},
		{name: "an extend granted after the end fails", fails: CheckGPU, names: []string{"held n1-1", "expired"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.end("n1-1", []int{0}, lease.EndExpired, 15, 16)
			b.op(Op{Client: 0, Kind: OpExtend, Node: "n1", LeaseID: "n1-1", Outcome: OK}, 300, 310)
			return b.history(1000)
		}},
		{name: "a read through another agent is not the owner's truth", build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.op(Op{Client: 1, Kind: OpRead, Via: "n2", Node: "n1", Holders: map[int]string{0: "", 1: ""}, Outcome: OK}, 11, 12)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 13, 14)
			return b.history(100)
		}},
	})
}

func TestCheckAckedLeases(t *testing.T) {
	runCases(t, []checkCase{
		{name: "a lease kept across a kill passes", build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.fault(FaultKill, []string{"n1"}, 20, 40)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 50, 60)
			return b.history(100)
		}},
		{name: "an acked lease lost after a kill fails", fails: CheckAckedLease, also: []string{CheckGPU}, names: []string{"kill n1", "claim n1 GPUs [0]", "board of n1 → ok [0=- 1=-]"}, build: func(b *builder) *History {
			b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.fault(FaultKill, []string{"n1"}, 20, 40)
			b.read(1, "n1", map[int]string{0: "", 1: ""}, 50, 60)
			return b.history(100)
		}},
		{name: "an acked lease never written fails", fails: CheckAckedLease, names: []string{"client 0 via n1: claim"}, build: func(b *builder) *History {
			l := lease.Lease{ID: "n1-1", Node: "n1", Token: 1, GPUs: []int{0}}
			b.op(Op{Client: 0, Kind: OpClaim, Node: "n1", GPUs: []int{0}, LeaseID: l.ID, Lease: &l, Outcome: OK}, 0, 10)
			return b.history(100)
		}},
	})
}

// gangEntry is a 2-node gang entry submitted at n1.
func gangEntry() queue.QueueEntry {
	return queue.QueueEntry{ID: "n1-q2", Origin: "n1", Nodes: 2, GPUsPerNode: 1, Job: &job.Job{Command: []string{"train"}}}
}

// runningGang reserves and commits both ranks of gangEntry on n2 and n3.
func runningGang(b *builder) (r0, r1 lease.Lease) {
	e := gangEntry()
	b.entry(e, 0, 0.1)
	r0, r1 = rank("n2", 1, []int{0}, e.Key(), 0), rank("n3", 1, []int{0}, e.Key(), 1)
	b.put(r0, 1, 2)
	b.put(r1, 1, 2)
	b.put(commit(r0), 1000, 1001)
	b.put(commit(r1), 1000, 1001)
	return r0, r1
}

func TestCheckQueueAndGangs(t *testing.T) {
	runCases(t, []checkCase{
		{name: "an entry run twice fails", fails: CheckRunTwice, names: []string{"put n2-1", "put n3-1", "exit-0"}, build: func(b *builder) *History {
			e := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1}
			b.entry(e, 0, 1)
			b.put(lease.Lease{Node: "n2", Token: 1, GPUs: []int{0}, Entry: e.Key()}, 10, 11)
			b.end("n2-1", []int{0}, lease.ExitReason(0), 100, 101)
			b.put(lease.Lease{Node: "n3", Token: 1, GPUs: []int{1}, Entry: e.Key()}, 200, 201)
			return b.history(300)
		}},
		{name: "a requeued entry runs again under its next attempt", build: func(b *builder) *History {
			e := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Requeue: true, MaxRestarts: 1}
			b.entry(e, 0, 1)
			b.put(lease.Lease{Node: "n2", Token: 1, GPUs: []int{0}, Entry: e.Key()}, 10, 11)
			b.end("n2-1", []int{0}, lease.ExitReason(1), 100, 101)
			e.Attempt, e.Restarts = 1, 1
			b.entry(e, 110, 111)
			b.put(lease.Lease{Node: "n3", Token: 1, GPUs: []int{1}, Entry: e.Key()}, 200, 201)
			return b.history(300)
		}},
		{name: "a gang placement given back and retried passes", build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			b.put(rank("n2", 1, []int{0}, e.Key(), 0), 1, 2)
			b.end("n2-1", []int{0}, lease.EndReleased, 3, 4)
			r0, r1 := rank("n2", 2, []int{0}, e.Key(), 0), rank("n3", 1, []int{0}, e.Key(), 1)
			b.put(r0, 10, 11)
			b.put(r1, 10, 11)
			b.put(commit(r0), 12, 13)
			b.put(commit(r1), 12, 13)
			b.end(r0.ID, r0.GPUs, lease.ExitReason(0), 1000, 1001)
			b.end(r1.ID, r1.GPUs, lease.ExitReason(0), 1000, 1001)
			return b.history(2000)
		}},
		{name: "a reservation whose answer was lost, expired unused while the rank ran elsewhere, passes", build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			orphan := rank("n2", 1, []int{0}, e.Key(), 1)
			b.put(orphan, 1, 2) // durable as n2 went away: the scheduler never heard
			b.fault(FaultRestart, []string{"n2"}, 0.5, 3000)
			r0, r1 := rank("n1", 1, []int{0}, e.Key(), 0), rank("n3", 1, []int{0}, e.Key(), 1)
			b.put(r0, 500, 501)
			b.put(r1, 500, 501)
			b.put(commit(r0), 502, 503)
			b.put(commit(r1), 502, 503)
			b.end(orphan.ID, orphan.GPUs, lease.EndReservationExpired, 5000, 5001)
			b.end(r0.ID, r0.GPUs, lease.ExitReason(0), 9000, 9001)
			b.end(r1.ID, r1.GPUs, lease.ExitReason(0), 9000, 9001)
			return b.history(20000)
		}},
		{name: "a rank committed on two nodes at once fails", fails: CheckRunTwice, names: []string{"put n2-1", "put n3-1"}, build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			a, c := rank("n2", 1, []int{0}, e.Key(), 1), rank("n3", 1, []int{0}, e.Key(), 1)
			b.put(a, 1, 2)
			b.put(c, 500, 501)
			b.put(commit(a), 502, 503)
			b.put(commit(c), 502, 503)
			return b.history(20000)
		}},
		{name: "a gang partial beyond the reservation lifetime fails", fails: CheckGang, names: []string{"put n2-1", "end n3-1", "reservation-expired"}, build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			r0, r1 := rank("n2", 1, []int{0}, e.Key(), 0), rank("n3", 1, []int{0}, e.Key(), 1)
			b.put(r0, 1, 2)
			b.put(r1, 1, 2)
			b.put(commit(r0), 1000, 1001)
			b.end(r1.ID, r1.GPUs, lease.EndReservationExpired, 30000, 30001)
			return b.history(400000)
		}},
		{name: "a gang stopped in time after a rank failed passes", build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.end(r1.ID, r1.GPUs, lease.ExitReason(1), 5000, 5001)
			b.end(r0.ID, r0.GPUs, lease.PreemptedReason(lease.PreemptGang), 60000, 60001)
			return b.history(400000)
		}},
		{name: "a gang rank left running after the other failed fails", fails: CheckGang, names: []string{"exit-1", "put n2-1"}, build: func(b *builder) *History {
			_, r1 := runningGang(b)
			b.end(r1.ID, r1.GPUs, lease.ExitReason(1), 5000, 5001)
			return b.history(400000)
		}},
		{name: "a gang whose node was killed stops its other rank", build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.fault(FaultKill, []string{"n3"}, 100000, 300000)
			b.end(r0.ID, r0.GPUs, lease.PreemptedReason(lease.PreemptGang), 150000, 150001)
			b.end(r1.ID, r1.GPUs, lease.PreemptedReason(lease.PreemptGang), 310000, 310001)
			return b.history(500000)
		}},
		{name: "a gang stopped though its node's agent restarted within the grace fails", fails: CheckRestart, names: []string{"restart n3", "preempted-gang"}, build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.fault(FaultRestart, []string{"n3"}, 100000, 105000)
			b.end(r0.ID, r0.GPUs, lease.PreemptedReason(lease.PreemptGang), 106000, 106001)
			b.end(r1.ID, r1.GPUs, lease.PreemptedReason(lease.PreemptGang), 107000, 107001)
			return b.history(500000)
		}},
		{name: "a gang that outlives its node's restart within the grace passes", build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.fault(FaultRestart, []string{"n3"}, 100000, 105000)
			b.fault(FaultKill, []string{"n2"}, 200000, 203000)
			b.end(r0.ID, r0.GPUs, lease.ExitReason(0), 400000, 400001)
			b.end(r1.ID, r1.GPUs, lease.ExitReason(0), 400000, 400001)
			return b.history(500000)
		}},
		{name: "a gang whose node's agent stayed away past the grace may be stopped", build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.fault(FaultRestart, []string{"n3"}, 100000, 300000)
			b.end(r0.ID, r0.GPUs, lease.PreemptedReason(lease.PreemptGang), 150000, 150001)
			b.end(r1.ID, r1.GPUs, lease.PreemptedReason(lease.PreemptGang), 310000, 310001)
			return b.history(500000)
		}},
		{name: "a gang whose node died and never stops fails", fails: CheckGang, names: []string{"kill n3", "put n2-1"}, build: func(b *builder) *History {
			runningGang(b)
			b.fault(FaultKill, []string{"n3"}, 100000, 450000)
			return b.history(500000)
		}},
		{name: "a gang cut off from its origin stops, the far rank once the partition heals", build: func(b *builder) *History {
			r0, r1 := runningGang(b)
			b.fault(FaultPartition, []string{"n3"}, 100000, 300000)
			b.end(r0.ID, r0.GPUs, lease.PreemptedReason(lease.PreemptGang), 150000, 150001)
			b.end(r1.ID, r1.GPUs, lease.PreemptedReason(lease.PreemptGang), 320000, 320001)
			return b.history(500000)
		}},
		{name: "a rank whose node died before its commit is lost too", fails: CheckGang, names: []string{"pause n3", "put n2-1"}, build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			r0, r1 := rank("n2", 1, []int{0}, e.Key(), 0), rank("n3", 1, []int{0}, e.Key(), 1)
			b.put(r0, 1, 2)
			b.put(r1, 1, 2)
			b.fault(FaultPause, []string{"n3"}, 500, 450000)
			b.put(commit(r0), 1000, 1001)
			b.end(r1.ID, r1.GPUs, lease.EndReservationExpired, 451000, 451001)
			return b.history(500000)
		}},
		{name: "a reservation never committed nor ended fails", fails: CheckGang, names: []string{"put n2-1", "reserved"}, build: func(b *builder) *History {
			e := gangEntry()
			b.entry(e, 0, 0.1)
			b.put(rank("n2", 1, []int{0}, e.Key(), 0), 1, 2)
			return b.history(100000)
		}},
		{name: "an acked submission never written fails", fails: CheckQueueLost, names: []string{"submit at n1"}, build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpSubmit, Node: "n1", Nodes: 1, EntryID: "n1-q1", Outcome: OK}, 0, 10)
			return b.history(100)
		}},
		{name: "an entry gone at the end though never deleted fails", fails: CheckQueueLost, names: []string{"put entry n1-q1"}, build: func(b *builder) *History {
			b.entry(queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1}, 4, 5)
			b.op(Op{Client: 0, Kind: OpSubmit, Node: "n1", Nodes: 1, EntryID: "n1-q1", Outcome: OK}, 0, 10)
			b.h.FinalEntries = map[string][]string{"n1": {}}
			return b.history(100)
		}},
		{name: "entries waiting or cancelled pass", build: func(b *builder) *History {
			b.entry(queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1}, 4, 5)
			b.op(Op{Client: 0, Kind: OpSubmit, Node: "n1", Nodes: 1, EntryID: "n1-q1", Outcome: OK}, 0, 10)
			b.entry(queue.QueueEntry{ID: "n1-q2", Origin: "n1", Nodes: 1, GPUsPerNode: 1}, 14, 15)
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q2", Outcome: OK}, 20, 30)
			b.deleteEntry("n1", "n1-q2", 24, 25)
			b.h.FinalEntries = map[string][]string{"n1": {"n1-q1"}}
			return b.history(100)
		}},
		{name: "an entry dropped though it never ran nor was cancelled fails", fails: CheckQueueLost, names: []string{"delete entry n1-q1"}, build: func(b *builder) *History {
			b.entry(queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1}, 4, 5)
			b.deleteEntry("n1", "n1-q1", 24, 25)
			return b.history(100)
		}},
	})
}

func TestCheckHealsAndMembership(t *testing.T) {
	b := newBuilder()
	b.h.Heals = []Heal{{Fault: FaultPartition, At: at(10), Took: 200 * time.Millisecond, Converged: true},
		{Fault: FaultKill, At: at(20), Took: 6 * time.Second, Converged: true}}
	b.h.FalseDead = []Membership{{At: at(30), Observer: "n1", Member: "n2", State: "dead"}}
	r := Check(b.history(100))
	by := r.ByCheck()
	if by[CheckConvergence] != 1 || by[CheckFalseDead] != 1 || r.HealsConverged != 1 || r.FalseDead != 1 {
		t.Fatalf("a 6 s heal and a false dead should each be one violation:\n%s", r)
	}
	if s := r.String(); !strings.Contains(s, "heals: 1 of 2 converged in time (50.0 %)") || !strings.Contains(s, "false dead: 1") {
		t.Errorf("the summary does not give the convergence and false alarms:\n%s", s)
	}
}

// A violation in a later piece of a GPU's history starts from the state
// the pieces before left, and must not blame the lease that held the GPU
// then if it was released since.
func TestShortestHistoryAcrossChunks(t *testing.T) {
	b := newBuilder()
	a := b.claim(0, "n1", []int{0}, 1, 0, 10)
	for i := range 10 {
		b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, float64(20+10*i), float64(25+10*i))
	}
	b.release(0, a, 200, 210)
	b.claim(0, "n1", []int{0}, 2, 220, 230)
	for i := range 2 {
		b.read(1, "n1", map[int]string{0: "n1-2", 1: ""}, float64(240+10*i), float64(245+10*i))
	}
	b.claim(2, "n1", []int{0}, 3, 400, 410)
	// Cut once, while n1-1 holds GPU 0: the second piece has its release.
	r := CheckWith(b.history(1000), CheckOptions{MinChunk: 8})
	if r.Chunks < 2 || len(r.Violations) != 1 {
		t.Fatalf("want one violation found in a later piece of GPU 0's history:\n%s", r)
	}
	v := r.Violations[0]
	hist := strings.Join(v.History, "\n")
	if !strings.Contains(v.What, "n1-3 was granted while n1-2 held it") || !strings.Contains(hist, "acquire n1-2") || strings.Count(hist, "read:") > 0 {
		t.Errorf("the violation should blame n1-2 with a short history:\n%s\n%s", v.What, hist)
	}
	if len(v.History) >= len(b.h.Ops) {
		t.Errorf("the shortest history has %d lines, the whole one %d ops", len(v.History), len(b.h.Ops))
	}
}

func TestReportSummary(t *testing.T) {
	b := newBuilder()
	a := b.claim(0, "n1", []int{0}, 1, 0, 10)
	b.fault(FaultKill, []string{"n2"}, 20, 40)
	b.fault(FaultPartition, []string{"n3"}, 50, 60)
	b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 70, 80)
	b.op(Op{Client: 2, Kind: OpClaim, Node: "n1", GPUs: []int{0}, Outcome: Refused, Code: refusal.CodeConflict}, 70, 80)
	r := Check(b.history(90000))
	if r.Failed() {
		t.Fatalf("want no violation:\n%s", r)
	}
	s := r.String()
	for _, want := range []string{
		"ops: 3 in 1m30s (claim 2, read 1; ok 2, refused 1), 1 writes\n",
		"faults: 2 (kill 1, partition 1)\n",
		"heals: none measured\n",
		"linearizability: 2 GPUs in 2 chunks, 0 undecided",
		"violations: 0 (gpu-linearizable 0, acked-lease-lost 0, token-order 0, queue-entry-lost 0, entry-run-twice 0, array-task-twice 0, array-task-lost 0, array-throttle 0, dependency-order 0, gang-partial 0, restart-ended-work 0, reboot-end 0, service-two-copies 0, service-came-back 0, service-down 0, convergence 0, false-dead 0)\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the summary lacks %q:\n%s", want, s)
		}
	}
}
