package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
)

// arrayScript is a task that says it is live while it runs (a file per
// index, so the test counts tasks running at once), appends its index and
// array id to its own record, and exits with code (0 unless set).
func arrayScript(dir string, secs string) string {
	return fmt.Sprintf(`touch %[1]s/live.$DIBS_ARRAY_INDEX; echo "$DIBS_ARRAY_INDEX $DIBS_ARRAY_ID" >> %[1]s/ran.$DIBS_ARRAY_INDEX; sleep %[2]s; rm -f %[1]s/live.$DIBS_ARRAY_INDEX`, dir, secs)
}

// sampleLive counts the live.* files every few milliseconds until stop
// is closed, and returns the most seen at once.
func sampleLive(dir string, stop <-chan struct{}) *atomic.Int64 {
	var most atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			m, _ := filepath.Glob(filepath.Join(dir, "live.*"))
			if n := int64(len(m)); n > most.Load() {
				most.Store(n)
			}
		}
	}()
	return &most
}

// checkEveryTaskOnce fails unless each of n tasks ran exactly once and saw
// its own index and the array's id.
func checkEveryTaskOnce(t *testing.T, dir, id string, n int) {
	t.Helper()
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("ran.%d", i)))
		if err != nil {
			t.Errorf("task %d never ran", i)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 1 || lines[0] != fmt.Sprintf("%d %s", i, id) {
			t.Errorf("task %d ran %d times, saw %q; want once, seeing %q", i, len(lines), lines, fmt.Sprintf("%d %s", i, id))
		}
	}
}

// ledgerRuns counts, in every node's ledger, the committed runs of each
// task of array id (reservations and claims aside).
func ledgerRuns(t *testing.T, nodes []*agenttest.Node, id string) map[string]int {
	t.Helper()
	runs := map[string]int{}
	for _, n := range nodes {
		n.Stop()
		s, err := store.Open(n.Opts.DataDir)
		if err != nil {
			t.Fatalf("open %s's store: %v", n.Opts.Name, err)
		}
		led, err := s.Ledger(time.Time{})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range led {
			entry, _, _ := strings.Cut(e.Entry, "#")
			if arr, _, ok := job.ArrayTaskOf(entry); ok && arr == id && e.Reason != event.ReasonReserved {
				runs[entry]++
			}
		}
	}
	return runs
}

func TestArrayThrottleHoldsAndEveryTaskRunsOnce(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"3xL40S", "3xL40S", "3xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	stop := make(chan struct{})
	defer close(stop)
	most := sampleLive(dir, stop)
	s, err := nodes[1].Client.Submit(ctx(t), api.SubmitRequest{Array: "0-19%4", Claim: api.ClaimRequest{Count: 1, Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", arrayScript(dir, "0.7")}}}})
	if err != nil {
		t.Fatalf("submit an array: %v", err)
	}
	agenttest.Eventually(t, 5*time.Second, "the queue to show the array compactly", func() bool {
		q, _ := nodes[0].Client.Queue(ctx(t))
		return len(q.Entries) == 1 && q.Entries[0].ID == s.ID && q.Entries[0].Array != nil &&
			strings.HasPrefix(q.Entries[0].Array.Summary(s.ID), s.ID+"[")
	})
	agenttest.Eventually(t, 90*time.Second, "the array to finish", func() bool {
		st, _ := nodes[1].Client.EntryStatus(ctx(t), s.ID)
		return st.State == queue.EntryFinished
	})
	t.Logf("at most %d tasks ran at once", most.Load())
	if m := most.Load(); m > 4 || m < 2 {
		t.Errorf("at most %d tasks ran at once; want 4 at most (and several: 9 GPUs were free)", m)
	}
	checkEveryTaskOnce(t, dir, s.ID, 20)
	// Events: the array's start, each task's end, the array's end.
	agenttest.Eventually(t, 5*time.Second, "the array's events", func() bool {
		l, _ := nodes[0].Client.Events(ctx(t), api.EventsRequest{})
		kinds := map[event.EventKind]int{}
		taskEnds := 0
		for _, e := range l.Events {
			if e.Entry == s.ID {
				kinds[e.Kind]++
			}
			if arr, _, ok := job.ArrayTaskOf(e.Entry); ok && arr == s.ID && e.Kind == event.EventFinish {
				taskEnds++
			}
		}
		return kinds[event.EventSubmit] == 1 && kinds[event.EventStart] == 1 && kinds[event.EventFinish] == 1 && taskEnds == 20
	})
	for id, n := range ledgerRuns(t, nodes, s.ID) {
		if n != 1 {
			t.Errorf("the ledger holds %d runs of %s, want 1", n, id)
		}
	}
}

func TestArrayOriginRestartLosesAndDuplicatesNoTask(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: os.Getenv("SWEEPLOG") == ""})
	dir := agenttest.PublicDir(t)
	stop := make(chan struct{})
	defer close(stop)
	most := sampleLive(dir, stop)
	// The origin, node02, runs no task: its GPUs are held, so what its
	// restart tests is the origin's record, not a session whose start
	// the restart would cut short (that is the node's restart story).
	if _, err := nodes[1].Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 2, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	s, err := nodes[1].Client.Submit(ctx(t), api.SubmitRequest{Array: "0-11%3", Claim: api.ClaimRequest{Count: 1, Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", arrayScript(dir, "1")}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 30*time.Second, "four tasks to have run", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ran.*"))
		return len(m) >= 4
	})
	nodes[1].Restart() // the array's origin, mid-array
	// An array that ends otherwise (a task failed) never finishes: say so
	// at once, with why; a wait that runs out says what it saw last.
	var st queue.EntryStatus
	var q api.Queue
	defer func() {
		if t.Failed() {
			t.Logf("the array's status last: %+v; the origin's queue: %+v", st, q.Entries)
		}
	}()
	agenttest.Eventually(t, 90*time.Second, "the array to finish after its origin restarted", func() bool {
		st, _ = nodes[1].Client.EntryStatus(ctx(t), s.ID)
		q, _ = nodes[1].Client.Queue(ctx(t))
		if st.State == queue.EntryFailed || st.State == queue.EntryCancelled {
			t.Fatalf("the array ended %s after its origin restarted (%s), want finished", st.State, st.Reason)
		}
		return st.State == queue.EntryFinished
	})
	if m := most.Load(); m > 3 {
		t.Errorf("%d tasks ran at once; the throttle is 3", m)
	}
	checkEveryTaskOnce(t, dir, s.ID, 12)
	runs := ledgerRuns(t, nodes, s.ID)
	if len(runs) != 12 {
		t.Errorf("the ledger holds runs of %d tasks, want 12: %v", len(runs), runs)
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("the ledger holds %d runs of %s, want 1", n, id)
		}
	}
}

