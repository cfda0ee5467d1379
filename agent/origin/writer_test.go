package origin_test

import (
	"context"
	"slices"
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

// rig is one origin on a fake disk and a fake clock, recording what it
// sets off: events and how often it told the cluster its queue changed.
type rig struct {
	o       *origin.Origin
	disk    *storetest.Store
	clk     *clock.Fake
	events  []event.Event
	changed int
}

func newRig(t *testing.T, deps origin.Deps) *rig {
	t.Helper()
	r := &rig{disk: storetest.New(storetest.Options{}), clk: clock.NewFake(t0)}
	deps.Store, deps.Clock = r.disk, r.clk
	deps.Events = func(e event.Event) { r.events = append(r.events, e) }
	deps.QueueChanged = func() { r.changed++ }
	r.o = origin.New("n1", deps)
	return r
}

// restart is the origin an agent restarted on the same disk would have.
func (r *rig) restart(t *testing.T) *origin.Origin {
	t.Helper()
	o := origin.New("n1", origin.Deps{Store: r.disk.Crash(), Clock: r.clk})
	if err := o.Open(); err != nil {
		t.Fatal(err)
	}
	r.disk = nil
	return o
}

func (r *rig) kinds() []event.EventKind {
	var out []event.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func ids(es []queue.QueueEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func batch(user string, uid int) queue.QueueEntry {
	return queue.QueueEntry{User: user, UID: uid, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
		Job: &job.Job{Command: []string{"train"}}}
}

// within fails the test when f has not returned in a few seconds: a
// writer that still held its lock when it told the cluster (QueueChanged)
// or stopped a rank would deadlock on a callback that reads the origin.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return: it calls out with the origin's lock held", what)
	}
}

// TestWritersCallOutWithTheLockReleased: every change the origin makes
// tells the cluster (QueueChanged) and stops ranks only after its lock is
// released, so a callback that reads the origin (as the agent's gossip and
// a peer call do) never deadlocks.
func TestWritersCallOutWithTheLockReleased(t *testing.T) {
	clk := clock.NewFake(t0)
	var o *origin.Origin
	reads := 0
	// Status of an id it never made takes the origin's lock.
	read := func() { o.Status("n1-q999", clk.Now()); reads++ }
	o = origin.New("n1", origin.Deps{Store: storetest.New(storetest.Options{}), Clock: clk, QueueChanged: read,
		DepStatus: func(_ context.Context, id string) (queue.EntryStatus, error) {
			read()
			return queue.EntryStatus{ID: id, State: queue.EntryFinished}, nil
		}})
	stop := func(context.Context, lease.Lease) error { read(); return nil }
	var plain, arr, dep, gang queue.QueueEntry
	steps := []struct {
		name string
		f    func() error
	}{
		{"submit", func() (err error) { plain, err = o.Submit(batch("alice", 1001)); return }},
		{"submit an array", func() (err error) {
			a := batch("alice", 1001)
			a.Array, _ = queue.ParseArray("0-3%1")
			arr, err = o.Submit(a)
			return
		}},
		{"submit a dependent run", func() (err error) {
			d := batch("alice", 1001)
			d.After = []queue.Dep{{ID: "n2-q1"}}
			dep, err = o.Submit(d)
			return
		}},
		{"place", func() error { _, err := o.Place(plain.Key(), "n1/a"); return err }},
		{"mark started", func() error { o.MarkStarted(plain.Key()); return nil }},
		{"finish", func() error { o.Finish(plain, false, false, ""); return nil }},
		{"refuse a task", func() error { t0 := arr.Task(0); o.Refuse(t0.Key(), "no account"); return nil }},
		{"cancel a task", func() error { return o.Cancel(lease.Caller{UID: 1001, User: "alice"}, arr.ID+"/2") }},
		{"cancel the array", func() error { return o.Cancel(lease.Caller{UID: 1001, User: "alice"}, arr.ID) }},
		{"reconcile: a dependency met", func() error {
			o.Reconcile(context.Background(), queue.NewClusterView(queue.NodeView{Name: "n1"}, nil, clk.Now()), time.Minute, time.Minute, stop, nil)
			if got, _ := o.Get(dep.ID); len(got.After) != 0 {
				t.Errorf("dependency of %s not met: %+v", dep.ID, got.After)
			}
			return nil
		}},
		{"reconcile: a gang rank stopped", func() (err error) {
			g := batch("alice", 1001)
			g.Nodes = 2
			if gang, err = o.Submit(g); err != nil {
				return err
			}
			o.MarkStarted(gang.Key())
			rank0 := lease.Lease{ID: "n1-1", Node: "n1", GPUs: []int{0}, User: "alice", UID: 1001, Token: 1, Entry: gang.Key(), Gang: "g", StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			n2 := queue.NodeView{Name: "n2", State: queue.NodeAlive, HasState: true,
				Ended: []lease.EndedRun{{Entry: gang.Key(), Lease: "n2-1", Reason: lease.ExitReason(1), At: clk.Now()}}}
			before := reads
			o.Reconcile(context.Background(), queue.NewClusterView(queue.NodeView{Name: "n1", Leases: []lease.Lease{rank0}}, []queue.NodeView{n2}, clk.Now()), time.Minute, time.Minute, stop, nil)
			if reads == before {
				t.Error("the gang's rank 0 was not stopped after rank 1 failed")
			}
			return nil
		}},
		{"cancel", func() error { return o.Cancel(lease.Caller{UID: 1001, User: "alice"}, dep.ID) }},
	}
	for _, st := range steps {
		before := reads
		within(t, st.name, func() {
			if err := st.f(); err != nil {
				t.Errorf("%s: %v", st.name, err)
			}
		})
		if st.name != "place" && reads == before {
			t.Errorf("%s told nobody", st.name)
		}
	}
}

// TestAFailedWriteChangesNothing: when the disk refuses a write, the
// origin's change is not made at all — the entries, their status and what
// a restart finds stay as before, the cluster is not told and nothing is
// recorded — and the same change goes through once the disk takes it.
func TestAFailedWriteChangesNothing(t *testing.T) {
	alice := lease.Caller{UID: 1001, User: "alice"}
	tests := []struct {
		name string
		// running marks the entry started before the write that fails.
		running bool
		// do makes the change; it reports whether the origin made it.
		do func(o *origin.Origin, e queue.QueueEntry) bool
	}{
		{"cancel", false, func(o *origin.Origin, e queue.QueueEntry) bool { return o.Cancel(alice, e.ID) == nil }},
		{"place", false, func(o *origin.Origin, e queue.QueueEntry) bool { _, err := o.Place(e.Key(), "n2/x"); return err == nil }},
		{"mark started", false, func(o *origin.Origin, e queue.QueueEntry) bool { _, ok := o.MarkStarted(e.Key()); return ok }},
		{"refuse", false, func(o *origin.Origin, e queue.QueueEntry) bool {
			_, ok := o.Refuse(e.Key(), "no account on n2")
			return ok
		}},
		{"finish", true, func(o *origin.Origin, e queue.QueueEntry) bool { _, _, ok := o.Finish(e, false, false, ""); return ok }},
		{"requeue", true, func(o *origin.Origin, e queue.QueueEntry) bool {
			_, _, ok := o.Finish(e, true, false, "exit 1")
			return ok
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, origin.Deps{RetryDelay: func(int) time.Duration { return time.Minute }})
			e := batch("alice", 1001)
			e.Requeue, e.MaxRestarts = true, 3
			e, err := r.o.Submit(e)
			if err != nil {
				t.Fatal(err)
			}
			if tt.running {
				e, _ = r.o.MarkStarted(e.Key())
			}
			before, status := r.o.Entries(), r.o.Status(e.ID, r.clk.Now())
			events, changed := len(r.events), r.changed
			r.disk.FailNext(storetest.SyncError, 1)
			if tt.do(r.o, e) {
				t.Fatal("the change was made though the disk refused it")
			}
			if got := r.o.Entries(); !slices.EqualFunc(got, before, func(a, b queue.QueueEntry) bool {
				return a.Key() == b.Key() && a.Running == b.Running && a.Placer == b.Placer
			}) {
				t.Errorf("entries after a refused write: %+v, want %+v", got, before)
			}
			if got := r.o.Status(e.ID, r.clk.Now()); got != status {
				t.Errorf("status after a refused write: %+v, want %+v", got, status)
			}
			if len(r.events) != events || r.changed != changed {
				t.Errorf("a refused write recorded %v and told the cluster %d times", r.kinds()[events:], r.changed-changed)
			}
			if !tt.do(r.o, e) {
				t.Fatal("the change was refused once the disk took writes again")
			}
			if r.changed == changed && tt.name != "place" { // Place publishes, and calls no QueueChanged
				t.Error("the change was made but the cluster was not told")
			}
			// What was acknowledged is what a restart finds.
			want := r.o.Entries()
			if got := r.restart(t).Entries(); !slices.EqualFunc(got, want, func(a, b queue.QueueEntry) bool { return a.Key() == b.Key() && a.Running == b.Running }) {
				t.Errorf("after a restart: %v, want %v", ids(got), ids(want))
			}
		})
	}
}

// TestSubmit: a submission is durable and recorded once; a retry of the
// same request (its answer was lost) gets the first one's entry and sets
// nothing off again; past the per-user cap, or invalid, nothing is kept
// and the refusal says what to do.
func TestSubmit(t *testing.T) {
	r := newRig(t, origin.Deps{MaxPerUser: 2})
	first := batch("alice", 1001)
	first.RequestID = "request-0001"
	e, err := r.o.Submit(first)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != "n1-q1" || e.Origin != "n1" || !e.SubmittedAt.Equal(t0) {
		t.Errorf("submitted %s from %s at %s, want n1-q1 from n1 at %s", e.ID, e.Origin, e.SubmittedAt, t0)
	}
	again, err := r.o.Submit(first)
	if err != nil || again.ID != e.ID {
		t.Fatalf("a retry got %s, %v; want %s again", again.ID, err, e.ID)
	}
	if got := r.kinds(); !slices.Equal(got, []event.EventKind{event.EventSubmit}) || r.changed != 1 {
		t.Errorf("a submission and its retry recorded %v and told the cluster %d times, want one submit, once", got, r.changed)
	}
	bob := batch("bob", 1002)
	bob.RequestID = "request-0001" // the same request id from someone else is another request
	if b, err := r.o.Submit(bob); err != nil || b.ID == e.ID {
		t.Fatalf("bob's request got %s, %v", b.ID, err)
	}
	if _, err := r.o.Submit(batch("alice", 1001)); err != nil {
		t.Fatal(err)
	}
	_, err = r.o.Submit(batch("alice", 1001))
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "dibs queue") {
		t.Errorf("alice's third request got %v, want a conflict that says how to see her queue", err)
	}
	bad := batch("bob", 1002)
	bad.GPUsPerNode = 0
	if _, err := r.o.Submit(bad); err == nil {
		t.Error("an entry asking for no GPUs was queued")
	}
	want := []string{"n1-q1", "n1-q2", "n1-q3"}
	if got := ids(r.o.Entries()); !slices.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	if got := ids(r.restart(t).Entries()); !slices.Equal(got, want) {
		t.Errorf("after a restart: %v, want %v", got, want)
	}
}

