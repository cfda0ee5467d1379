package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// exitConfig is the status dibsd's agent exits with on a config it cannot
// start with; `dibs agent` hands over to dibsd, so the client's caller sees it.
const exitConfig = daemoncmd.ExitConfig

// TestAgentConfigErrorsExit78 is what the packaged unit relies on: an agent
// that cannot start with its config exits with EX_CONFIG (78), which
// RestartPreventExitStatus keeps systemd from restarting in a loop, and says
// in one line what to do — for the missing cluster key, the keygen step.
func TestAgentConfigErrorsExit78(t *testing.T) {
	dir := agenttest.PublicDir(t)
	missing := filepath.Join(dir, "etc", "cluster.key")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no key file where the config says", []string{"--bind", "127.0.0.1:0", "--cluster-key-file", missing},
			"no cluster key at " + missing + ": make one on one node with `dibs keygen " + missing + "`"},
		{"gossip beyond loopback without a key", []string{"--bind", "0.0.0.0:0", "--join", "127.0.0.1:1"},
			"make a cluster key with `dibs keygen"},
		{"a config file that is not there", []string{"--config", filepath.Join(dir, "nope.toml")},
			"nope.toml"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"agent", "--sim", "1xL40S", "--data-dir", filepath.Join(dir, "d", tt.name)}, tt.args...)
			out, errOut, code := dibs(t, filepath.Join(dir, "s"+string(rune('a'+i))+".sock"), nil, args...)
			if code != exitConfig || !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d and one line containing %q", code, errOut, out, exitConfig, tt.want)
			}
		})
	}
}

// TestDaemonVerbsRunDibsd: the daemon's verbs typed to the client run the
// dibsd beside it, in the same process (so systemd's and a test's signals
// reach the agent); with no dibsd beside it or on PATH, each says in one line
// what to install, exits 1, and starts nothing.
func TestDaemonVerbsRunDibsd(t *testing.T) {
	out, errOut, code := dibs(t, "/nonexistent/dibs.sock", nil, "keygen", "--help")
	if code != 0 || !strings.Contains(out, "dibsd keygen FILE") {
		t.Errorf("dibs keygen --help beside dibsd: exit %d, stdout %q, stderr %q; want dibsd's own help", code, out, errOut)
	}
	alone := filepath.Join(t.TempDir(), "dibs")
	b, err := os.ReadFile(dibsBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"agent", "--sim", "1xL40S"}, {"demo"}, {"probe"}, {"keygen", "k"}, {"config", "check"}} {
		t.Run(args[0], func(t *testing.T) {
			cmd := exec.Command(alone, args...)
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=" + cmd.Dir, "HOME=" + cmd.Dir} // no dibsd anywhere
			var o, e strings.Builder
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			want := "dibs: this verb is the daemon's, and dibsd is neither beside this dibs (" + filepath.Join(filepath.Dir(alone), "dibsd") + ") nor on PATH"
			if err == nil || code != 1 || !strings.HasPrefix(e.String(), want) || strings.Count(e.String(), "\n") != 1 || o.Len() != 0 {
				t.Errorf("dibs %s without dibsd: exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", strings.Join(args, " "), code, o.String(), e.String(), want)
			}
			if _, err := os.Stat(filepath.Join(cmd.Dir, "k")); err == nil {
				t.Error("keygen without dibsd wrote a key")
			}
		})
	}
}

// TestBoardWithoutDibsd: the board runs in dibsd (so its libraries are not
// loaded by every dibs command); a dibs with no dibsd beside it or on PATH
// says so in one line and exits 1 — after checking the agent, so a missing
// agent is still reported as that.
func TestBoardWithoutDibsd(t *testing.T) {
	a := startAgent(t, agenttest.PublicDir(t), "--sim", "1xL40S")
	alone := filepath.Join(t.TempDir(), "dibs")
	b, err := os.ReadFile(dibsBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, socket, want string
	}{
		{"no dibsd", a.socket, "dibs: the board runs in dibsd, and dibsd is neither beside this dibs (" + filepath.Join(filepath.Dir(alone), "dibsd") + ") nor on PATH"},
		{"no agent", "/nonexistent/dibs.sock", "dibs: no dibs agent at /nonexistent/dibs.sock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(alone, "--socket", tt.socket, "tui")
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=" + cmd.Dir, "HOME=" + cmd.Dir}
			var o, e strings.Builder
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if err == nil || code != 1 || !strings.HasPrefix(e.String(), tt.want) || strings.Count(e.String(), "\n") != 1 || o.Len() != 0 {
				t.Errorf("dibs tui: exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", code, o.String(), e.String(), tt.want)
			}
		})
	}
}

// Weak 5 of the fourth round: root running a dibs from a directory others
// may write (a build in a sticky /tmp) ran whatever dibsd sat beside it:
// another user's, as root. It is refused in one line that says what to
// do, and nothing of theirs runs; root's own dibsd there still runs.
func TestDaemonVerbsRefuseAnotherUsersDibsd(t *testing.T) {
	mallory := launchtest.User(t)
	base, err := os.MkdirTemp("", "dibs-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	sticky := filepath.Join(base, "tmp")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sticky, 0o777|os.ModeSticky)
	b, err := os.ReadFile(dibsBin)
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(sticky, "dibs")
	if err := os.WriteFile(client, b, 0o755); err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(base, "marks") // where her dibsd, were it run, leaves its mark
	os.Mkdir(marks, 0o755)
	os.Chmod(marks, 0o777)
	ran := filepath.Join(marks, "ran")
	plant := fmt.Sprintf("printf '#!/bin/sh\\ntouch %s\\n' > %s/dibsd && chmod 755 %s/dibsd", ran, sticky, sticky)
	if out, err := launchtest.Run(t, mallory, nil, "/bin/sh", "-c", plant); err != nil {
		t.Fatalf("as %s: %v: %s", mallory.Name, err, out)
	}
	for _, args := range [][]string{{"keygen", filepath.Join(base, "k")}, {"probe"}} {
		cmd := exec.Command(client, args...)
		cmd.Dir = base
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		cmd.Run()
		want := "dibs: not running dibsd: untrusted binary: " + filepath.Join(sticky, "dibsd") + fmt.Sprintf(" is owned by uid %d, not by root", mallory.UID)
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(e.String(), want) || strings.Count(e.String(), "\n") != 1 || !strings.Contains(e.String(), "install dibs and dibsd where only root") {
			t.Errorf("root's dibs %s beside %s's dibsd in a sticky dir: exit %d, stderr %q; want exit 1 and one line starting %q that says where to install", strings.Join(args, " "), mallory.Name, code, e.String(), want)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("root's dibs %s ran %s's dibsd", strings.Join(args, " "), mallory.Name)
		}
	}
	// Root's own dibsd in the same directory runs.
	os.Remove(filepath.Join(sticky, "dibsd"))
	d, err := os.ReadFile(dibsdBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sticky, "dibsd"), d, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(client, "keygen", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "dibsd keygen FILE") {
		t.Errorf("root's dibs beside root's dibsd in a sticky dir: %v, %q; want dibsd's help", err, out)
	}
}
