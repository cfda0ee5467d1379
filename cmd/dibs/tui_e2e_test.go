package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// pane is a real tmux pane running a command, read with capture-pane.
type pane struct {
	t    *testing.T
	sock string
	name string
}

func newPane(t *testing.T, w, h int, env []string, argv ...string) *pane {
	t.Helper()
	agenttest.RequireTmux(t)
	p := &pane{t: t, sock: filepath.Join(agenttest.TmuxDir(t), "e2e.sock"), name: "e2e"}
	args := []string{"-S", p.sock, "new-session", "-d", "-s", p.name, "-x", fmt.Sprint(w), "-y", fmt.Sprint(h)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, strings.Join(argv, " "))
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("tmux", "-S", p.sock, "kill-server").Run() })
	return p
}

func (p *pane) screen() string {
	out, _ := exec.Command("tmux", "-S", p.sock, "capture-pane", "-p", "-t", p.name).CombinedOutput()
	return string(out)
}

func (p *pane) keys(keys ...string) {
	p.t.Helper()
	if out, err := exec.Command("tmux", append([]string{"-S", p.sock, "send-keys", "-t", p.name}, keys...)...).CombinedOutput(); err != nil {
		p.t.Fatalf("send-keys %v: %v %s", keys, err, out)
	}
}

func (p *pane) typeText(text string) {
	p.t.Helper()
	if out, err := exec.Command("tmux", "-S", p.sock, "send-keys", "-t", p.name, "-l", text).CombinedOutput(); err != nil {
		p.t.Fatalf("send-keys -l %q: %v %s", text, err, out)
	}
}

func (p *pane) waitFor(within time.Duration, what string, cond func(screen string) bool) string {
	p.t.Helper()
	var s string
	if !poll.Wait(within, func() bool { s = p.screen(); return cond(s) }) {
		p.t.Fatalf("timed out waiting for %s; the screen:\n%s", what, s)
	}
	return s
}

func myLeases(t *testing.T, socket string) []string {
	t.Helper()
	out, _, code := dibs(t, socket, nil, "ls", "--json")
	if code != 0 {
		return nil
	}
	var b api.Board
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("ls --json: %v", err)
	}
	var ids []string
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if g.Lease != nil && g.Lease.UID == os.Getuid() {
				ids = append(ids, fmt.Sprintf("%s@%s:%d", g.Lease.ID, n.Name, g.Index))
			}
		}
	}
	return ids
}

// TestDemoBoardClaimWithKeystrokes runs `dibs demo` in a real tmux pane,
// claims a GPU with keystrokes, and checks the lease through `dibs ls --json`.
func TestDemoBoardClaimWithKeystrokes(t *testing.T) {
	dir := agenttest.PublicDir(t)
	socket := filepath.Join(dir, "dibs.sock")
	p := newPane(t, 160, 48, []string{"TMUX_TMPDIR=" + agenttest.TmuxDir(t)}, dibsBin, "demo", "--dir", dir)
	s := p.waitFor(20*time.Second, "the demo board with four nodes", func(s string) bool {
		return strings.Contains(s, "node01") && strings.Contains(s, "node04") && strings.Contains(s, "4 nodes")
	})
	for _, want := range []string{"alice", "!squat", "RTX PRO 6000", "L40S", "RTX 5090"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo board does not show %q:\n%s", want, s)
		}
	}
	if got := myLeases(t, socket); len(got) != 0 {
		t.Fatalf("I hold %v before claiming", got)
	}
	// Move to node03 (two nodes down), open the claim form, accept one GPU.
	p.keys("j", "j", "c")
	p.waitFor(5*time.Second, "the claim form", func(s string) bool { return strings.Contains(s, "claim on node03") })
	p.keys("Enter")
	s = p.waitFor(5*time.Second, "the claim to be confirmed on screen", func(s string) bool { return strings.Contains(s, "claimed node03-") })
	got := myLeases(t, socket)
	if len(got) != 1 || !strings.Contains(got[0], "@node03:") {
		t.Fatalf("after claiming with keystrokes, dibs ls --json shows my leases %v; screen:\n%s", got, s)
	}
	// q quits the demo, and the cluster with it.
	p.keys("q")
	agenttest.Eventually(t, 10*time.Second, "the demo to stop", func() bool {
		_, err := os.Stat(socket)
		return os.IsNotExist(err)
	})
}

