package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/queue"
)

// TestQueuedStartCutOffByAStopRunsOnce: the agent is stopped (SIGTERM's
// path, a restart) while its start of a queued run is in flight — the
// lease is durable, the start has not answered — and started again.
//
// When tmux had made the session, the run keeps running under its lease,
// the restarted agent re-adopts it, and its origin sees the attempt
// running: it is never started a second time, even with --requeue and
// retries due at once. When tmux had not, the kept lease ends as soon as
// tmux says there is no session, and the attempt is requeued once: the
// run still starts exactly once.
//
// The window is held open by a tmux that (makes the session and then)
// does not answer — the agent's stop kills it, as it kills any tmux client
// it is waiting for — for the first start only (its `source-file` of the
// start's command list, or `new-session`); every other call is tmux's own.
func TestQueuedStartCutOffByAStopRunsOnce(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// made: tmux made the session before the stop cut the start off.
		made bool
		// restarts is how many times the entry was requeued.
		restarts int
	}{
		{name: "the session was made", made: true, restarts: 0},
		{name: "the session was not made", made: false, restarts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := agenttest.PublicDir(t)
			gate, cut, runs := filepath.Join(dir, "gate"), filepath.Join(dir, "cut"), filepath.Join(dir, "runs")
			slow := filepath.Join(dir, "tmux")
			makeIt := ""
			if tt.made {
				// tmux makes the session; its answer (the pane's pid,
				// the agent's sign that the start is done) never reaches
				// the agent.
				makeIt = `"` + tmux + `" "$@" >/dev/null`
			}
			script := `#!/bin/sh
case " $* " in
*" new-session "*|*" source-file "*)
	if rm "` + gate + `" 2>/dev/null; then
		` + makeIt + `
		: > "` + cut + `"
		exec sleep 60
	fi;;
esac
exec "` + tmux + `" "$@"
`
			if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", TmuxPath: slow,
				Sched: queue.SchedConfig{RequeueBackoff: 100 * time.Millisecond, MaxRequeueBackoff: 100 * time.Millisecond}})
			s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Requeue: true, MaxRestarts: 3, Claim: api.ClaimRequest{Count: 1, Duration: "30m",
				Run: &api.RunSpec{Command: []string{"sh", "-c", "echo $DIBS_LEASE_ID >> " + runs + "; exec sleep 300"}}}})
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			agenttest.Eventually(t, 10*time.Second, "the queued run's start to be under way", func() bool {
				_, err := os.Stat(cut)
				return err == nil
			})
			n.Restart()

			// The restarted agent shows the run, running, as the attempt
			// its origin started (or, when nothing was made, the next).
			agenttest.Eventually(t, 15*time.Second, "the entry to show running after the restart", func() bool {
				q, err := n.Client.Queue(ctx(t))
				return err == nil && len(q.Entries) == 1 && q.Entries[0].Running && q.Entries[0].Restarts == tt.restarts
			})
			// Requeues are due at once: give a second start every chance
			// to happen (scheduler passes, a start in flight timing out).
			// An absence, watched for the whole window.
			var q api.Queue
			if poll.WaitEvery(500*time.Millisecond, queue.InFlightTimeout+3*time.Second, func() bool {
				var err error
				if q, err = n.Client.Queue(ctx(t)); err != nil {
					t.Fatal(err)
				}
				return len(q.Entries) != 1 || !q.Entries[0].Running || q.Entries[0].Restarts != tt.restarts
			}) {
				t.Fatalf("queue after the restart = %+v, want %s running, requeued %d times", q.Entries, s.ID, tt.restarts)
			}
			b, err := os.ReadFile(runs)
			if err != nil {
				t.Fatal(err)
			}
			started := strings.Fields(string(b))
			if len(started) != 1 {
				t.Fatalf("the run started %d times (leases %v), want once", len(started), started)
			}
			board, err := n.Client.Board(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var held []string
			for _, g := range board.Nodes[0].GPUs {
				if g.Lease != nil && strings.HasPrefix(g.Lease.Entry, s.ID+"#") {
					held = append(held, g.Lease.ID)
				}
			}
			if len(held) != 1 || held[0] != started[0] {
				t.Errorf("leases of %s on the board: %v, want the one its run started under (%s)", s.ID, held, started[0])
			}
			out, err := n.Tmux(os.Getuid(), "list-sessions", "-F", "#{session_name}")
			if err != nil {
				t.Fatalf("tmux list-sessions: %v: %s", err, out)
			}
			if sessions := strings.Fields(out); len(sessions) != 1 {
				t.Errorf("tmux sessions %v, want the one run", sessions)
			}
		})
	}
}
