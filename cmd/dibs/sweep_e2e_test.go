package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
)

// TestCLIArraysAndAfter runs the examples of docs/queue.md as printed: an
// array with a throttle, one task's log, a run --after it, refusals, and
// the sbatch export of an array.
func TestCLIArraysAndAfter(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "2xL40S")
	out, errOut, code := dibs(t, p.socket, nil, "run", "--array", "0-3%2", "-g", "1", "--", "sh", "-c",
		"echo task $DIBS_ARRAY_INDEX of $DIBS_ARRAY_ID; touch "+dir+"/out.$DIBS_ARRAY_INDEX; sleep 1")
	if code != 0 || !strings.Contains(out, "queued array node01-q1 (tasks 0-3%2)") || !strings.Contains(out, "dibs logs node01-q1/N") {
		t.Fatalf("run --array: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = dibs(t, p.socket, nil, "run", "--after", "node01-q1", "-g", "1", "--", "touch", dir+"/after")
	if code != 0 || !strings.Contains(out, "queued node01-q2; it starts after node01-q1 succeeds") {
		t.Fatalf("run --after: exit %d %q %q", code, out, errOut)
	}
	out, _, _ = dibs(t, p.socket, nil, "queue")
	if !strings.Contains(out, "node01-q1") || !strings.Contains(out, "waiting") || !strings.Contains(out, "waits for node01-q1 to succeed") {
		t.Errorf("dibs queue:\n%s", out)
	}
	agenttest.Eventually(t, 10*time.Second, "dibs ls to show the array's running tasks", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "ls")
		return strings.Contains(out, "array node01-q1[") && strings.Contains(out, "] running (")
	})
	agenttest.Eventually(t, 30*time.Second, "every task and then the run after them", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "out.*"))
		_, err := os.Stat(filepath.Join(dir, "after"))
		return len(m) == 4 && err == nil
	})
	out, errOut, code = dibs(t, p.socket, nil, "logs", "node01-q1/2")
	if code != 0 || !strings.Contains(out, "task 2 of node01-q1") {
		t.Errorf("dibs logs node01-q1/2: exit %d %q %q", code, out, errOut)
	}
	// The array's id shows every task, each under its header (issue 30:
	// "no run of yours named node01-q1"); -f asks for one of them.
	out, errOut, code = dibs(t, p.socket, nil, "logs", "node01-q1")
	for i := range 4 {
		head := fmt.Sprintf("==> task node01-q1/%d on node01 (", i)
		if code != 0 || !strings.Contains(out, head) || !strings.Contains(out, fmt.Sprintf("task %d of node01-q1", i)) ||
			i > 0 && strings.Index(out, head) < strings.Index(out, fmt.Sprintf("==> task node01-q1/%d ", i-1)) {
			t.Errorf("dibs logs node01-q1: exit %d %q %q; want task %d's output under %q, in task order", code, out, errOut, i, head)
		}
	}
	if _, errOut, code = dibs(t, p.socket, nil, "logs", "node01-q1", "-f"); code == 0 ||
		errOut != "dibs: node01-q1 is an array of 4 tasks with logs: name one (node01-q1/0 node01-q1/1 node01-q1/2 node01-q1/3), as in dibs logs node01-q1/0\n" {
		t.Errorf("dibs logs node01-q1 -f: exit %d %q; want the tasks to pick from", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--after", "node01-q99", "-g", "1", "--", "true"}, "not a queued run that dibs knows of"},
		{[]string{"run", "--array", "3-1", "-g", "1", "--", "true"}, "runs backwards"},
		{[]string{"run", "--array", "0-3", "-g", "1"}, "runs a command once per task"},
		{[]string{"run", "--array", "0-3", "--at", "18:00", "-g", "1", "--", "true"}, "drop one"},
	} {
		_, errOut, code := dibs(t, p.socket, nil, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("dibs %s: exit %d %q, want one line saying %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	// A waiting array exports as an sbatch array.
	agenttest.Eventually(t, 10*time.Second, "both GPUs to be claimed once the last run's lease ended", func() bool {
		_, _, c := dibs(t, p.socket, nil, "claim", "-g", "2", "--for", "1h")
		return c == 0
	})
	if _, e, c := dibs(t, p.socket, nil, "run", "--array", "0-19%4", "-g", "1", "--", "sh", "-c", "python train.py --seed $DIBS_ARRAY_INDEX"); c != 0 {
		t.Fatal(e)
	}
	out, errOut, code = dibs(t, p.socket, nil, "export", "sbatch", "node01-q3")
	if code != 0 || !strings.Contains(out, "#SBATCH --array=0-19%4") || !strings.Contains(out, "DIBS_ARRAY_INDEX=$SLURM_ARRAY_TASK_ID") {
		t.Errorf("export sbatch of an array: exit %d %q\n%s", code, errOut, out)
	}
	if _, e, c := dibs(t, p.socket, nil, "cancel", "node01-q3"); c != 0 {
		t.Fatalf("cancel the array: %s", e)
	}
}
