//go:build linux

package launch_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestSessionEnvironmentStaysOffCommandLines: a session's variables (a
// lease token, a rendezvous port) reach its command, the windows opened in
// it later, and nobody else. Every user can read a process's command line,
// so tmux's argv must not hold them: not the client's, nor the server's,
// which keeps the argv of the client that started it for its whole life
// (issue 31). The command file that carries them is the user's alone
// while it exists, and gone once Start returns. Odd bytes (quotes, a
// newline, $, ;, # and braces, bytes that are not UTF-8) arrive as given.
func TestSessionEnvironmentStaysOffCommandLines(t *testing.T) {
	u := launchtest.User(t) // skips unless root
	sdir := statusRoot(t)
	l, tmpDir := launch.NewTestLauncher(t, sdir)
	out := launch.WorldDir(t)
	odd := "it's \"q\" $HOME ~ ; x; #{pane_pid} {a} %if \\n\n2nd line \xff\xfe"
	env := map[string]string{
		"DIBS_LEASE_TOKEN": "token-9f3c2a71",
		"MASTER_PORT":      "41873",
		"ODD":              odd,
	}
	// The command writes what it got, every value in hex (bytes as given).
	show := `import json, os, sys, time
json.dump({"env": {k: os.environb.get(k.encode(), b"").hex() for k in ("DIBS_LEASE_TOKEN", "MASTER_PORT", "ODD")},
    "argv": [os.fsencode(a).hex() for a in sys.argv[2:]]}, open(sys.argv[1] + ".tmp", "w"))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)`
	spec := launch.Spec{Name: "secret-env", User: u, Env: env,
		Command: []string{"/usr/bin/python3", "-c", show, filepath.Join(out, "first.json"), odd, "", ";"}}
	if _, err := l.Start(t.Context(), spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { l.Kill(t.Context(), u, spec.Name) })

	type seen struct {
		Env  map[string]string `json:"env"`
		Argv []string          `json:"argv"`
	}
	read := func(name string) seen {
		t.Helper()
		var s seen
		p := filepath.Join(out, name)
		poll.Until(t, 20*time.Second, name, func() bool {
			b, err := os.ReadFile(p)
			return err == nil && json.Unmarshal(b, &s) == nil
		})
		return s
	}
	first := read("first.json")
	for k, v := range env {
		if got := first.Env[k]; got != hex.EncodeToString([]byte(v)) {
			t.Errorf("the session's %s = %s, want %q in hex", k, got, v)
		}
	}
	if got, want := strings.Join(first.Argv, ","), hex.EncodeToString([]byte(odd))+",,"+hex.EncodeToString([]byte(";")); got != want {
		t.Errorf("the command's arguments (hex) = %s, want %s", got, want)
	}

	// A window opened later in the session gets the variables too.
	if o, err := launchtest.Run(t, u, []string{"TMUX_TMPDIR=" + tmpDir}, "tmux", "new-window", "-d", "-t", "="+spec.Name+":",
		"--", "/usr/bin/python3", "-c", show, filepath.Join(out, "window.json")); err != nil {
		t.Fatalf("new-window: %v: %s", err, o)
	}
	if got := read("window.json"); got.Env["DIBS_LEASE_TOKEN"] != hex.EncodeToString([]byte("token-9f3c2a71")) || got.Env["MASTER_PORT"] != hex.EncodeToString([]byte("41873")) {
		t.Errorf("a later window's environment = %q", got.Env)
	}

	// No process's command line holds a value, and no command file is left.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	sawServer := false
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(line, "tmux start-server ; source-file "+sdir) {
			sawServer = true
		}
		for _, secret := range []string{"token-9f3c2a71", "41873"} { // other people's tests run here too: only this test's values
			if strings.Contains(line, secret) {
				t.Errorf("%s reads %q", p, line)
			}
		}
	}
	if !sawServer {
		t.Error("found no tmux server started from the command file: did the start change its way?")
	}
	left, _ := filepath.Glob(filepath.Join(sdir, ".start-*"))
	if len(left) > 0 {
		t.Errorf("command files left behind: %q", left)
	}
}
