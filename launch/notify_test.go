package launch

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
)

// outerPane attaches a real tmux client to one of h's sessions, inside a
// pane of another tmux server, so the test can read what the client's
// status line shows (capture-pane of the outer pane).
func (h *harness) outerPane(t *testing.T, session string) func() string {
	t.Helper()
	sock := filepath.Join(worldDir(t), "outer")
	inner := SocketPath(h.tmpDir, h.me.UID)
	cmd := "tmux -S " + shellQuote(inner) + " attach -t " + shellQuote("="+session)
	if out, err := exec.Command("tmux", "-S", sock, "new-session", "-d", "-s", "outer", "-x", "120", "-y", "10", cmd).CombinedOutput(); err != nil {
		t.Fatalf("outer tmux: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	return func() string {
		out, _ := exec.Command("tmux", "-S", sock, "capture-pane", "-p", "-t", "outer").CombinedOutput()
		return string(out)
	}
}

func waitScreen(t *testing.T, screen func() string, what, want string) string {
	t.Helper()
	var s string
	if poll.Wait(5*time.Second, func() bool { s = screen(); return strings.Contains(s, want) }) {
		return s
	}
	t.Fatalf("%s: %q never showed; the screen:\n%s", what, want, s)
	return ""
}

// TestNotifyReachesDetachedSessionsAtAttach: a notice for a user with two
// sessions, one attached and one not, shows in the attached client's status
// line at once and in the other when someone attaches to it, once.
func TestNotifyReachesDetachedSessionsAtAttach(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, name := range []string{"work", "later"} {
		if _, err := h.l.Start(ctx, Spec{Name: name, User: h.me, Command: []string{"sleep 300"}}); err != nil {
			t.Fatal(err)
		}
	}
	screen := h.outerPane(t, "work")
	waitScreen(t, screen, "the attached client", "[work]")
	shown, later, err := h.l.Notify(ctx, h.me, "lease node01-4 ends in 10m #{host} ;")
	if err != nil {
		t.Fatal(err)
	}
	if shown != 1 || later != 1 {
		t.Errorf("Notify told %d clients now and %d sessions for later, want 1 and 1", shown, later)
	}
	waitScreen(t, screen, "the attached session's status line", "lease node01-4 ends in 10m #{host} ;")
	h.l.Notify(ctx, h.me, "second notice")

	// Nobody was attached to "later": its messages wait for the next attach.
	screen2 := h.outerPane(t, "later")
	s := waitScreen(t, screen2, "the detached session at its next attach", "second notice · lease node01-4 ends in 10m #{host} ;")
	if strings.Contains(s, "dibs-pending") {
		t.Errorf("the status line shows the option name:\n%s", s)
	}
	// Shown once: the pending option is gone after the attach.
	if out, _ := exec.Command("tmux", "-S", SocketPath(h.tmpDir, h.me.UID), "show-options", "-t", "=later:", "-qv", pendingOption).CombinedOutput(); len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("the pending message stayed after it was shown: %q", out)
	}
}

func TestNotifyWithoutTmuxServer(t *testing.T) {
	h := newHarness(t)
	shown, later, err := h.l.Notify(context.Background(), h.me, "hello")
	if err != nil || shown != 0 || later != 0 {
		t.Errorf("Notify with no server = %d, %d, %v; want nothing told and no error", shown, later, err)
	}
}

// TestKeptLogOutlivesTheSession: a run started with KeepLog leaves its
// output in the user's log file after it ends, read back with ReadLog.
func TestKeptLogOutlivesTheSession(t *testing.T) {
	h := newHarness(t)
	home := t.TempDir()
	u := h.me
	u.Home = home
	ctx := context.Background()
	if _, err := h.l.Start(ctx, Spec{Name: "job1", User: u, KeepLog: true, Command: []string{"echo first line; echo second line"}}); err != nil {
		t.Fatal(err)
	}
	var c LogChunk
	// A bound, not a timing: a full CI run on 2 cores once took over 5 s
	// for tmux to start, run and end the job.
	poll.Wait(30*time.Second, func() bool {
		ok, _ := h.l.Exists(ctx, u, "job1")
		c, _ = h.l.ReadLog(ctx, u, "job1", "", 0, 1<<20)
		return !ok && strings.Contains(string(c.Data), "second line")
	})
	if !strings.Contains(string(c.Data), "first line") || !strings.Contains(string(c.Data), "second line") {
		t.Fatalf("kept log = %q, want both lines", c.Data)
	}
	st, err := os.Stat(filepath.Join(home, LogDir, "job1.log"))
	if err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("log file %v (%v): want it private to the user", st, err)
	}
	part, _ := h.l.ReadLog(ctx, u, "job1", "", 6, 4)
	if string(part.Data) != "line" || part.Size != c.Size {
		t.Errorf("ReadLog at 6, 4 bytes = %q (size %d), want %q", part.Data, part.Size, "line")
	}
}

func TestPipeLogKeepsTheNewest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sub", "x.log")
	var in bytes.Buffer
	for i := range 100 {
		in.WriteString(strings.Repeat(string(rune('a'+i%26)), 9) + "\n")
	}
	if err := PipeLog(&in, file, 300); err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(file)
	old, _ := os.ReadFile(file + ".1")
	if len(cur) > 300 || len(old) != 300 {
		t.Errorf("sizes %d and %d, want the current file at most 300 and the rotated one 300", len(cur), len(old))
	}
	if !strings.HasSuffix(string(cur), strings.Repeat("v", 9)+"\n") {
		t.Errorf("the current file does not end with the last line: %q", cur)
	}
}

// TestReadLogRefusesALink: a log that is a link to someone else's file is
// not read.
func TestReadLogRefusesALink(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, LogDir)
	os.MkdirAll(dir, 0o700)
	os.Symlink("/etc/shadow", filepath.Join(dir, "x.log"))
	me, _ := LookupUID(os.Geteuid())
	me.Home = home
	if _, err := New(Options{}).ReadLog(t.Context(), me, "x", "", 0, 100); err == nil {
		t.Errorf("ReadLog followed a link")
	}
}
