package origin_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// tasksOf are the made tasks of array id among o's entries.
func tasksOf(o *origin.Origin, id string) []string {
	var out []string
	for _, e := range o.Entries() {
		if arr, _, ok := job.ArrayTaskOf(e.ID); ok && arr == id {
			out = append(out, e.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestArrayTasksAreMadeUpToTheThrottleAndSurviveARestart: an array makes
// only as many tasks as its throttle lets wait or run, makes the next as
// one ends, and a restarted origin (the same disk) has the same tasks and
// counts, so no task is lost or made twice.
func TestArrayTasksAreMadeUpToTheThrottleAndSurviveARestart(t *testing.T) {
	clk := clock.NewFake(t0)
	disk := storetest.New(storetest.Options{})
	o := origin.New("n1", origin.Deps{Store: disk, Clock: clk})
	arr, _ := queue.ParseArray("0-5%2")
	e, err := o.Submit(queue.QueueEntry{User: "alice", UID: 1001, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
		Job: &job.Job{Command: []string{"train"}}, Array: arr})
	if err != nil {
		t.Fatal(err)
	}
	if got := tasksOf(o, e.ID); !slices.Equal(got, []string{"n1-q1/0", "n1-q1/1"}) {
		t.Fatalf("tasks made at submit = %v, want the first two", got)
	}
	task0 := e.Task(0)
	t0k := task0.Key()
	if _, err := o.Place(e.Key(), "n2/x"); err == nil {
		t.Fatal("the array itself was let start")
	}
	if _, err := o.Place(t0k, "n2/x"); err != nil {
		t.Fatal(err)
	}
	started, ok := o.MarkStarted(t0k)
	if !ok {
		t.Fatal("task 0 not marked started")
	}
	if _, _, ok := o.Finish(started, false, false, ""); !ok {
		t.Fatal("task 0 not finished")
	}
	if got := tasksOf(o, e.ID); !slices.Equal(got, []string{"n1-q1/1", "n1-q1/2"}) {
		t.Fatalf("tasks after task 0 ended = %v, want 1 and 2", got)
	}
	// A restart: a new origin on the same disk.
	o2 := origin.New("n1", origin.Deps{Store: disk, Clock: clk})
	if err := o2.Open(); err != nil {
		t.Fatal(err)
	}
	if got := tasksOf(o2, e.ID); !slices.Equal(got, []string{"n1-q1/1", "n1-q1/2"}) {
		t.Fatalf("tasks after a restart = %v, want 1 and 2", got)
	}
	p, _ := o2.Get(e.ID)
	if p.Array == nil || p.Array.Next != 3 || p.Array.Done != "0" {
		t.Fatalf("array after a restart = %+v, want 3 made, 0 done", p.Array)
	}
	if st := o2.Status(e.ID, clk.Now()); st.State != queue.EntryRunning {
		t.Fatalf("array state after a restart = %s, want running (a task started)", st.State)
	}
}

// TestArrayTasksCountAgainstTheCap: each task of an array counts as one
// entry against MaxPerUser, made or not.
func TestArrayTasksCountAgainstTheCap(t *testing.T) {
	clk := clock.NewFake(t0)
	o := origin.New("n1", origin.Deps{Store: storetest.New(storetest.Options{}), Clock: clk, MaxPerUser: 10})
	submit := func(spec string) error {
		e := queue.QueueEntry{User: "alice", UID: 1001, Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch,
			Job: &job.Job{Command: []string{"train"}}}
		if spec != "" {
			e.Array, _ = queue.ParseArray(spec)
		}
		_, err := o.Submit(e)
		return err
	}
	if err := submit("0-10%2"); err == nil {
		t.Fatal("an array of 11 tasks was queued under a cap of 10")
	}
	if err := submit("0-8%2"); err != nil {
		t.Fatalf("an array of 9 tasks under a cap of 10: %v", err)
	}
	if err := submit(""); err != nil {
		t.Fatalf("a 10th entry: %v", err)
	}
	if err := submit(""); err == nil {
		t.Fatal("an 11th entry was queued: the array's tasks were not counted")
	}
}
