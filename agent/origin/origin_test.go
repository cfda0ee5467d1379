package origin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// TestGangWithARankThatNeverStartedIsStopped: a gang marked running whose
// second rank never committed (its reservation expired) runs partly only
// until a reservation's lifetime has passed; then its running rank is
// stopped and, once that ends, the attempt fails and is requeued.
func TestGangWithARankThatNeverStartedIsStopped(t *testing.T) {
	clk := clock.NewFake(t0)
	var told []event.Event
	o := origin.New("n1", origin.Deps{Store: storetest.New(storetest.Options{}), Clock: clk,
		Events: func(e event.Event) { told = append(told, e) }})
	e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 2, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
		Requeue: true, MaxRestarts: 1, Job: &job.Job{Command: []string{"train"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Place(e.Key(), "n1/a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.MarkStarted(e.Key()); !ok {
		t.Fatal("not marked started")
	}
	rank0 := lease.Lease{ID: "n1-1", Node: "n1", GPUs: []int{0}, User: "alice", UID: 1001, Token: 1, Entry: e.Key(), Gang: "g", StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	n2 := queue.NodeView{Name: "n2", State: queue.NodeAlive, HasState: true,
		Ended: []lease.EndedRun{{Entry: e.Key(), Lease: "n2-1", Reason: lease.EndReservationExpired, At: t0, Reserved: true}}}
	view := func(ls ...lease.Lease) queue.ClusterView {
		return queue.NewClusterView(queue.NodeView{Name: "n1", State: queue.NodeAlive, HasState: true, Leases: ls}, []queue.NodeView{n2}, clk.Now())
	}
	var stopped []string
	stop := func(_ context.Context, l lease.Lease) error { stopped = append(stopped, l.ID); return nil }
	const ttl = 30 * time.Second
	for _, step := range []time.Duration{0, 10 * time.Second, 19 * time.Second} {
		clk.Advance(step)
		o.Reconcile(context.Background(), view(rank0), time.Minute, ttl, stop, nil)
		if len(stopped) > 0 {
			t.Fatalf("rank 0 stopped after %s, before a reservation's lifetime (%s)", step, ttl)
		}
	}
	clk.Advance(2 * time.Second)
	o.Reconcile(context.Background(), view(rank0), time.Minute, ttl, stop, nil)
	if len(stopped) != 1 || stopped[0] != "n1-1" {
		t.Fatalf("stopped %v once the rank was missing for %s, want n1-1", stopped, ttl)
	}
	// Rank 0 ends as stopped: the attempt failed and goes back in the queue.
	n1 := queue.NodeView{Name: "n1", State: queue.NodeAlive, HasState: true,
		Ended: []lease.EndedRun{{Entry: e.Key(), Lease: "n1-1", Reason: lease.PreemptedReason(lease.PreemptGang), At: clk.Now()}}}
	o.Reconcile(context.Background(), queue.NewClusterView(n1, []queue.NodeView{n2}, clk.Now()), time.Minute, ttl, stop, nil)
	got, ok := o.Get(e.ID)
	if !ok || got.Running || got.Restarts != 1 {
		t.Errorf("entry after the failed attempt: %+v (found %v), want requeued once", got, ok)
	}
	// The requeue is an event whose notice tells alice, everywhere.
	var requeue *event.Event
	for i := range told {
		if told[i].Kind == event.EventRequeue {
			requeue = &told[i]
		}
	}
	if requeue == nil {
		t.Fatalf("events %+v: want a requeue, whose notice tells alice", told)
	}
	if n, ok := requeue.Notice(); !ok || n.User != "alice" || !strings.Contains(n.Text, "back in the queue") {
		t.Errorf("requeue notice %+v (%v), want one telling alice her gang is back in the queue", n, ok)
	}
}

// TestOnlyOneSchedulerMayStartAnAttempt: the origin lets one placer start
// an attempt; another is refused until a start could have shown
// (queue.InFlightTimeout), even across the origin's restart; the first may
// ask again; a running entry is placed by nobody.
func TestOnlyOneSchedulerMayStartAnAttempt(t *testing.T) {
	clk := clock.NewFake(t0)
	disk := storetest.New(storetest.Options{})
	o := origin.New("n1", origin.Deps{Store: disk, Clock: clk})
	e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch})
	if err != nil {
		t.Fatal(err)
	}
	key := e.Key()
	if _, err := o.Place(key, "n1/a"); err != nil {
		t.Fatalf("first placer refused: %v", err)
	}
	if _, err := o.Place(key, "n2/b"); refusal.CodeOf(err) != refusal.CodeConflict {
		t.Fatalf("a second placer got %v, want a conflict", err)
	}
	if _, err := o.Place(key, "n1/a"); err != nil {
		t.Fatalf("the same placer asking again was refused: %v", err)
	}
	// A restart keeps the placer: nobody else may start it yet.
	again := origin.New("n1", origin.Deps{Store: disk.Crash(), Clock: clk})
	if err := again.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Place(key, "n2/b"); refusal.CodeOf(err) != refusal.CodeConflict {
		t.Fatalf("after a restart a second placer got %v, want a conflict", err)
	}
	clk.Advance(queue.InFlightTimeout + time.Second)
	if _, err := again.Place(key, "n2/b"); err != nil {
		t.Fatalf("once the first placer's start could have shown, another was refused: %v", err)
	}
	if _, ok := again.MarkStarted(key); !ok {
		t.Fatal("not marked started")
	}
	if _, err := again.Place(key, "n3/c"); refusal.CodeOf(err) != refusal.CodeConflict {
		t.Fatalf("placing a running entry got %v, want a conflict", err)
	}
}

// TestRequeuedRunWaitsAndItsStatusSaysWhy: a failed attempt of a run that
// asked for --requeue goes back in the queue with its retry spaced (the
// delay grows with every restart, jitter injected), and the origin's
// structured status says it backs off, why and until when; the last
// failure, past --max-restarts, is a failed status with its reason.
func TestRequeuedRunWaitsAndItsStatusSaysWhy(t *testing.T) {
	clk := clock.NewFake(t0)
	var asked []int
	o := origin.New("n1", origin.Deps{Store: storetest.New(storetest.Options{}), Clock: clk,
		RetryDelay: func(restart int) time.Duration {
			asked = append(asked, restart)
			return queue.RequeueDelay(restart, 10*time.Second, time.Minute, 0.5)
		}})
	e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
		Requeue: true, MaxRestarts: 2, Job: &job.Job{Command: []string{"train"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := o.Status(e.ID, clk.Now()); st.State != queue.EntryWaiting {
		t.Fatalf("status after submit = %+v, want waiting", st)
	}
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second} {
		if _, ok := o.MarkStarted(e.Key()); !ok {
			t.Fatalf("attempt %d not marked started", i)
		}
		if st := o.Status(e.ID, clk.Now()); st.State != queue.EntryRunning {
			t.Fatalf("attempt %d: status %+v, want running", i, st)
		}
		cur, _ := o.Get(e.ID)
		next, requeued, ok := o.Finish(cur, true, false, "lease n1-1 ended: exit-1")
		if !ok || !requeued {
			t.Fatalf("attempt %d: finish = requeued %v ok %v", i, requeued, ok)
		}
		if got := next.RetryAt.Sub(clk.Now()); got != want {
			t.Errorf("restart %d waits %s, want %s", i+1, got, want)
		}
		st := o.Status(e.ID, clk.Now())
		if st.State != queue.EntryBackoff || !st.RetryAt.Equal(next.RetryAt) || st.Reason != "lease n1-1 ended: exit-1" || st.Restarts != i+1 {
			t.Errorf("status while it backs off = %+v", st)
		}
		clk.Advance(want)
		if st := o.Status(e.ID, clk.Now()); st.State != queue.EntryWaiting {
			t.Errorf("status once its retry is due = %+v, want waiting", st)
		}
		e = next
	}
	if len(asked) != 2 || asked[0] != 1 || asked[1] != 2 {
		t.Errorf("delays asked for restarts %v, want [1 2]", asked)
	}
	o.MarkStarted(e.Key())
	cur, _ := o.Get(e.ID)
	if _, requeued, ok := o.Finish(cur, true, false, "node n2 left the cluster"); !ok || requeued {
		t.Fatalf("third failure: requeued %v ok %v, want finished (max restarts 2)", requeued, ok)
	}
	if st := o.Status(e.ID, clk.Now()); st.State != queue.EntryFailed || st.Reason != "node n2 left the cluster" {
		t.Errorf("status after the last failure = %+v, want failed with its reason", st)
	}
	if st := o.Status("n1-q99", clk.Now()); st.State != queue.EntryUnknown {
		t.Errorf("status of an entry never seen = %+v, want unknown", st)
	}
}

// TestReconcileHoldsUntilEveryLivePeerIsHeard: an origin that has just
// started (a peer alive but its state not heard yet) judges nothing, so a
// rank on that peer is not taken for missing or lost.
func TestReconcileHoldsUntilEveryLivePeerIsHeard(t *testing.T) {
	clk := clock.NewFake(t0)
	o := origin.New("n1", origin.Deps{Store: storetest.New(storetest.Options{}), Clock: clk})
	e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 2, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
		Job: &job.Job{Command: []string{"train"}}})
	if err != nil {
		t.Fatal(err)
	}
	o.MarkStarted(e.Key())
	rank0 := lease.Lease{ID: "n1-1", Node: "n1", GPUs: []int{0}, User: "alice", UID: 1001, Token: 1, Entry: e.Key(), Gang: "g", StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	// n2 ended its rank badly, but this origin has not heard n2 yet.
	unheard := queue.NodeView{Name: "n2", State: queue.NodeAlive}
	var stopped []string
	stop := func(_ context.Context, l lease.Lease) error { stopped = append(stopped, l.ID); return nil }
	for range 3 {
		clk.Advance(time.Minute)
		v := queue.NewClusterView(queue.NodeView{Name: "n1", Leases: []lease.Lease{rank0}}, []queue.NodeView{unheard}, clk.Now())
		o.Reconcile(context.Background(), v, 5*time.Minute, 30*time.Second, stop, nil)
	}
	if len(stopped) > 0 {
		t.Fatalf("stopped %v before n2 was heard", stopped)
	}
	if st := o.Status(e.ID, clk.Now()); st.State != queue.EntryRunning {
		t.Fatalf("status = %+v, want running", st)
	}
}