// TestQueuedRunStartsOnANodeWhoseTmuxIsSlow: a queued run started on
// another node whose tmux takes longer to make the session than the
// scheduler waits for an answer (gossip's 3 s; a loaded node) runs, once,
// and finishes. The start was cut off with the request, so the run failed
// ("session-ended"), and an array with such a task ended failed.
func TestQueuedRunStartsOnANodeWhoseTmuxIsSlow(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	dir := agenttest.PublicDir(t)
	slow := filepath.Join(dir, "slow-tmux")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in new-session|source-file) sleep 4;; esac; done\nexec %s \"$@\"\n", tmux)
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, TmuxPaths: []string{"", slow}})
	// node01's GPUs are held, so the run starts on node02.
	if _, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 2, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", "echo ran >> " + filepath.Join(dir, "ran")}}}})
	if err != nil {
		t.Fatal(err)
	}
	var st queue.EntryStatus
	agenttest.Eventually(t, 60*time.Second, "the run to end", func() bool {
		st, _ = nodes[0].Client.EntryStatus(ctx(t), s.ID)
		return st.State == queue.EntryFinished || st.State == queue.EntryFailed || st.State == queue.EntryCancelled
	})
	if st.State != queue.EntryFinished {
		t.Errorf("the run on the node with a slow tmux ended %s (%s), want finished", st.State, st.Reason)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ran")); err != nil || string(b) != "ran\n" {
		t.Errorf("the run's record: %q, %v; want it ran once", b, err)
	}
}

func TestArrayCancelOneTaskAndTheWhole(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Array: "0-9%2", Claim: api.ClaimRequest{Count: 1, Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", arrayScript(dir, "60")}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "two tasks to run", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "live.*"))
		return len(m) == 2
	})
	// One task not made yet, from another node: it never runs.
	if err := nodes[1].Client.Cancel(ctx(t), s.ID+"/9"); err != nil {
		t.Fatalf("cancel one task: %v", err)
	}
	if err := nodes[1].Client.Cancel(ctx(t), s.ID+"/9"); err == nil || !strings.Contains(err.Error(), "ended already") {
		t.Errorf("cancelling a cancelled task again: %v", err)
	}
	// A running task: it is stopped, and the next one starts.
	if err := nodes[0].Client.Cancel(ctx(t), s.ID+"/0"); err != nil {
		t.Fatalf("cancel a running task: %v", err)
	}
	agenttest.Eventually(t, 20*time.Second, "task 0 to stop and task 2 to start", func() bool {
		_, e0 := os.Stat(filepath.Join(dir, "ran.2"))
		q, _ := nodes[1].Client.Queue(ctx(t))
		return e0 == nil && len(q.Entries) == 1 && q.Entries[0].Array != nil && q.Entries[0].Array.Cancelled == 2
	})
	// The whole array: waiting and running tasks end, as scancel does.
	if err := nodes[1].Client.Cancel(ctx(t), s.ID); err != nil {
		t.Fatalf("cancel the array: %v", err)
	}
	agenttest.Eventually(t, 20*time.Second, "every task's lease to end", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				if g.Lease != nil {
					return false
				}
			}
		}
		q, _ := nodes[0].Client.Queue(ctx(t))
		return len(q.Entries) == 0
	})
	if _, err := os.Stat(filepath.Join(dir, "ran.9")); err == nil {
		t.Error("cancelled task 9 ran")
	}
	st, _ := nodes[0].Client.EntryStatus(ctx(t), s.ID)
	if st.State != queue.EntryCancelled {
		t.Errorf("the array's state = %s, want cancelled", st.State)
	}
}
