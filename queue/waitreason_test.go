package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// checkReason asserts the entry's reason: its code, its node and words
// that hold want; Waiting is the same words.
func checkReason(t *testing.T, r queue.Ranked, code queue.WaitCode, node, want string) {
	t.Helper()
	if r.Reason.Code != code || r.Reason.Node != node || !strings.Contains(r.Reason.Words, want) || r.Waiting != r.Reason.Words {
		t.Errorf("%s waits for %+v (waiting %q); want code %s on %q saying %q", r.Entry.ID, r.Reason, r.Waiting, code, node, want)
	}
}

// TestWaitReasonNamesTheCause: the queue's reason is the cause on the node
// where the entry would start soonest, as a code and words, not "behind
// higher-priority requests" for every entry after the first.
func TestWaitReasonNamesTheCause(t *testing.T) {
	t.Run("quota, at equal priority", func(t *testing.T) {
		// alice holds her quota; bob's entry, submitted first at the same
		// priority, is behind carol's because it would borrow.
		n := snode("gpu-01", 2, on(1, alice, []int{0, 1}, t0, t0.Add(time.Hour)))
		bo := ask("gpu-01-q1", bob, 1, 2, time.Hour, t0)
		ca := ask("gpu-01-q2", carol, 1, 2, time.Hour, t0.Add(time.Second))
		cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 2, "carol": 2}}
		p := queue.Schedule([]queue.QueueEntry{bo, ca}, []lease.SchedNode{n}, nil, t0, cfg)
		checkList(t, "order", order(p), []string{"gpu-01-q2", "gpu-01-q1"})
		checkReason(t, ranked(t, p, "gpu-01-q1"), queue.WaitQuota, "gpu-01", "would borrow beyond its quota, so gpu-01-q2 (within quota) gets GPU")
	})
	t.Run("squatted, behind the head", func(t *testing.T) {
		// The head waits for a lease; the second entry's GPUs are used
		// by a process with no lease.
		a := snode("gpu-01", 2, on(1, carol, []int{0, 1}, t0, t0.Add(time.Hour)))
		b := snode("gpu-02", 2)
		b.Snap = withProc(b.Snap, 1, proc(77, carol, "python"))
		head := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
		head.Node = "gpu-01"
		next := ask("gpu-01-q2", bob, 1, 2, time.Hour, t0.Add(time.Second))
		next.Node = "gpu-02"
		p := queue.Schedule([]queue.QueueEntry{head, next}, []lease.SchedNode{a, b}, nil, t0, queue.SchedConfig{})
		checkReason(t, ranked(t, p, "gpu-01-q1"), queue.WaitHeld, "gpu-01", "next to start: GPU 1 of gpu-01 is held by carol's lease gpu-01-1 for 1h more")
		checkReason(t, ranked(t, p, "gpu-01-q2"), queue.WaitSquat, "gpu-02", "GPU 1 of gpu-02 is in use outside dibs")
	})
	t.Run("order, then fair share", func(t *testing.T) {
		n := snode("gpu-01", 2, on(1, carol, []int{0, 1}, t0, t0.Add(time.Hour)))
		first := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
		second := ask("gpu-01-q2", alice, 1, 2, time.Hour, t0.Add(time.Second))
		p := queue.Schedule([]queue.QueueEntry{first, second}, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
		checkReason(t, ranked(t, p, "gpu-01-q2"), queue.WaitOrder, "gpu-01", "goes first to gpu-01-q1, submitted before it at the same priority")
		// bob used GPUs lately, alice did not: her later entry goes first.
		late := ask("gpu-01-q3", alice, 1, 2, time.Hour, t0.Add(2*time.Second))
		bobs := ask("gpu-01-q4", bob, 1, 2, time.Hour, t0)
		p = queue.Schedule([]queue.QueueEntry{late, bobs}, []lease.SchedNode{n}, queue.Usage{"bob": 1e6}, t0, queue.SchedConfig{})
		checkReason(t, ranked(t, p, "gpu-01-q4"), queue.WaitFairShare, "gpu-01", "goes first to gpu-01-q3, ranked higher by fair share")
	})
	t.Run("booking", func(t *testing.T) {
		n := snode("gpu-01", 2)
		n.Bookings = []lease.Lease{booked("gpu-01", 9, carol, []int{0, 1}, t0.Add(30*time.Minute), t0.Add(2*time.Hour))}
		e := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
		p := queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
		checkReason(t, ranked(t, p, "gpu-01-q1"), queue.WaitBooking, "gpu-01", "is booked before its 1h would end")
	})
	t.Run("every node's reason, when asked", func(t *testing.T) {
		a := snode("gpu-01", 2, on(1, carol, []int{0, 1}, t0, t0.Add(time.Hour)))
		b := snode("gpu-02", 1)
		c := snode("gpu-03", 2)
		c.Alive = false
		d := snode("gpu-04", 2)
		d.Snap.Host.Tags = []string{"l40s"}
		e := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
		cfg := queue.SchedConfig{Explain: true, Pools: lease.Pools{"l40s": {Users: []string{"bob"}}}}
		p := queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b, c, d}, nil, t0, cfg)
		r := ranked(t, p, "gpu-01-q1")
		checkReason(t, r, queue.WaitHeld, "gpu-01", "held by carol's lease")
		want := map[string]queue.WaitCode{"gpu-01": queue.WaitHeld, "gpu-02": queue.WaitShape, "gpu-03": queue.WaitDown, "gpu-04": queue.WaitPool}
		if len(r.Nodes) != len(want) {
			t.Fatalf("node reasons %+v, want one per node", r.Nodes)
		}
		for _, nr := range r.Nodes {
			if want[nr.Node] != nr.Code || nr.Words == "" {
				t.Errorf("%s: %+v, want code %s with words", nr.Node, nr, want[nr.Node])
			}
		}
		if p = queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b, c, d}, nil, t0, queue.SchedConfig{}); len(p.Order[0].Nodes) != 0 {
			t.Errorf("the scheduler's own pass gives node reasons: %+v", p.Order[0].Nodes)
		}
	})
}

