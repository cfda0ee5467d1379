package queue_test

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// TestOverdueLeaseReclaimedForAWaiterBehindTheHead is the audit's "once,
// not confirmed": a lease past its end (end action warn: it lingers) holds
// exactly the GPU a request needs, but the request is not first in line.
// The head, which needs the whole node, cannot start even with the lease
// ended, so nothing was reclaimed; the request behind it waited for the
// head's estimated run on that GPU (its "in 1m" became hours). A request
// that could backfill onto the GPU (it ends before the head could start)
// has the overdue lease reclaimed for it; one that would delay the head
// does not.
func TestOverdueLeaseReclaimedForAWaiterBehindTheHead(t *testing.T) {
	node := func() lease.SchedNode {
		return snode("gpu-01", 4,
			on(1, bob, gpus(0, 2), t0, t0.Add(50*time.Minute)),
			on(2, carol, []int{3}, t0.Add(-2*time.Hour), t0.Add(-10*time.Minute)))
	}
	head := ask("gpu-01-q1", alice, 1, 4, time.Hour, t0)
	short := ask("gpu-01-q2", lease.Caller{UID: 1004, User: "dave"}, 1, 1, 30*time.Minute, t0.Add(time.Second))
	p := queue.Schedule([]queue.QueueEntry{head, short}, []lease.SchedNode{node()}, nil, t0, queue.SchedConfig{})
	checkList(t, "reclaims for a request that fits before the head", reclaimed(p), []string{"gpu-01-2 overdue for gpu-01-q2"})
	r := ranked(t, p, short.ID)
	if r.Reason.Code != queue.WaitReclaim || r.EstStart.IsZero() || r.EstStart.After(t0.Add(5*time.Minute)) {
		t.Errorf("the request behind the head: reason %+v, expected %v; want reclaim, within the preempt grace", r.Reason, r.EstStart)
	}

	long := short
	long.Duration = 2 * time.Hour
	p = queue.Schedule([]queue.QueueEntry{head, long}, []lease.SchedNode{node()}, nil, t0, queue.SchedConfig{})
	checkList(t, "reclaims for a request that would delay the head", reclaimed(p), nil)
}
