package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// TestSessionNameDibsChoseIsTaken: after a node's state is wiped (a new
// data dir: lease ids from 1 again) while its old sessions still run, the
// name dibs derives for a new run (dibs-node01-1) is taken. The person
// never picked it, so the run is not refused for it: it gets the next
// free name, recorded on the lease, durably. A name the person gave with
// --name that is taken is still theirs to change, and refused as before.
// (Issue 30: a queued gang failed for good with "you already have a tmux
// session named dibs-rb1-1: pick another --name".)
func TestSessionNameDibsChoseIsTaken(t *testing.T) {
	sess := tmuxSessions(t)
	c, u := me(t)
	ctx := context.Background()
	for _, name := range []string{"dibs-node01-1", "dibs-node01-1-2", "mine"} {
		if _, err := sess.Start(ctx, launch.Spec{Name: name, User: u, Command: []string{"sleep", "300"}}); err != nil {
			t.Fatalf("the earlier state's session %s: %v", name, err)
		}
	}
	r := newRig(t, lease.DefaultPolicy(), sess) // a fresh store: its first lease is node01-1
	l, err := r.n.Grant(ctx, c, node.Grant{Claim: lease.Claim{Count: 1}, Entry: "node01-q1#0", Run: &node.Run{Command: []string{"sleep", "300"}}})
	if err != nil {
		t.Fatalf("a queued run whose derived session name is taken: %v, want it started under another name", err)
	}
	if l.ID != "node01-1" || l.Session != "dibs-node01-1-3" {
		t.Errorf("lease %s session %q, want node01-1 with session dibs-node01-1-3 (the next free name)", l.ID, l.Session)
	}
	if ok, err := sess.Exists(ctx, u, "dibs-node01-1-3"); err != nil || !ok {
		t.Errorf("session dibs-node01-1-3 runs: %v %v, want it running", ok, err)
	}
	if d := r.durable(t); len(d) != 1 || d[0].Session != "dibs-node01-1-3" {
		t.Errorf("durable leases %+v, want node01-1 with its session's new name (a restarted agent re-adopts by it)", d)
	}
	if got := r.n.State().Leases; len(got) != 1 || got[0].Session != "dibs-node01-1-3" {
		t.Errorf("the node's state %+v, want the session's new name", got)
	}

	_, err = r.n.Grant(ctx, c, node.Grant{Claim: lease.Claim{Count: 1}, Run: &node.Run{Name: "mine", Command: []string{"sleep", "300"}}})
	if err == nil || !strings.Contains(err.Error(), "you already have a tmux session named mine: pick another --name") {
		t.Errorf("--name mine, taken: %v, want the refusal naming it", err)
	}
}