// TestWaitReasonMIGOnANodeWithoutMIG: a MIG request waits for the
// instance on the MIG node; a node with no MIG, whose pool limits would
// also keep it off, is not its reason.
func TestWaitReasonMIGOnANodeWithoutMIG(t *testing.T) {
	na := splitNode("na", onMIG(1, bob, "3g.40gb", t0, t0.Add(time.Hour)))
	nb := snode("nb", 2, on(2, alice, []int{0}, t0, t0.Add(time.Hour)))
	nb.Snap.Host.Tags = []string{"l40s"}
	e := askMIG("na-q1", alice, "3g.40gb", t0)
	e.Origin = "na"
	cfg := queue.SchedConfig{Pools: lease.Pools{"l40s": {MaxGPUs: 1}}}
	p := queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{na, nb}, nil, t0, cfg)
	r := ranked(t, p, "na-q1")
	if strings.Contains(r.Waiting, "nb") || r.Reason.Code != queue.WaitMIG {
		t.Errorf("waits for %+v; want the MIG instance on na, not nb's pool", r.Reason)
	}
	cfg.Explain = true
	p = queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{na, nb}, nil, t0, cfg)
	r = ranked(t, p, "na-q1")
	want := map[string]string{"na": "every MIG instance 3g.40gb of na is held", "nb": "nb has no MIG instance 3g.40gb"}
	if len(r.Nodes) != 2 {
		t.Fatalf("node reasons %+v, want na's and nb's", r.Nodes)
	}
	for _, nr := range r.Nodes {
		if !strings.Contains(nr.Words, want[nr.Node]) {
			t.Errorf("%s: %+v, want it to say %q", nr.Node, nr, want[nr.Node])
		}
	}
}

// TestWaitReasonTerse: the scheduler's own passes get the code without
// words, and the same plan.
func TestWaitReasonTerse(t *testing.T) {
	n := snode("gpu-01", 2, on(1, carol, []int{0, 1}, t0, t0.Add(time.Hour)))
	es := []queue.QueueEntry{ask("gpu-01-q1", alice, 1, 2, time.Hour, t0), ask("gpu-01-q2", bob, 1, 2, time.Hour, t0.Add(time.Second))}
	full := queue.Schedule(es, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	terse := queue.Schedule(es, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{Terse: true})
	for i := range full.Order {
		f, tr := full.Order[i], terse.Order[i]
		if f.Reason.Code != tr.Reason.Code || f.Reason.Node != tr.Reason.Node || tr.Reason.Words != "" || !f.EstStart.Equal(tr.EstStart) {
			t.Errorf("%s: terse %+v, full %+v", f.Entry.ID, tr.Reason, f.Reason)
		}
	}
}
