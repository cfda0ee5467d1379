package nemesis

import (
	"fmt"
	"testing"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// arrayParent is a job array "0-2%1" submitted at n1.
func arrayParent() queue.QueueEntry {
	return queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: &job.Job{Command: []string{"sleep", "1"}},
		Array: &queue.Array{Spec: "0-2", Throttle: 1}}
}

// array submits arrayParent and runs the tasks listed on n2, one after
// another from at ms, each 100 ms (overlap: each starts 50 ms before the
// last ends); with end, the array is done and deleted everywhere.
func array(b *builder, at float64, overlap, end bool, tasks ...int) {
	p := arrayParent()
	b.op(Op{Client: 0, Kind: OpSubmit, Node: "n1", Nodes: 1, EntryID: p.ID, Array: "0-2%1", Outcome: OK}, 0, 2)
	b.entry(p, 1, 1.1)
	for k, i := range tasks {
		t := queue.QueueEntry{ID: queue.ArrayTaskID(p.ID, i), Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: p.Job}
		start := at + float64(k)*200
		if overlap {
			start = at + float64(k)*50
		}
		b.entry(t, start-5, start-4)
		b.put(lease.Lease{Node: "n2", Token: uint64(10 + k), GPUs: []int{k % 2}, Entry: t.Key()}, start, start+1)
		b.end(lease.LeaseID("n2", uint64(10+k)), []int{k % 2}, lease.ExitReason(0), start+100, start+101)
		b.deleteEntry("n1", t.ID, start+110, start+111)
	}
	if end {
		b.deleteEntry("n1", p.ID, 2000, 2001)
		b.h.FinalEntries = map[string][]string{"n1": {}}
	}
}

func TestCheckArrays(t *testing.T) {
	runCases(t, []checkCase{
		{name: "an array whose tasks all ran one at a time passes", build: func(b *builder) *History {
			array(b, 10, false, true, 0, 1, 2)
			return b.history(3000)
		}},
		{name: "an array still queued at the end passes", build: func(b *builder) *History {
			array(b, 10, false, false, 0)
			b.h.FinalEntries = map[string][]string{"n1": {"n1-q1"}}
			return b.history(3000)
		}},
		{name: "a task still running at the end, folded into its array's row, passes", build: func(b *builder) *History {
			// `dibs queue` lists an array as one row: its running task
			// (made, never deleted) is not in the final read by its own id.
			array(b, 10, false, false)
			t := queue.QueueEntry{ID: queue.ArrayTaskID("n1-q1", 0), Origin: "n1", Nodes: 1, GPUsPerNode: 1}
			b.entry(t, 2800, 2801)
			b.h.FinalEntries = map[string][]string{"n1": {"n1-q1"}}
			return b.history(3000)
		}},
		{name: "an array task run twice fails", fails: CheckArrayTwice, names: []string{"put n2-10", "put n3-1"}, build: func(b *builder) *History {
			array(b, 10, false, false, 0)
			b.put(lease.Lease{Node: "n3", Token: 1, GPUs: []int{0}, Entry: "n1-q1/0#0"}, 500, 501)
			return b.history(3000)
		}},
		{name: "an array gone with a task never run fails", fails: CheckArrayLost, names: []string{"submit"}, build: func(b *builder) *History {
			array(b, 10, false, true, 0, 1)
			return b.history(3000)
		}},
		{name: "an array cancelled before its last task passes", build: func(b *builder) *History {
			array(b, 10, false, true, 0, 1)
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 1000, 1010)
			return b.history(3000)
		}},
		{name: "an array over its throttle fails", fails: CheckArrayThrottle, names: []string{"put n2-10", "put n2-11"}, build: func(b *builder) *History {
			array(b, 10, true, true, 0, 1, 2)
			return b.history(3000)
		}},
	})
}

// dependent queues n1-q2 waiting for n1-q1 (any: --after-any) and runs
// n1-q1 on n2 from 10 to 110 ms and n1-q2 on n3 from start ms.
func dependent(b *builder, any bool, start float64) {
	x := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: &job.Job{Command: []string{"sleep", "1"}}}
	y := queue.QueueEntry{ID: "n1-q2", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: x.Job, After: []queue.Dep{{ID: x.ID, Any: any}}}
	b.entry(x, 0, 1)
	b.entry(y, 2, 3)
	b.put(lease.Lease{Node: "n2", Token: 1, GPUs: []int{0}, Entry: x.Key()}, 10, 11)
	b.end("n2-1", []int{0}, lease.ExitReason(0), 110, 111)
	b.put(lease.Lease{Node: "n3", Token: 1, GPUs: []int{0}, Entry: y.Key()}, start, start+1)
}

