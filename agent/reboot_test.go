package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// bootClock is the system clock with a kernel boot id the test sets: a
// reboot without rebooting.
type bootClock struct {
	clock.Clock
	mu   sync.Mutex
	boot string
}

func (c *bootClock) Boot() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot
}

func (c *bootClock) reboot(boot string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boot = boot
}

// A node whose kernel boot id changed while its agent was down rebooted:
// the lease whose session died with it ends "node-rebooted" before the
// agent answers, and the agent says once that its node rebooted; a bare
// claim (no session) is kept. A restart under the same boot id keeps
// everything, and the boot the agent ran under is kept in its data dir.
func TestRebootEndsTheSessionsOfTheLastBootOnly(t *testing.T) {
	agenttest.RequireTmux(t)
	clk := &bootClock{Clock: clock.Real(), boot: "boot-1"}
	n := agenttest.Start(t, agenttest.Options{Clock: clk})
	uid := os.Getuid()
	run, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", Run: &api.RunSpec{Command: []string{"sleep", "100000"}}})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	held := func() map[string]bool {
		b, err := n.Client.Board(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				out[g.Lease.ID] = true
			}
		}
		return out
	}

	// A restart: same boot, the session runs on.
	n.Restart()
	if h := held(); !h[run.ID] || !h[bare.ID] {
		t.Fatalf("after a restart under the same boot id the node holds %v, want %s and %s", h, run.ID, bare.ID)
	}
	if b, err := os.ReadFile(filepath.Join(n.Opts.DataDir, "boot-id")); err != nil || strings.TrimSpace(string(b)) != "boot-1" {
		t.Errorf("the data dir keeps boot id %q (%v), want boot-1", b, err)
	}

	// A reboot: the agent dies with every process of the node, tmux
	// included, and comes back under a new boot id.
	n.Crash()
	if out, err := n.Tmux(uid, "kill-server"); err != nil {
		t.Fatalf("kill the node's tmux server: %v %s", err, out)
	}
	clk.reboot("boot-2")
	n.Restart()
	if h := held(); h[run.ID] || !h[bare.ID] {
		t.Fatalf("after a reboot the node answered holding %v: want %s ended (its session died) and %s kept (a bare claim)", h, run.ID, bare.ID)
	}
	evs, err := n.Client.Events(ctx(t), api.EventsRequest{Since: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	ends, said := 0, 0
	for _, e := range evs.Events {
		if e.Kind == event.EventEnd && e.Lease == run.ID {
			ends++
			if e.Reason != string(lease.EndRebooted) || !strings.Contains(e.Text, "because its node rebooted") {
				t.Errorf("%s ended %s: %q, want %s", run.ID, e.Reason, e.Text, lease.EndRebooted)
			}
		}
		if e.Kind == event.EventAgentJoin && e.Reason == string(lease.EndRebooted) {
			said++
			if !strings.Contains(e.Text, "started after its node rebooted") || !strings.Contains(e.Text, "1 of its leases ended") {
				t.Errorf("the reboot event reads %q", e.Text)
			}
		}
	}
	if ends != 1 || said != 1 {
		t.Errorf("%d end events of %s and %d reboot events, want one each", ends, run.ID, said)
	}

	// The next restart is a restart again: the bare claim stays.
	n.Restart()
	agenttest.Eventually(t, 5*time.Second, "the agent to answer", func() bool { _, err := n.Client.Board(ctx(t)); return err == nil })
	if h := held(); !h[bare.ID] {
		t.Errorf("after a second restart under boot-2 the node holds %v, want %s", h, bare.ID)
	}
}