func sshKey(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		prereq.Missing(t, "needs the OpenSSH client (ssh, ssh-keygen)")
	}
	priv = filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", priv).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	b, _ := os.ReadFile(priv + ".pub")
	return priv, strings.TrimSpace(string(b))
}

func sshArgs(key string, port int, extra ...string) []string {
	args := []string{"-i", key, "-p", fmt.Sprint(port), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR"}
	return append(args, extra...)
}

// TestSSHBoardClaimsAsTheKeysUser opens the board with the real OpenSSH
// client and claims a GPU; the lease belongs to the key's user.
func TestSSHBoardClaimsAsTheKeysUser(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		prereq.Missing(t, "needs the OpenSSH client")
	}
	me, _ := user.Current()
	dir := agenttest.PublicDir(t)
	priv, pub := sshKey(t, dir, "id_test")
	users := filepath.Join(dir, "users")
	os.WriteFile(users, []byte(me.Username+" "+pub+"\n"), 0o644)
	port := agenttest.FreePort(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t)) // the agent's sessions go there, not to the real tmux
	a := startAgent(t, dir, "--sim", "4xH100-80GB", "--ssh-listen", fmt.Sprintf("127.0.0.1:%d", port), "--ssh-users-file", users)

	argv := append([]string{"ssh"}, sshArgs(priv, port, "-t", me.Username+"@127.0.0.1")...)
	p := newPane(t, 120, 40, nil, argv...)
	p.waitFor(15*time.Second, "the board over SSH", func(s string) bool {
		return strings.Contains(s, "node01") && strings.Contains(s, "4 GPUs")
	})
	p.keys("c")
	p.waitFor(5*time.Second, "the claim form", func(s string) bool { return strings.Contains(s, "claim on node01") })
	p.keys("Enter")
	p.waitFor(5*time.Second, "the claim confirmed", func(s string) bool { return strings.Contains(s, "claimed node01-1") })

	b, err := api.NewClient(a.socket).Board(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := b.Nodes[0].GPUs[0].Lease
	if l == nil || l.User != me.Username || l.UID != os.Getuid() {
		t.Fatalf("lease from the SSH board = %+v, want one held by %s", l, me.Username)
	}
	// r runs a command in a tmux session as the key's user; a attaches to it
	// right there, in the SSH session's terminal.
	p.keys("Right", "r")
	// On a free GPU the form runs on exactly that GPU: the command first.
	p.waitFor(5*time.Second, "the run form", func(s string) bool { return strings.Contains(s, "run on node01: GPU 1") })
	p.typeText("echo HELLO-FROM-THE-SESSION; sleep 60")
	p.keys("Enter")
	p.waitFor(5*time.Second, "the run confirmed", func(s string) bool { return strings.Contains(s, "node01-2") })
	p.keys("a")
	p.waitFor(10*time.Second, "the session attached inside the SSH terminal", func(s string) bool {
		return strings.Contains(s, "HELLO-FROM-THE-SESSION") && !strings.Contains(s, "4 GPUs")
	})
	p.keys("C-b", "d") // detach: back to the board
	p.waitFor(5*time.Second, "the board again after detaching", func(s string) bool { return strings.Contains(s, "4 GPUs") })
	p.keys("q")
	if log := a.log.String(); !strings.Contains(log, `msg="ssh: logged in" part=ssh user=`+me.Username+" from=127.0.0.1:") {
		t.Errorf("the login was not logged:\n%s", a.log.String())
	}
}

