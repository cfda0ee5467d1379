package launch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// harness is a Launcher on a private TMUX_TMPDIR, so tests never touch the
// developer's own tmux servers, plus cleanup that kills every server started
// under it.
type harness struct {
	l      *Launcher
	tmpDir string
	me     User
}

func requireTmux(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		prereq.Missing(tb, "tmux is not installed; these tests drive a real tmux server")
	}
}

// worldDir is a fresh directory every user can write to (sticky, like /tmp):
// TMUX_TMPDIR for servers of several uids, and a place sessions running as
// nobody can leave their output. t.TempDir's parent is 0700, hence MkdirTemp.
func worldDir(tb testing.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp("", "dibs-launch-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, os.ModeSticky|0o777); err != nil {
		tb.Fatal(err)
	}
	return d
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	requireTmux(tb)
	me, err := LookupUID(os.Geteuid())
	if err != nil {
		tb.Fatal(err)
	}
	dir := worldDir(tb)
	// A status directory, as the agent always has: sessions then get their
	// variables through a command file, never on tmux's argv.
	status := filepath.Join(dir, "exit")
	tb.Cleanup(func() { ReleaseStatusDir(status) }) // runs before worldDir's RemoveAll
	h := &harness{l: New(Options{TmuxTmpDir: dir, StatusDir: status, Logf: safeLogf(tb)}), tmpDir: dir, me: me}
	tb.Cleanup(h.killServers) // runs before worldDir's RemoveAll
	return h
}

// safeLogf logs through tb until the test ends, then drops: a Watch goroutine
// may log after its test has returned, and tb.Logf would panic then.
func safeLogf(tb testing.TB) func(string, ...any) {
	var mu sync.Mutex
	done := false
	tb.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			tb.Logf(format, args...)
		}
	}
}

// killServers ends every tmux server under the harness's TMUX_TMPDIR.
func (h *harness) killServers() {
	entries, _ := os.ReadDir(h.tmpDir)
	for _, e := range entries {
		uid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "tmux-"))
		if err != nil {
			continue
		}
		u, err := LookupUID(uid)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h.l.run(ctx, u, "kill-server")
		cancel()
	}
}

// rawTmux runs tmux as u the way u would in a shell, without the package, to
// check what the user sees.
func (h *harness) rawTmux(tb testing.TB, u User, args ...string) (string, error) {
	tb.Helper()
	cmd := exec.Command("tmux", args...)
	cmd.Env = []string{"TMUX_TMPDIR=" + h.tmpDir, "HOME=" + u.Home, "PATH=" + DefaultPath}
	if u.UID != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// start starts a session and registers its kill.
func (h *harness) start(t *testing.T, s Spec) Session {
	t.Helper()
	if s.User.Name == "" {
		s.User = h.me
	}
	sess, err := h.l.Start(t.Context(), s)
	if err != nil {
		t.Fatalf("Start(%s): %v", s.Name, err)
	}
	t.Cleanup(func() { h.l.Kill(context.Background(), s.User, s.Name) })
	return sess
}

// readLine waits until path holds a complete line and returns it, trimmed.
func readLine(t *testing.T, path string) string {
	t.Helper()
	var got string
	poll.Until(t, 10*time.Second, "a line in "+filepath.Base(path), func() bool {
		data, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false
		}
		got = strings.TrimSpace(string(data))
		return true
	})
	return got
}

// waitClosed fails unless ch closes in time.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
