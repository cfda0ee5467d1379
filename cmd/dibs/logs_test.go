package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch"
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
		// The last output reaches the file a moment after the lease ends
		// (more than 5 s once, in a full CI run beside the install test).
		poll.WaitEvery(100*time.Millisecond, 15*time.Second, func() bool {
			out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "logs", "node01-1")
			return strings.Contains(out, word)
		})
		if code != 0 || strings.TrimSpace(out) != word {
			t.Errorf("dibs logs node01-1 after the %s: exit %d, %q (stderr %q), want %q alone", word, code, out, errOut, word)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
	}
	runOnce("first-run")
	runOnce("second-run")
}

// runAndWait runs argv as u with `dibs run -g 1 --json` and waits for the
// run to end; it returns the lease.
func runAndWait(t *testing.T, u launch.User, sock string, argv ...string) api.ClaimResponse {
	t.Helper()
	out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", sock, append([]string{"run", "-g", "1", "--json", "--"}, argv...)...)
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run %v: exit %d %s %s", argv, code, out, errOut)
	}
	agenttest.Eventually(t, 20*time.Second, "run "+r.ID+" to end", func() bool {
		b, err := api.NewClient(sock).Board(context.Background())
		return err == nil && !leaseLive(b, r.ID)
	})
	return r
}

// Weak 6 of the fourth round: past the per-user event cap a `dibs run --
// true` loop still added events (a session's end was not counted), and
// `dibs logs` found runs through the event log, so once a person was over
// the cap it said "no run of yours named …" of their newest runs. The loop
// is bounded in events (the cap and one warning), and `dibs logs` finds a
// run made past the cap by its own record.
func TestLogsFindARunPastTheEventCap(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	dir := agenttest.PublicDir(t)
	conf := filepath.Join(dir, "dibs.toml")
	if err := os.WriteFile(conf, []byte("[events]\nper_user_hour = 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, dir, "--sim", "1xL40S", "--config", conf)
	for range 6 {
		runAndWait(t, u, p.socket, "true")
	}
	r := runAndWait(t, u, p.socket, "sh", "-c", "echo made-past-the-cap")
	var out, errOut string
	var code int
	if !poll.Wait(10*time.Second, func() bool {
		out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "logs", r.ID)
		return code == 0 && strings.Contains(out, "made-past-the-cap")
	}) {
		t.Errorf("dibs logs %s of a run made past the cap: exit %d, %q, stderr %q; want its output", r.ID, code, out, errOut)
	}
	out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "events", "--json", "--user", u.Name)
	var list api.EventList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("dibs events: exit %d %q %q", code, out, errOut)
	}
	kept, warned := 0, 0
	for _, e := range list.Events {
		if e.Reason == "events-not-kept" {
			warned++
		} else {
			kept++
		}
	}
	if kept != 4 || warned != 1 {
		t.Errorf("7 runs (claims, ends) under a cap of 4 kept %d events and %d warnings, want 4 and 1:\n%s", kept, warned, out)
	}
}

// The last session's finding: an agent killed (SIGKILL) right after it
// answered `dibs run` had not yet written the run's claim event, and
// `dibs logs node01-1` said there was no such run. A live run is found by
// its lease, which was durable before the answer.
func TestLogsFindALiveRunAfterTheAgentWasKilled(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "1xL40S")
	out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", p.socket, "run", "-g", "1", "--json", "--", "sh", "-c", "echo alive-after-kill; sleep 300")
	p.kill9(t)
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run: exit %d %s %s", code, out, errOut)
	}
	p.start(t)
	if !poll.Wait(15*time.Second, func() bool {
		out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "logs", r.ID)
		return code == 0 && strings.Contains(out, "alive-after-kill")
	}) {
		t.Errorf("dibs logs %s after the agent was killed: exit %d, %q, stderr %q; want the run's output", r.ID, code, out, errOut)
	}
	dibsAs(t, u, "/usr/bin:/bin", p.socket, "release", r.ID)
}
