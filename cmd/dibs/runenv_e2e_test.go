package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestRunFindsWhatTheCallersShellFinds: with a virtualenv active, `dibs
// run -- mytool` runs the virtualenv's mytool, here, on another node
// (--node) and from the queue, with VIRTUAL_ENV set and the lease's own
// CUDA_VISIBLE_DEVICES winning over the caller's; nothing outside the
// carried list (an API key) goes along; --clean-env leaves the PATH behind;
// a PATH too long to carry is refused in one line.
func TestRunFindsWhatTheCallersShellFinds(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	sock := nodes[0].Socket

	venv := filepath.Join(u.Home, "venv")
	bin := filepath.Join(venv, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tool := "#!/bin/sh\necho \"mytool venv=$VIRTUAL_ENV gpus=$CUDA_VISIBLE_DEVICES key=${WANDB_API_KEY:-unset}\"\n"
	if err := os.WriteFile(filepath.Join(bin, "mytool"), []byte(tool), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{venv, bin, filepath.Join(bin, "mytool")} {
		os.Chown(p, u.UID, u.GID)
	}
	shell := []string{"PATH=" + bin + ":/usr/bin:/bin", "VIRTUAL_ENV=" + venv, "CUDA_VISIBLE_DEVICES=7", "WANDB_API_KEY=secret"}
	as := func(args ...string) (string, string, int) { return dibsAsWith(t, u, shell, sock, args...) }
	want := "mytool venv=" + venv + " gpus=0 key=unset"

	queueID := regexp.MustCompile(`node0\d-q\d+`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"here", []string{"run", "-g", "1", "--node", "node01", "--json", "--", "mytool"}},
		{"on another node", []string{"run", "-g", "1", "--node", "node02", "--json", "--", "mytool"}},
		{"from the queue", []string{"run", "-g", "1", "--queue", "--", "mytool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := as(tc.args...)
			if code != 0 {
				t.Fatalf("dibs %s: exit %d %s", strings.Join(tc.args, " "), code, errOut)
			}
			id := queueID.FindString(out)
			if id == "" {
				var r api.ClaimResponse
				json.Unmarshal([]byte(out), &r)
				id = r.ID
			}
			var logs string
			agenttest.Eventually(t, 15*time.Second, "the run's output", func() bool {
				logs, _, _ = as("logs", id)
				return strings.Contains(logs, "mytool")
			})
			if !strings.Contains(logs, want) {
				t.Errorf("dibs logs %s = %q, want %q", id, logs, want)
			}
			agenttest.Eventually(t, 10*time.Second, "the run to end", func() bool { return !leaseLive(nodes[0].Board(), "") })
		})
	}

	out, errOut, code := as("run", "-g", "1", "--clean-env", "--json", "--", "mytool")
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run --clean-env: exit %d %s", code, errOut)
	}
	agenttest.Eventually(t, 15*time.Second, "the clean run to fail", func() bool {
		logs, _, _ := as("logs", r.ID)
		return strings.Contains(logs, "mytool: not found")
	})

	long := []string{"PATH=" + bin + ":" + strings.Repeat("/x", 5000) + ":/usr/bin:/bin"}
	_, errOut, code = dibsAsWith(t, u, long, sock, "run", "-g", "1", "--", "mytool")
	if code == 0 || !strings.Contains(errOut, "at most 8192 travel with a run") || !strings.Contains(errOut, "--clean-env") ||
		strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("a 10 KB PATH: exit %d, %q; want a one-line refusal naming --clean-env", code, errOut)
	}
}
