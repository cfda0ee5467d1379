package queue_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func TestParseArray(t *testing.T) {
	for _, tc := range []struct {
		in, spec string
		throttle int
		n        int
		err      string
	}{
		{in: "0-19%4", spec: "0-19", throttle: 4, n: 20},
		{in: "1,3,5-9", spec: "1,3,5-9", n: 7},
		{in: "5-9,1,3,3", spec: "1,3,5-9", n: 7},
		{in: "7", spec: "7", n: 1},
		{in: "0-999", spec: "0-999", n: 1000},
		{in: "0-1000", err: "more than 1000 tasks"},
		{in: "9-3", err: "runs backwards"},
		{in: "0-19%0", err: "throttle"},
		{in: "0-19%x", err: "throttle"},
		{in: "", err: "names no task"},
		{in: "a-b", err: "not an index"},
		{in: "-3", err: "not an index"},
		{in: "0-100000", err: "not an index"},
		{in: "0-3%4%5", err: "throttle"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			a, err := queue.ParseArray(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseArray(%q) = %v, %v; want an error saying %q", tc.in, a, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Spec != tc.spec || a.Throttle != tc.throttle || len(a.Indices()) != tc.n {
				t.Fatalf("got spec %q throttle %d %d tasks, want %q %d %d", a.Spec, a.Throttle, len(a.Indices()), tc.spec, tc.throttle, tc.n)
			}
			if err := a.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestArrayMarkEnded(t *testing.T) {
	a, _ := queue.ParseArray("0-9%2")
	for _, i := range []int{0, 1, 2, 4} {
		a.MarkEnded(i, queue.EntryFinished)
	}
	a.MarkEnded(3, queue.EntryFailed)
	a.MarkEnded(9, queue.EntryCancelled)
	if a.Done != "0-2,4" || a.Failed != "3" || a.Cancelled != "9" {
		t.Fatalf("got done %q failed %q cancelled %q", a.Done, a.Failed, a.Cancelled)
	}
	if d, f, c := a.Counts(); d != 4 || f != 1 || c != 1 || a.Remaining() != 4 {
		t.Fatalf("counts %d %d %d remaining %d", d, f, c, a.Remaining())
	}
	if !a.Ended(3) || a.Ended(5) {
		t.Fatal("Ended is wrong")
	}
}

func TestArrayEnvAndTask(t *testing.T) {
	env := job.ArrayEnv("node01-q7/5#2")
	if env["DIBS_ARRAY_ID"] != "node01-q7" || env["DIBS_ARRAY_INDEX"] != "5" {
		t.Fatalf("ArrayEnv = %v", env)
	}
	if job.ArrayEnv("node01-q7#0") != nil {
		t.Fatal("a plain entry got array variables")
	}
	p := ask("node01-q7", alice, 1, 1, time.Hour, t0)
	p.Origin = "node01"
	p.Array, _ = queue.ParseArray("0-3%2")
	p.Job = &job.Job{Command: []string{"sh", "-c", "echo $DIBS_ARRAY_INDEX"}}
	task := p.Task(3)
	if task.ID != "node01-q7/3" || task.Array != nil || task.Held() || !p.Held() {
		t.Fatalf("task %+v", task)
	}
	task.Job.Command[0] = "x"
	if p.Job.Command[0] != "sh" {
		t.Fatal("a task shares its parent's command")
	}
	if err := task.Validate(); err != nil {
		t.Fatalf("a task does not validate: %v", err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("an array does not validate: %v", err)
	}
	if got := queue.TaskSessionName("train", "node01-q7/3"); got != "train-3" {
		t.Fatalf("session name %q", got)
	}
}

func TestDepFor(t *testing.T) {
	for _, tc := range []struct {
		any   bool
		state queue.EntryState
		want  queue.DepVerdict
	}{
		{false, queue.EntryWaiting, queue.DepWait},
		{false, queue.EntryRunning, queue.DepWait},
		{false, queue.EntryBackoff, queue.DepWait},
		{false, queue.EntryFinished, queue.DepMet},
		{false, queue.EntryFailed, queue.DepBroken},
		{false, queue.EntryCancelled, queue.DepBroken},
		{false, queue.EntryUnknown, queue.DepBroken},
		{true, queue.EntryFailed, queue.DepMet},
		{true, queue.EntryCancelled, queue.DepMet},
		{true, queue.EntryFinished, queue.DepMet},
		{true, queue.EntryRunning, queue.DepWait},
	} {
		if got := queue.DepFor(queue.Dep{ID: "n1-q1", Any: tc.any}, queue.EntryStatus{State: tc.state}); got != tc.want {
			t.Errorf("any=%v %s: got %v, want %v", tc.any, tc.state, got, tc.want)
		}
	}
	if _, err := queue.ParseAfter([]string{"n1-q3/2"}, false); err == nil {
		t.Error("--after a single task was accepted")
	}
	if _, err := queue.ParseAfter([]string{"bogus"}, false); err == nil {
		t.Error("--after a bad id was accepted")
	}
	d, err := queue.ParseAfter([]string{"n1-q3,n2-q4", "n1-q5"}, true)
	if err != nil || len(d) != 3 || !d[2].Any || d[1].String() != "afterany:n2-q4" {
		t.Errorf("ParseAfter = %v, %v", d, err)
	}
}

// arraysQueue is 100 arrays of 100 tasks (no throttle, so each has
// queue.ArrayWindow tasks made) as the scheduler finds them: the parents,
// which it skips, and the tasks made.
func arraysQueue(users []lease.Caller) []queue.QueueEntry {
	var out []queue.QueueEntry
	for i := range 100 {
		c := users[i%len(users)]
		p := ask(fmt.Sprintf("gpu-%02d-q%d", i%32, i), c, 1, []int{1, 2, 1, 4}[i%4], time.Duration(10+i%240)*time.Minute, t0.Add(-time.Duration(i)*time.Minute))
		p.Job = &job.Job{Command: []string{"python", "train.py"}}
		p.Array, _ = queue.ParseArray("0-99")
		p.Array.Next = queue.ArrayWindow
		out = append(out, p)
		for k := range queue.ArrayWindow {
			out = append(out, p.Task(k))
		}
	}
	return out
}

// BenchmarkScheduleArrays100x100 is one scheduling pass with 100 job
// arrays of 100 tasks each on 32 nodes of 8 GPUs, half leased, quotas on:
// the held parents are skipped (as ClusterView.Waiting does) and only the
// tasks their origins made are placed. The target is 10 ms a pass.
func BenchmarkScheduleArrays100x100(b *testing.B) {
	users := []lease.Caller{alice, bob, carol, {UID: 1004, User: "dave"}, {UID: 1005, User: "erin"}, {UID: 1006, User: "frank"}}
	var nodes []lease.SchedNode
	for i := range 32 {
		var leases []lease.Lease
		for k := range 2 {
			c := users[(i+k)%len(users)]
			leases = append(leases, on(uint64(k+1), c, gpus(k*2, k*2+1), t0.Add(-time.Hour), t0.Add(time.Duration(30+i*7+k*13)*time.Minute)))
		}
		nodes = append(nodes, snode(fmt.Sprintf("gpu-%02d", i), 8, leases...))
	}
	all := arraysQueue(users)
	usage := queue.Usage{"alice": 1e6, "bob": 5e5, "carol": 2e5, "dave": 1e5, "erin": 1e4}
	cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 64, "bob": 32, "carol": 32, "dave": 32, "erin": 32, "frank": 32}}
	b.ReportAllocs()
	b.ResetTimer()
	var p queue.Plan
	var waiting []queue.QueueEntry
	for b.Loop() {
		waiting = waiting[:0]
		for i := range all {
			if !all[i].Held() {
				waiting = append(waiting, all[i])
			}
		}
		p = queue.Schedule(waiting, nodes, usage, t0, cfg)
	}
	b.StopTimer()
	if len(p.Order) != 100*queue.ArrayWindow || len(p.Start) == 0 || slices.ContainsFunc(p.Start, func(s queue.Start) bool { return s.Entry.Array != nil }) {
		b.Fatalf("plan: %d ranked, %d started", len(p.Order), len(p.Start))
	}
	b.ReportMetric(float64(len(p.Start)), "starts")
}

// FuzzParseArray: any --array value is either refused or read into at
// most MaxArrayTasks indices whose canonical spec reads back the same.
func FuzzParseArray(f *testing.F) {
	for _, s := range []string{"0-19%4", "1,3,5-9", "0-999", "7", "", "9-3", "0-1000", "1,,2", "%3", "0-3%", "99999", "-1", "0-99999%1000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := queue.ParseArray(s)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("a refusal on two lines: %q", err)
			}
			return
		}
		idx := a.Indices()
		if len(idx) == 0 || len(idx) > queue.MaxArrayTasks || a.Check() != nil {
			t.Fatalf("ParseArray(%q) = %+v with %d tasks", s, a, len(idx))
		}
		b, err := queue.ParseArray(a.String())
		if err != nil || b.Spec != a.Spec || b.Throttle != a.Throttle {
			t.Fatalf("%q → %q does not read back: %+v, %v", s, a.String(), b, err)
		}
	})
}
