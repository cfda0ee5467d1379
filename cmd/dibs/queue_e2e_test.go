package main

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
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
	// Impossible requests are refused, not queued.
	_, errOut, code = dibs(t, p.socket, nil, "run", "--queue", "-g", "4", "--", "true")
	if code == 0 || !strings.Contains(errOut, "4") {
		t.Errorf("impossible run --queue: exit %d %q", code, errOut)
	}
}
