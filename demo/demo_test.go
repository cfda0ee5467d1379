package demo

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// TestSessionLeasesFindsEveryLeaseWithASession: what the demo releases
// when it stops are the person's leases with a session on the node, on
// whole GPUs, on parts of GPUs, and services, a -g 0 one among them
// (it holds no GPU, so only the board's services show it); not other
// people's, not other nodes', not those without a session.
func TestSessionLeasesFindsEveryLeaseWithASession(t *testing.T) {
	mine := func(id, node string) lease.Lease {
		return lease.Lease{ID: id, Node: node, UID: 1000, Session: "s-" + id}
	}
	whole, share, svc, other := mine("node01-1", "node01"), mine("node01-2", "node01"), mine("node01-3", "node01"), mine("node02-1", "node02")
	svc.Service = &service.Service{Spec: service.Spec{Name: "tb"}}
	theirs := mine("node01-4", "node01")
	theirs.UID = 1001
	bare := mine("node01-5", "node01")
	bare.Session = ""
	b := api.Board{
		Nodes: []api.Node{{Name: "node01", GPUs: []api.GPU{{Lease: &whole}, {Shares: []lease.Lease{share, theirs}}, {Lease: &bare}}},
			{Name: "node02", GPUs: []api.GPU{{Lease: &other}}}},
		Services: []lease.Lease{svc, other},
	}
	got := sessionLeases(b, "node01", 1000)
	if want := []string{"node01-1", "node01-2", "node01-3"}; !slices.Equal(got, want) {
		t.Errorf("sessionLeases = %v, want %v (a whole GPU's, a share's, a -g 0 service's)", got, want)
	}
}

// TestStopEndsAServiceWithoutAGPU: a `-g 0` service started in the demo
// (a tmux session, no GPU) is ended when the demo stops: its session does
// not outlive the demo.
func TestStopEndsAServiceWithoutAGPU(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: this test starts a real tmux session")
	}
	// The sessions write their exit status under dir, as their user: a
	// directory of its own they pass through (t.TempDir's parent is 0700).
	tmux := t.TempDir()
	dir, err := os.MkdirTemp("", "dibs-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Start(ctx, Options{Dir: dir, TmuxTmpDir: tmux, Seed: 1, Tick: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Stop()
		}
		exec.Command("tmux", "-S", tmuxSocket(tmux), "kill-server").Run()
	})
	r, err := d.byName["node01"].For(os.Getuid()).Claim(ctx, api.ClaimRequest{
		Run: &api.RunSpec{Command: []string{"sleep", "600"}, Dir: t.TempDir()}, Service: &service.Spec{Name: "tb"}})
	if err != nil {
		t.Fatal(err)
	}
	has := func() bool {
		return exec.Command("tmux", "-S", tmuxSocket(tmux), "has-session", "-t", "="+r.Session).Run() == nil
	}
	if !has() {
		t.Fatalf("the service's session %s is not running", r.Session)
	}
	d.Stop()
	stopped = true
	if has() {
		t.Fatalf("the -g 0 service's session %s outlived the demo", r.Session)
	}
}

// tmuxSocket is tmux's default socket under TMUX_TMPDIR dir.
func tmuxSocket(dir string) string {
	return dir + "/tmux-" + strconv.Itoa(os.Getuid()) + "/default"
}