// TestCancel: the submitter or an admin withdraws an entry, waiting or
// running, for good (a restart does not bring it back) and its status says
// cancelled; anyone else is refused and the entry stays; the event names an
// admin who cancelled someone else's entry.
func TestCancel(t *testing.T) {
	tests := []struct {
		name    string
		by      lease.Caller
		running bool
		id      string
		code    refusal.Code
		// text is what the cancel event says, past the entry's name.
		text string
	}{
		{name: "the submitter, waiting", by: lease.Caller{UID: 1001, User: "alice"}},
		{name: "the submitter, running", by: lease.Caller{UID: 1001, User: "alice"}, running: true, text: "SIGTERM"},
		{name: "an admin", by: lease.Caller{UID: 0, User: "root", Admin: true}, text: "by root"},
		{name: "someone else", by: lease.Caller{UID: 1002, User: "bob"}, code: refusal.CodeForbidden},
		{name: "an id never made", by: lease.Caller{UID: 1001, User: "alice"}, id: "n1-q9", code: refusal.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, origin.Deps{})
			e, err := r.o.Submit(batch("alice", 1001))
			if err != nil {
				t.Fatal(err)
			}
			if tt.running {
				r.o.MarkStarted(e.Key())
			}
			id := cmp(tt.id, e.ID)
			err = r.o.Cancel(tt.by, id)
			if refusal.CodeOf(err) != tt.code {
				t.Fatalf("cancel by %s = %v, want code %q", tt.by.User, err, tt.code)
			}
			o := r.o
			if tt.code != "" {
				if _, ok := o.Get(e.ID); !ok {
					t.Error("a refused cancel removed the entry")
				}
				return
			}
			if st := o.Status(e.ID, r.clk.Now()); st.State != queue.EntryCancelled {
				t.Errorf("status after cancel = %+v, want cancelled", st)
			}
			last := r.events[len(r.events)-1]
			if last.Kind != event.EventCancel || !strings.Contains(last.Text, tt.text) {
				t.Errorf("last event %s %q, want a cancel saying %q", last.Kind, last.Text, tt.text)
			}
			if got := r.restart(t).Entries(); len(got) != 0 {
				t.Errorf("a restart brought back %v", ids(got))
			}
		})
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestFinish: an attempt preempted for someone else goes back at once
// (no retry delay, no restart used); one that failed and asked for it is
// requeued after its delay; a finish of an attempt that is not the
// running one (someone finished it first) changes nothing.
func TestFinish(t *testing.T) {
	r := newRig(t, origin.Deps{RetryDelay: func(int) time.Duration { return 30 * time.Second }})
	e := batch("alice", 1001)
	e.Requeue, e.MaxRestarts = true, 1
	e, err := r.o.Submit(e)
	if err != nil {
		t.Fatal(err)
	}
	run, _ := r.o.MarkStarted(e.Key())
	next, requeued, ok := r.o.Finish(run, true, true, "preempted for bob")
	if !ok || !requeued || !next.RetryAt.IsZero() || next.Restarts != 0 || next.Attempt != run.Attempt+1 {
		t.Fatalf("preempted: next %+v requeued %v ok %v; want the next attempt at once, no restart used", next, requeued, ok)
	}
	if _, _, ok := r.o.Finish(run, true, false, "late"); ok {
		t.Error("a finish of the attempt that was already requeued was taken")
	}
	run, _ = r.o.MarkStarted(next.Key())
	next, requeued, ok = r.o.Finish(run, true, false, "exit 1")
	if !ok || !requeued || !next.RetryAt.Equal(t0.Add(30*time.Second)) || next.Restarts != 1 {
		t.Fatalf("failed: next %+v requeued %v ok %v; want a retry in 30s, restart 1", next, requeued, ok)
	}
	if got := r.restart(t).Entries(); len(got) != 1 || got[0].Key() != next.Key() || !got[0].RetryAt.Equal(next.RetryAt) {
		t.Errorf("after a restart: %+v, want attempt %s retrying at %s", got, next.Key(), next.RetryAt)
	}
}