// placed writes n1-q1's attempt 0 let start (a placer written) at ms.
func placed(b *builder, ms float64) {
	x := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: &job.Job{Command: []string{"sleep", "1"}}, Placer: "n2/boot"}
	b.entry(x, ms, ms+1)
}

// dependentLate is dependent with n1-q1's lease put at 65 ms (after a
// cancel at 50–60) and ended at 110, and n1-q2 started at start.
func dependentLate(b *builder, any bool, start float64) {
	x := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: &job.Job{Command: []string{"sleep", "1"}}}
	y := queue.QueueEntry{ID: "n1-q2", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Job: x.Job, After: []queue.Dep{{ID: x.ID, Any: any}}}
	b.entry(x, 0, 1)
	b.entry(y, 2, 3)
	b.put(lease.Lease{Node: "n2", Token: 1, GPUs: []int{0}, Entry: x.Key()}, 65, 66)
	b.end("n2-1", []int{0}, lease.ExitReason(143), 110, 111)
	b.put(lease.Lease{Node: "n3", Token: 1, GPUs: []int{0}, Entry: y.Key()}, start, start+1)
}

func TestCheckDependencies(t *testing.T) {
	for _, any := range []bool{false, true} {
		runCases(t, []checkCase{
			{name: fmt.Sprintf("a run after its dependency ended passes (any %v)", any), build: func(b *builder) *History {
				dependent(b, any, 200)
				return b.history(3000)
			}},
			{name: fmt.Sprintf("a run before its dependency ended fails (any %v)", any), fails: CheckDependency, names: []string{"put n2-1", "put n3-1"}, build: func(b *builder) *History {
				dependent(b, any, 50)
				return b.history(3000)
			}},
		})
	}
	runCases(t, []checkCase{
		{name: "a run after one cancelled while it ran fails", fails: CheckDependency, names: []string{"cancel", "put n3-1"}, build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependent(b, false, 200)
			return b.history(3000)
		}},
		{name: "a run ended unrun when the one it waited for was cancelled passes", build: func(b *builder) *History {
			x := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1}
			y := queue.QueueEntry{ID: "n1-q2", Origin: "n1", Nodes: 1, GPUsPerNode: 1, After: []queue.Dep{{ID: x.ID}}}
			b.entry(x, 0, 1)
			b.entry(y, 2, 3)
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: x.ID, Outcome: OK}, 50, 60)
			b.deleteEntry("n1", x.ID, 55, 56)
			b.deleteEntry("n1", y.ID, 70, 71)
			return b.history(3000)
		}},
		{name: "a run after-any one cancelled, in its grace still, passes", build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependent(b, true, 80)
			return b.history(3000)
		}},
		{name: "a run after one cancelled, in its grace still, fails", fails: CheckDependency, names: []string{"cancel", "put n3-1"}, build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependent(b, false, 80)
			return b.history(3000)
		}},
		// The long run's seed 899324063038558145: node02-q166 (a gang) was
		// placed, its scheduler paused; the cancel came as it went on, and
		// the ranks it reserved and committed after the cancel were stopped
		// 1.2 s later, after node03-q157 (--after-any) had started.
		{name: "a run after-any one cancelled while its start was in flight passes", build: func(b *builder) *History {
			placed(b, 30)
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependentLate(b, true, 80)
			return b.history(3000)
		}},
		{name: "a run after-any one cancelled, placed only after the cancel, fails", fails: CheckDependency, names: []string{"put n2-1", "put n3-1"}, build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			placed(b, 55)
			dependentLate(b, true, 80)
			return b.history(3000)
		}},
		{name: "a run after one cancelled while its start was in flight fails", fails: CheckDependency, names: []string{"cancel", "put n3-1"}, build: func(b *builder) *History {
			placed(b, 30)
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependentLate(b, false, 80)
			return b.history(3000)
		}},
		{name: "a run after-any one cancelled while it ran passes", build: func(b *builder) *History {
			b.op(Op{Client: 0, Kind: OpCancel, Node: "n1", EntryID: "n1-q1", Outcome: OK}, 50, 60)
			dependent(b, true, 200)
			return b.history(3000)
		}},
	})
}
