package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/queue"
)

func TestCLIQueue(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "--for", "1h", "--note", "blocker"); c != 0 {
		t.Fatal(e)
	}

	// run --queue returns at once with the entry id, like sbatch.
	out, errOut, code := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--", "true")
	if code != 0 || !strings.Contains(out, "queued node01-q1: position 1 of 1") {
		t.Fatalf("run --queue: exit %d %q %q", code, out, errOut)
	}
	out, _, _ = dibs(t, p.socket, nil, "queue")
	for _, want := range []string{"node01-q1", "in 1h", "scheduler: node01"} {
		if !strings.Contains(out, want) {
			t.Errorf("dibs queue lacks %q:\n%s", want, out)
		}
	}
	if _, e, c := dibs(t, p.socket, nil, "cancel", "node01-q1"); c != 0 {
		t.Fatalf("cancel: %s", e)
	}
	if out, _, _ = dibs(t, p.socket, nil, "queue"); !strings.Contains(out, "the queue is empty") {
		t.Errorf("after cancel:\n%s", out)
	}

	// claim --queue waits in the foreground; Ctrl-C withdraws the request.
	cmd := exec.Command(dibsBin, "--socket", p.socket, "claim", "--queue", "-g", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the waiting claim to show in the queue", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "queue")
		return strings.Contains(out, "node01-q2")
	})
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("claim --queue after Ctrl-C: %v, want exit 130", err)
	}
	if !strings.Contains(stderr.String(), "position 1") || !strings.Contains(stderr.String(), "withdrew node01-q2") {
		t.Errorf("claim --queue said %q", stderr.String())
	}
	if out, _, _ = dibs(t, p.socket, nil, "queue"); !strings.Contains(out, "the queue is empty") {
		t.Errorf("Ctrl-C did not withdraw the request:\n%s", out)
	}

	// claim --queue is granted when the GPU frees.
	cmd = exec.Command(dibsBin, "--socket", p.socket, "claim", "--queue", "-g", "1", "--json")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the waiting claim to show in the queue", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "queue")
		return strings.Contains(out, "node01-q3")
	})
	if _, e, c := dibs(t, p.socket, nil, "release", "node01-1"); c != 0 {
		t.Fatal(e)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(stdout.String(), `"cuda_visible_devices": "0"`) {
			t.Errorf("claim --queue: %v %q", err, stdout.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("claim --queue was not granted after the release")
	}

	out, _, code = dibs(t, p.socket, nil, "usage", "--window", "1h")
	if code != 0 || !strings.Contains(out, "FAIRSHARE") {
		t.Errorf("usage: %q", out)
	}
	// Issue 34: the same hours per day, as bars.
	out, errOut, code = dibs(t, p.socket, nil, "usage", "--chart", "--window", "1h")
	if code != 0 || !strings.Contains(out, "GPU-hours per person per day") || !strings.ContainsAny(out, "█#▏▎▍▌▋▊▉") {
		t.Errorf("usage --chart: exit %d %q %q, want a bar", code, out, errOut)
	}
	// Impossible requests are refused, not queued.
	_, errOut, code = dibs(t, p.socket, nil, "run", "--queue", "-g", "4", "--", "true")
	if code == 0 || !strings.Contains(errOut, "4") {
		t.Errorf("impossible run --queue: exit %d %q", code, errOut)
	}
}

// TestCLIQueuedRunThatFailsSaysWhyFromItsStatus: `dibs run --queue` learns
// that its run failed from the entry's structured status at the agent (not
// from a notice's words), prints the reason and exits non-zero; the status
// stays readable through the API.
func TestCLIQueuedRunThatFailsSaysWhyFromItsStatus(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	_, errOut, code := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--dir", "/nonexistent/dir", "--", "true")
	st, err := api.NewClient(p.socket).EntryStatus(context.Background(), "node01-q1")
	if err != nil || st.State != queue.EntryFailed || st.Reason == "" {
		t.Fatalf("entry status = %+v, %v; want failed, with a reason", st, err)
	}
	if want := "your job node01-q1 failed: " + st.Reason; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("run --queue in a missing directory: exit %d, stderr %q; want %q", code, errOut, want)
	}
}

// TestCLIRequeuedAttemptsAreSpaced: a run that fails at once with
// --requeue --max-restarts 2 does not use up its restarts in a second: each
// retry waits (requeue_backoff 2 s, doubling, jitter within ±25 %), `dibs
// queue` says why it waits and when it tries again, and the events show the
// attempts spaced.
func TestCLIRequeuedAttemptsAreSpaced(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	conf := filepath.Join(dir, "dibs.toml")
	os.WriteFile(conf, []byte("[queue]\nrequeue_backoff = \"2s\"\n"), 0o644)
	p := startAgent(t, dir, "--sim", "1xL40S", "--config", conf)
	if _, e, c := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--requeue", "--max-restarts", "2", "--", "false"); c != 0 && !strings.Contains(e, "failed") {
		t.Fatalf("run --queue: %s", e)
	}
	cl := api.NewClient(p.socket)
	// While it backs off, the queue says why and when.
	sawWait := false
	agenttest.Eventually(t, 5*time.Second, "the queue to show the run waiting to retry", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "queue")
		sawWait = strings.Contains(out, "restart 1 of 2, spaced after a failure") && strings.Contains(out, "exit-1") && strings.Contains(out, " in ")
		return sawWait
	})
	st, err := cl.EntryStatus(context.Background(), "node01-q1")
	if err != nil || st.State != queue.EntryBackoff || st.RetryAt.IsZero() || !strings.Contains(st.Reason, "exit-1") {
		t.Errorf("status while it backs off = %+v, %v", st, err)
	}
	agenttest.Eventually(t, 20*time.Second, "the run to fail for good after 2 restarts", func() bool {
		st, err := cl.EntryStatus(context.Background(), "node01-q1")
		return err == nil && st.State == queue.EntryFailed
	})
	evs, err := cl.Events(context.Background(), api.EventsRequest{Since: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	requeues := 0
	for _, e := range evs.Events {
		if e.Kind == event.EventStart && strings.HasPrefix(e.Entry, "node01-q1") {
			starts = append(starts, e.At)
		}
		if e.Kind == event.EventRequeue {
			requeues++
			if !strings.Contains(e.Text, "tries again in") {
				t.Errorf("the requeue event does not say when it tries again: %q", e.Text)
			}
		}
	}
	if requeues != 2 {
		t.Errorf("%d requeue events, want 2", requeues)
	}
	if len(starts) != 3 {
		t.Fatalf("%d attempts started, want 3: %+v", len(starts), evs.Events)
	}
	// Restart 1 waits 2 s × [0.75, 1.25), restart 2 twice that.
	for i, least := range []time.Duration{1500 * time.Millisecond, 3 * time.Second} {
		if gap := starts[i+1].Sub(starts[i]); gap < least {
			t.Errorf("attempt %d started %s after attempt %d, want at least %s", i+2, gap, i+1, least)
		}
	}
	t.Logf("attempts started at +0, +%s, +%s", starts[1].Sub(starts[0]).Round(10*time.Millisecond), starts[2].Sub(starts[0]).Round(10*time.Millisecond))
}