// TestReconcileJudgesOnceEveryLivePeerIsHeard: the verdict held while a
// peer was unheard is given on the first pass after it is: the gang whose
// rank there failed has its other rank stopped, and once that ends too the
// attempt fails.
func TestReconcileJudgesOnceEveryLivePeerIsHeard(t *testing.T) {
	r := newRig(t, origin.Deps{})
	g := batch("alice", 1001)
	g.Nodes = 2
	e, err := r.o.Submit(g)
	if err != nil {
		t.Fatal(err)
	}
	r.o.MarkStarted(e.Key())
	rank0 := lease.Lease{ID: "n1-1", Node: "n1", GPUs: []int{0}, User: "alice", UID: 1001, Token: 1, Entry: e.Key(), Gang: "g", StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	failed := lease.EndedRun{Entry: e.Key(), Lease: "n2-1", Gang: "g", Reason: lease.ExitReason(1), At: t0}
	var stopped []string
	stop := func(_ context.Context, l lease.Lease) error { stopped = append(stopped, l.ID); return nil }
	pass := func(n2 queue.NodeView, self ...lease.Lease) {
		r.o.Reconcile(context.Background(), queue.NewClusterView(queue.NodeView{Name: "n1", Leases: self}, []queue.NodeView{n2}, r.clk.Now()), 5*time.Minute, time.Minute, stop, nil)
	}
	pass(queue.NodeView{Name: "n2", State: queue.NodeAlive}, rank0)
	if len(stopped) > 0 {
		t.Fatalf("stopped %v before n2 was heard", stopped)
	}
	heard := queue.NodeView{Name: "n2", State: queue.NodeAlive, HasState: true, Ended: []lease.EndedRun{failed}}
	pass(heard, rank0)
	if !slices.Equal(stopped, []string{"n1-1"}) {
		t.Fatalf("once n2 was heard, stopped %v; want rank 0 (n1-1)", stopped)
	}
	if st := r.o.Status(e.ID, r.clk.Now()); st.State != queue.EntryRunning {
		t.Errorf("status while rank 0 stops = %+v, want running", st)
	}
	pass(heard)
	if st := r.o.Status(e.ID, r.clk.Now()); st.State != queue.EntryFailed {
		t.Errorf("status once every rank ended = %+v, want failed", st)
	}
	if got := r.kinds(); got[len(got)-1] != event.EventFail {
		t.Errorf("events %v, want the last a failure", got)
	}
}

// TestArrayTaskWhoseWriteFailedIsMadeOnTheNextPass: when the disk refuses
// the write of an array's next task (the one made as another ends), the
// task is not made — not shown, not counted — and the origin's next pass
// makes it; a restart then finds the same tasks, none lost or made twice.
func TestArrayTaskWhoseWriteFailedIsMadeOnTheNextPass(t *testing.T) {
	r := newRig(t, origin.Deps{})
	a := batch("alice", 1001)
	a.Array, _ = queue.ParseArray("0-2%1")
	e, err := r.o.Submit(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := tasksOf(r.o, e.ID); !slices.Equal(got, []string{"n1-q1/0"}) {
		t.Fatalf("tasks at submit = %v, want task 0", got)
	}
	task := e.Task(0)
	run, ok := r.o.MarkStarted(task.Key())
	if !ok {
		t.Fatal("task 0 not marked started")
	}
	// Task 0's end is two writes (its parent, its deletion); task 1's
	// write is the third.
	r.disk.FailNext(storetest.NoFault, 2)
	r.disk.FailNext(storetest.SyncError, 1)
	if _, _, ok := r.o.Finish(run, false, false, ""); !ok {
		t.Fatal("task 0 not finished")
	}
	if got := tasksOf(r.o, e.ID); len(got) != 0 {
		t.Fatalf("tasks after task 1's write failed = %v, want none", got)
	}
	r.o.Reconcile(context.Background(), queue.NewClusterView(queue.NodeView{Name: "n1"}, nil, r.clk.Now()), time.Minute, time.Minute,
		func(context.Context, lease.Lease) error { return nil }, nil)
	if got := tasksOf(r.o, e.ID); !slices.Equal(got, []string{"n1-q1/1"}) {
		t.Fatalf("tasks after the next pass = %v, want task 1", got)
	}
	if got := tasksOf(r.restart(t), e.ID); !slices.Equal(got, []string{"n1-q1/1"}) {
		t.Errorf("tasks after a restart = %v, want task 1", got)
	}
}
