package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestLogsOfRunsThatShareAnIDNeverMix: a node whose state is new gives
// lease ids from 1 again, so a new run is node01-1 like one before it;
// `dibs logs node01-1` shows the new run's output alone (it once showed
// the older run's above it, both kept in dibs-node01-1.log).
func TestLogsOfRunsThatShareAnIDNeverMix(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	runOnce := func(word string) {
		t.Helper()
		p := startAgent(t, agenttest.PublicDir(t), "--sim", "1xL40S")
		out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", p.socket, "run", "-g", "1", "--", "sh", "-c", "echo "+word)
		if code != 0 || !strings.Contains(out, "node01-1") {
			t.Fatalf("run: exit %d %q %q, want lease node01-1 on a new state", code, out, errOut)
		}
		agenttest.Eventually(t, 10*time.Second, "the run to end", func() bool {
			b, err := api.NewClient(p.socket).Board(context.Background())
			return err == nil && !leaseLive(b, "")
		})
		// The last output reaches the file a moment after the lease ends.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "logs", "node01-1"); strings.Contains(out, word) {
				break
			}
		}
		if code != 0 || strings.TrimSpace(out) != word {
			t.Errorf("dibs logs node01-1 after the %s: exit %d, %q (stderr %q), want %q alone", word, code, out, errOut, word)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
	}
	runOnce("first-run")
	runOnce("second-run")
}
