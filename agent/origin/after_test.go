package origin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// TestAfterIsSettledDurably: a run waiting for another origin's entry
// stays held while it runs, is let go (and stays let go after a restart)
// once it finished, and a run --after one that failed is ended with an
// event naming it, while --after-any is let go.
func TestAfterIsSettledDurably(t *testing.T) {
	clk := clock.NewFake(t0)
	disk := storetest.New(storetest.Options{})
	remote := map[string]queue.EntryState{"n2-q1": queue.EntryRunning, "n2-q2": queue.EntryRunning}
	var told []event.Event
	deps := origin.Deps{Store: disk, Clock: clk, Events: func(e event.Event) { told = append(told, e) },
		DepStatus: func(_ context.Context, id string) (queue.EntryStatus, error) {
			return queue.EntryStatus{ID: id, State: remote[id]}, nil
		}}
	o := origin.New("n1", deps)
	submit := func(after ...queue.Dep) queue.QueueEntry {
		e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
			Job: &job.Job{Command: []string{"eval"}}, After: after})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	okRun := submit(queue.Dep{ID: "n2-q1"})
	failRun := submit(queue.Dep{ID: "n2-q2"})
	anyRun := submit(queue.Dep{ID: "n2-q2", Any: true})
	view := queue.NewClusterView(queue.NodeView{Name: "n1", State: queue.NodeAlive, HasState: true}, nil, clk.Now())
	pass := func() { o.Reconcile(context.Background(), view, time.Minute, 30*time.Second, nil, nil) }
	pass()
	for _, e := range []queue.QueueEntry{okRun, failRun, anyRun} {
		if got, _ := o.Get(e.ID); !got.Held() {
			t.Fatalf("%s was let go while its dependency runs", e.ID)
		}
	}
	remote["n2-q1"], remote["n2-q2"] = queue.EntryFinished, queue.EntryFailed
	pass()
	if got, ok := o.Get(okRun.ID); !ok || got.Held() {
		t.Errorf("%s still held after its dependency finished", okRun.ID)
	}
	if got, ok := o.Get(anyRun.ID); !ok || got.Held() {
		t.Errorf("--after-any %s still held after its dependency failed", anyRun.ID)
	}
	if _, ok := o.Get(failRun.ID); ok {
		t.Fatalf("%s still queued after its dependency failed", failRun.ID)
	}
	if st := o.Status(failRun.ID, clk.Now()); st.State != queue.EntryFailed || !strings.Contains(st.Reason, "its dependency n2-q2 failed") {
		t.Errorf("status of %s = %+v, want failed naming n2-q2", failRun.ID, st)
	}
	if n := len(told); n == 0 || told[n-1].Kind != event.EventFail || !strings.Contains(told[n-1].Text, "n2-q2") {
		t.Errorf("last event %+v, want a failure naming n2-q2", told[len(told)-1])
	}
	// A restart keeps what was settled.
	o2 := origin.New("n1", deps)
	if err := o2.Open(); err != nil {
		t.Fatal(err)
	}
	if got, ok := o2.Get(okRun.ID); !ok || got.Held() || len(got.After) != 0 {
		t.Errorf("after a restart %s = %+v, want it let go", okRun.ID, got)
	}
}