// TestSSHUnknownKeyGetsNothing: a key nobody authorised is refused before
// any session, and the refusal is logged.
func TestSSHUnknownKeyGetsNothing(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		prereq.Missing(t, "needs the OpenSSH client")
	}
	me, _ := user.Current()
	dir := agenttest.PublicDir(t)
	_, pub := sshKey(t, dir, "id_known")
	stranger, _ := sshKey(t, dir, "id_stranger")
	users := filepath.Join(dir, "users")
	os.WriteFile(users, []byte(me.Username+" "+pub+"\n"), 0o644)
	port := agenttest.FreePort(t)
	a := startAgent(t, dir, "--sim", "2xL40S", "--ssh-listen", fmt.Sprintf("127.0.0.1:%d", port), "--ssh-users-file", users)

	cmd := exec.Command("ssh", sshArgs(stranger, port, "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey,password,keyboard-interactive", me.Username+"@127.0.0.1", "true")...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ssh with an unknown key succeeded: %s", out)
	}
	if !strings.Contains(string(out), "Permission denied") {
		t.Errorf("ssh output = %q, want Permission denied", out)
	}
	agenttest.Eventually(t, 3*time.Second, "the refusal to be logged", func() bool {
		return strings.Contains(a.log.String(), `msg="ssh: refused a key"`)
	})
	if b, _ := api.NewClient(a.socket).Board(context.Background()); b.Nodes[0].GPUs[0].Lease != nil {
		t.Errorf("a lease appeared after a refused login")
	}
}

// TestBoardViewsWithKeystrokes drives the board in a real tmux pane: c on
// a free GPU claims exactly that GPU, the sessions view releases it, and
// the events, queue and usage views show what happened.
func TestBoardViewsWithKeystrokes(t *testing.T) {
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	dir := agenttest.PublicDir(t)
	a := startAgent(t, dir, "--sim", "4xH100-80GB")
	p := newPane(t, 120, 40, nil, dibsBin, "--socket", a.socket, "tui")
	p.waitFor(10*time.Second, "the board", func(s string) bool { return strings.Contains(s, "node01") && strings.Contains(s, "4 GPUs") })

	// The cursor on GPU 3: c claims GPU 3, not the first free one.
	p.keys("l", "l", "l", "c")
	p.waitFor(5*time.Second, "the claim form for GPU 3", func(s string) bool { return strings.Contains(s, "claim on node01: GPU 3") })
	p.keys("Enter")
	p.waitFor(5*time.Second, "the claim confirmed", func(s string) bool { return strings.Contains(s, "claimed node01-1: GPU 3") })
	if got := myLeases(t, a.socket); len(got) != 1 || got[0] != "node01-1@node01:3" {
		t.Fatalf("after c on GPU 3, my leases are %v, want node01-1 on GPU 3", got)
	}

	// My sessions: the lease is there, and x releases it from there.
	p.keys("4")
	p.waitFor(5*time.Second, "my sessions", func(s string) bool { return strings.Contains(s, "my sessions") && strings.Contains(s, "node01-1") })
	p.keys("x")
	p.waitFor(5*time.Second, "the question", func(s string) bool { return strings.Contains(s, "release node01-1?") })
	p.keys("y")
	p.waitFor(5*time.Second, "the release confirmed", func(s string) bool { return strings.Contains(s, "released node01-1") })
	if got := myLeases(t, a.socket); len(got) != 0 {
		t.Fatalf("after x y in my sessions, my leases are %v", got)
	}

	p.keys("5")
	p.waitFor(5*time.Second, "the events of the claim and the release", func(s string) bool {
		return strings.Contains(s, "claimed GPU 3 on node01 as node01-1") && strings.Contains(s, "released node01-1")
	})
	p.keys("2")
	p.waitFor(5*time.Second, "the empty queue", func(s string) bool { return strings.Contains(s, "nothing waits") })
	p.keys("3")
	p.waitFor(5*time.Second, "usage", func(s string) bool { return strings.Contains(s, "GPU-HOURS") && strings.Contains(s, "FAIR-SHARE") })
	p.keys("1")
	p.waitFor(5*time.Second, "the board again", func(s string) bool { return strings.Contains(s, "4/4 free") })
	p.keys("q")
}
