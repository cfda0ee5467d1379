package launch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

func TestStartEnvListWatchKill(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	out := filepath.Join(worldDir(t), "out")
	sess := h.start(t, Spec{
		Name: "dibs-node01-42",
		Env: map[string]string{
			"CUDA_VISIBLE_DEVICES": "4,5",
			"DIBS_LEASE_ID":        "node01-42",
			"DIBS_TRICKY":          "a #{session_name};", // neither a format nor a separator
		},
		Command: []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES $DIBS_LEASE_ID $DIBS_TRICKY" > "$1"; sleep 30`, "sh", out},
	})
	if got, want := readLine(t, out), "4,5 node01-42 a #{session_name};"; got != want {
		t.Errorf("session saw %q, want %q", got, want)
	}
	if sess.PanePID <= 1 {
		t.Errorf("PanePID = %d, want the pane's process", sess.PanePID)
	}

	ls, err := h.rawTmux(t, h.me, "ls", "-F", "#{session_name}")
	if err != nil || !slices.Contains(strings.Fields(ls), "dibs-node01-42") {
		t.Errorf("tmux ls as %s = %q, %v; want it to list dibs-node01-42", h.me.Name, ls, err)
	}
	names, err := h.l.List(ctx, h.me)
	if err != nil || !slices.Equal(names, []string{"dibs-node01-42"}) {
		t.Errorf("List = %q, %v; want [dibs-node01-42]", names, err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{"dibs-node01-42", true}, {"dibs-node01-4", false}, {"dibs-node01-420", false}} {
		if got, err := h.l.Exists(ctx, h.me, tc.name); got != tc.want || err != nil {
			t.Errorf("Exists(%s) = %v, %v; want %v, nil", tc.name, got, err, tc.want)
		}
	}

	gone := h.l.Watch(ctx, h.me, "dibs-node01-42", 20*time.Millisecond)
	select {
	case <-gone:
		t.Fatal("Watch fired while the session runs")
	case <-time.After(100 * time.Millisecond):
	}
	if err := h.l.Kill(ctx, h.me, "dibs-node01-42"); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	waitClosed(t, "Watch after Kill", gone)
	if err := h.l.Kill(ctx, h.me, "dibs-node01-42"); !errors.Is(err, ErrNoSession) {
		t.Errorf("second Kill = %v, want ErrNoSession", err)
	}
	if names, err := h.l.List(ctx, h.me); err != nil || len(names) != 0 {
		t.Errorf("List with no server = %q, %v; want none, nil", names, err)
	}
}

func TestSessionEndsWithCommand(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	// A user whose tmux.conf keeps dead panes must still free the GPUs.
	h.start(t, Spec{Name: "keeper", Command: []string{"sleep", "30"}})
	if out, err := h.rawTmux(t, h.me, "set-option", "-g", "remain-on-exit", "on"); err != nil {
		t.Fatalf("set remain-on-exit: %v: %s", err, out)
	}
	for _, cmd := range [][]string{
		{"true"},                      // one string: through the shell
		{"sh", "-c", "sleep 0.2"},     // argv: executed directly
		{"sh", "-c", "exit 3", "x;y"}, // failing, with an argument tmux would split on
	} {
		name := "ends-" + strconv.Itoa(len(cmd))
		h.start(t, Spec{Name: name, Command: cmd})
		waitClosed(t, "Watch of "+name+" after its command exits", h.l.Watch(ctx, h.me, name, 20*time.Millisecond))
	}
}

func TestInteractiveShellInRunningServer(t *testing.T) {
	h := newHarness(t)
	if sh := filepath.Base(h.me.Shell); sh == "nologin" || sh == "false" {
		t.Skipf("%s's shell is %s; an interactive session ends at once", h.me.Name, h.me.Shell)
	}
	ctx := t.Context()
	// The user's server is already running, so it ignores the client's
	// environment: the variables must arrive through -e.
	h.start(t, Spec{Name: "keeper", Command: []string{"sleep", "30"}})
	dir := worldDir(t)
	h.start(t, Spec{Name: "shell", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "2"}, Dir: dir})

	if out, err := h.rawTmux(t, h.me, "send-keys", "-t", "=shell:", `echo "$CUDA_VISIBLE_DEVICES $0" > shell.out`, "Enter"); err != nil {
		t.Fatalf("send-keys: %v: %s", err, out)
	}
	// The login shell tmux starts by default has argv[0] "-bash" or similar.
	if got, want := readLine(t, filepath.Join(dir, "shell.out")), "2 -"+filepath.Base(h.me.Shell); got != want {
		t.Errorf("interactive shell saw %q, want %q", got, want)
	}
	// Windows opened later in the session inherit the variables too.
	if out, err := h.rawTmux(t, h.me, "new-window", "-t", "=shell:", "--", "sh", "-c", `echo "$CUDA_VISIBLE_DEVICES" > "$1"`, "sh", filepath.Join(dir, "window.out")); err != nil {
		t.Fatalf("new-window: %v: %s", err, out)
	}
	if got := readLine(t, filepath.Join(dir, "window.out")); got != "2" {
		t.Errorf("new window saw CUDA_VISIBLE_DEVICES=%q, want 2", got)
	}
	if ok, err := h.l.Exists(ctx, h.me, "shell"); !ok || err != nil {
		t.Errorf("Exists(shell) = %v, %v; the interactive session should stay", ok, err)
	}
}

func TestConcurrentStartsColdServer(t *testing.T) {
	h := newHarness(t)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		name := "par-" + strconv.Itoa(i)
		t.Cleanup(func() { h.l.Kill(context.Background(), h.me, name) })
		go func() {
			_, err := h.l.Start(t.Context(), Spec{Name: name, User: h.me, Command: []string{"sleep", "30"}})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
	if names, err := h.l.List(t.Context(), h.me); err != nil || len(names) != n {
		t.Errorf("List = %q, %v; want %d sessions", names, err, n)
	}
}

func TestWatchStopsWithContext(t *testing.T) {
	h := newHarness(t)
	h.start(t, Spec{Name: "long", Command: []string{"sleep", "30"}})
	ctx, cancel := context.WithCancel(t.Context())
	gone := h.l.Watch(ctx, h.me, "long", 20*time.Millisecond)
	cancel()
	waitClosed(t, "Watch after cancel", gone)
	if ok, err := h.l.Exists(t.Context(), h.me, "long"); !ok || err != nil {
		t.Errorf("Exists = %v, %v; want the session still there", ok, err)
	}
}

// TestWatchFirstLooksAfterOneInterval: Watch starts no tmux client until
// one interval has passed — its caller has just made the session or found
// it listed, and is answering someone — then sees the end as before.
func TestWatchFirstLooksAfterOneInterval(t *testing.T) {
	requireTmux(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	dir := worldDir(t)
	calls := filepath.Join(dir, "calls")
	counting := filepath.Join(dir, "tmux")
	if err := os.WriteFile(counting, []byte("#!/bin/sh\necho \"$1\" >> "+calls+"\nexec \""+tmux+"\" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.l = New(Options{TmuxPath: counting, TmuxTmpDir: h.tmpDir, Logf: safeLogf(t)})
	h.start(t, Spec{Name: "short", Command: []string{"sleep", "1"}})
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	gone := h.l.Watch(t.Context(), h.me, "short", 600*time.Millisecond)
	// An absence: no tmux call within the first half of the interval.
	poll.Wait(300*time.Millisecond, func() bool { b, err := os.ReadFile(calls); return err == nil && len(b) > 0 })
	if b, err := os.ReadFile(calls); err == nil && time.Since(began) < 600*time.Millisecond {
		t.Errorf("Watch ran tmux (%q) before one interval had passed", b)
	}
	waitClosed(t, "Watch after the one-second command ends", gone)
	if b, _ := os.ReadFile(calls); !strings.Contains(string(b), "has-session") {
		t.Errorf("tmux calls after the start: %q, want has-session", b)
	}
}

func TestSignal(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	dir := worldDir(t)
	// Each command gets the output file as $0, writes $0.ready once its trap is
	// set, and "got" to $0 from the trap.
	const usr1Job = `trap "echo got >$0; exit 0" USR1; : >$0.ready; while :; do sleep 0.1; done`
	const termJob = `trap "echo got >$0; exit 0" TERM; : >$0.ready; while :; do sleep 0.1; done`
	tests := []struct {
		name     string
		sig      syscall.Signal
		command  []string
		wantGot  bool // the trap ran
		wantGone bool // the session ended
	}{
		{"usr1-pane", syscall.SIGUSR1, []string{"sh", "-c", usr1Job}, true, true},
		// A notice reaches the job under a shell without killing the shell
		// (or the job's own `sleep`), so the session outlives the job.
		{"usr1-under-shell", syscall.SIGUSR1, []string{"sh", "-c", `sh -c '` + usr1Job + `' "$0"; sleep 30`}, true, false},
		// SIGTERM reaches the job, a grandchild of the pane; the wrapper
		// shell, whose death would hang the job up, is left to exit by itself.
		{"term-under-shell", syscall.SIGTERM, []string{"sh", "-c", `sh -c '` + termJob + `' "$0"; sleep 30`}, true, false},
		{"term-plain", syscall.SIGTERM, []string{"sh", "-c", `: >$0.ready; exec sleep 30`}, false, true},
		{"kill-tree", syscall.SIGKILL, []string{"sh", "-c", `sh -c '` + termJob + `' "$0"; sleep 30`}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name)
			h.start(t, Spec{Name: tc.name, Command: append(tc.command, out)})
			poll.Until(t, 10*time.Second, "the job to be ready", func() bool {
				_, err := os.Stat(out + ".ready")
				return err == nil
			})
			if err := h.l.Signal(ctx, h.me, tc.name, tc.sig); err != nil {
				t.Fatalf("Signal: %v", err)
			}
			if tc.wantGot {
				if got := readLine(t, out); got != "got" {
					t.Errorf("trap wrote %q, want got", got)
				}
			}
			gone := h.l.Watch(ctx, h.me, tc.name, 20*time.Millisecond)
			if tc.wantGone {
				waitClosed(t, "the session to end", gone)
				return
			}
			select {
			case <-gone:
				t.Error("the session ended; want its shell to survive")
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
	if err := h.l.Signal(ctx, h.me, "no-such", syscall.SIGTERM); !errors.Is(err, ErrNoSession) {
		t.Errorf("Signal to a missing session = %v, want ErrNoSession", err)
	}
}

func TestCleanEnvironment(t *testing.T) {
	h := newHarness(t)
	t.Setenv("SECRET_ROOT_VAR", "x")
	out := filepath.Join(worldDir(t), "env")
	h.start(t, Spec{
		Name:    "env",
		Command: []string{"sh", "-c", `echo "${SECRET_ROOT_VAR-unset} $HOME $USER $LOGNAME $PATH $(pwd)" > "$1"`, "sh", out},
		Dir:     "/",
	})
	want := strings.Join([]string{"unset", h.me.Home, h.me.Name, h.me.Name, DefaultPath, "/"}, " ")
	if got := readLine(t, out); got != want {
		t.Errorf("session environment = %q, want %q", got, want)
	}
}

func TestStartAsOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: only root can start a session as another user")
	}
	nobody, err := LookupUser("nobody")
	if err != nil {
		prereq.Missing(t, "no user nobody to run as: %v", err)
	}
	h := newHarness(t)
	ctx := t.Context()
	dir := worldDir(t) // nobody's home is usually /nonexistent
	out := filepath.Join(dir, "id")
	h.start(t, Spec{
		Name:    "as-nobody",
		User:    nobody,
		Dir:     dir,
		Command: []string{"sh", "-c", `echo "$(id -u) $(id -g) $(id -G) $USER $(pwd)" > "$1"; sleep 30`, "sh", out},
	})
	want := strconv.Itoa(nobody.UID) + " " + strconv.Itoa(nobody.GID) + " " + intsString(nobody.Groups) + " nobody " + dir
	if got := readLine(t, out); got != want {
		t.Errorf("session ran as %q, want %q", got, want)
	}
	ls, err := h.rawTmux(t, nobody, "ls", "-F", "#{session_name}")
	if err != nil || strings.TrimSpace(ls) != "as-nobody" {
		t.Errorf("tmux ls as nobody = %q, %v; want as-nobody", ls, err)
	}
	if fi, err := os.Stat(SocketPath(h.tmpDir, nobody.UID)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(nobody.UID) {
		t.Errorf("nobody's socket: %v; want it owned by uid %d", err, nobody.UID)
	}
	if names, err := h.l.List(ctx, h.me); err != nil || slices.Contains(names, "as-nobody") {
		t.Errorf("root's List = %q, %v; must not show nobody's session", names, err)
	}
	// The pane's processes belong to nobody, so root's Signal reaches them.
	if err := h.l.Signal(ctx, nobody, "as-nobody", syscall.SIGTERM); err != nil {
		t.Errorf("Signal: %v", err)
	}
	waitClosed(t, "nobody's session to end on SIGTERM", h.l.Watch(ctx, nobody, "as-nobody", 20*time.Millisecond))
}

func intsString(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}

func TestDuplicateName(t *testing.T) {
	h := newHarness(t)
	spec := Spec{Name: "twice", Command: []string{"sleep", "30"}}
	h.start(t, spec)
	spec.User = h.me
	_, err := h.l.Start(t.Context(), spec)
	if !errors.Is(err, ErrSessionExists) {
		t.Fatalf("second Start = %v, want ErrSessionExists", err)
	}
	if want := "start session twice as " + h.me.Name + ": tmux new-session: duplicate session: twice"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestMessage(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.start(t, Spec{Name: "msg", Command: []string{"sleep", "30"}})
	if err := h.l.Message(ctx, h.me, "msg", "lease ends in 10 minutes"); err != nil {
		t.Errorf("Message with no client attached = %v, want nil", err)
	}
	if err := h.l.Message(ctx, h.me, "no-such", "hello"); !errors.Is(err, ErrNoSession) {
		t.Errorf("Message to a missing session = %v, want ErrNoSession", err)
	}

	// With a client attached (script(1) gives it a terminal and records what
	// it draws), the text must show up literally.
	if _, err := exec.LookPath("script"); err != nil {
		prereq.Missing(t, "script(1) is not installed; cannot attach a client")
	}
	typescript := filepath.Join(t.TempDir(), "typescript")
	attach := h.l.AttachCommand(h.me, "msg")
	cmd := exec.Command("script", "-q", "-f", "-c", strings.Join(attach, " "), typescript)
	cmd.Env = []string{"TERM=xterm", "PATH=" + DefaultPath, "HOME=" + h.me.Home}
	stdin, err := cmd.StdinPipe() // held open: script ends when its input does
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	poll.Until(t, 10*time.Second, "a client to attach", func() bool {
		out, _ := h.rawTmux(t, h.me, "list-clients", "-t", "=msg")
		return strings.TrimSpace(out) != ""
	})
	const text = "dibs: lease #{session_name} ends in 10 minutes;"
	if err := h.l.Message(ctx, h.me, "msg", text); err != nil {
		t.Fatalf("Message with a client attached: %v", err)
	}
	poll.Until(t, 10*time.Second, "the message on the attached client's screen", func() bool {
		data, _ := os.ReadFile(typescript)
		return strings.Contains(string(data), text)
	})
}

func TestTmuxNotFound(t *testing.T) {
	l := New(Options{TmuxPath: "/nonexistent/tmux"})
	me := User{Name: "me", UID: os.Geteuid(), GID: os.Getegid()}
	_, err := l.Start(t.Context(), Spec{Name: "x", User: me})
	if !errors.Is(err, ErrTmuxNotFound) {
		t.Fatalf("Start without tmux = %v, want ErrTmuxNotFound", err)
	}
	if !strings.HasSuffix(err.Error(), "tmux not found in PATH: install tmux (apt-get install tmux) to use dibs run") {
		t.Errorf("error = %q, want the install hint", err)
	}
	if _, err := l.Exists(t.Context(), me, "x"); !errors.Is(err, ErrTmuxNotFound) {
		t.Errorf("Exists without tmux = %v, want ErrTmuxNotFound", err)
	}
}

func TestOtherUserWithoutRoot(t *testing.T) {
	requireTmux(t)
	l := New(Options{})
	l.euid = 1000 // what a non-root agent would be
	_, err := l.Start(t.Context(), Spec{Name: "x", User: User{Name: "bob", UID: 1001, GID: 1001}})
	want := "start session x as bob: the agent runs as uid 1000 and can start sessions only for that user; run the agent as root to serve other users"
	if err == nil || err.Error() != want {
		t.Fatalf("Start = %v, want %q", err, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("errors.Is(%v, fs.ErrPermission) = false", err)
	}
}

func TestCredentialFor(t *testing.T) {
	alice := User{Name: "alice", UID: 1000, GID: 100, Groups: []int{27, 100, 1000}}
	root := User{Name: "root", UID: 0, GID: 0, Groups: []int{0}}
	tests := []struct {
		name     string
		euid     int
		u        User
		wantCred *syscall.Credential
		wantErr  string
	}{
		{"root for root", 0, root, nil, ""},
		{"root for user", 0, alice, &syscall.Credential{Uid: 1000, Gid: 100, Groups: []uint32{27, 100, 1000}}, ""},
		{"user for self", 1000, alice, nil, ""},
		{"user for root", 1000, root, nil, "the agent runs as uid 1000 and can start sessions only for that user; run the agent as root to serve other users"},
		{"user for other", 1001, alice, nil, "the agent runs as uid 1001 and can start sessions only for that user; run the agent as root to serve other users"},
		{"unresolved", 0, User{Name: "x", UID: -1}, nil, `user "x" has no valid uid/gid (-1/0): use LookupUser or LookupUID`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cred, err := credentialFor(tc.euid, tc.u)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tc.wantErr)
			}
			switch {
			case (cred == nil) != (tc.wantCred == nil):
				t.Errorf("credential = %+v, want %+v", cred, tc.wantCred)
			case cred != nil && (cred.Uid != tc.wantCred.Uid || cred.Gid != tc.wantCred.Gid || !slices.Equal(cred.Groups, tc.wantCred.Groups) || cred.NoSetGroups):
				t.Errorf("credential = %+v, want %+v", cred, tc.wantCred)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"dibs-node01-42", true},
		{"_x", true},
		{"A9_-z", true},
		{strings.Repeat("a", 128), true},
		{"", false},
		{strings.Repeat("a", 129), false},
		{"dibs-node01.lab-42", false}, // tmux would make it dibs-node01_lab-42
		{"a:b", false},
		{".a", false},
		{"-a", false},
		{"a b", false},
		{"a#b", false},
		{"é", false},
	}
	for _, tc := range tests {
		if err := CheckName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestStartArgs(t *testing.T) {
	l := New(Options{})
	u := User{Name: "alice", UID: 1000, GID: 1000, Home: "/nonexistent-home"}
	spec := Spec{
		Name:    "dibs-n1-7",
		User:    u,
		Env:     map[string]string{"DIBS_B": "x;", "CUDA_VISIBLE_DEVICES": "0,1"},
		Command: []string{"python", "-c", "print(1);"},
	}
	got, err := l.startArgs(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"new-session", "-d", "-s", "dibs-n1-7", "-c", "/",
		"-e", "CUDA_VISIBLE_DEVICES=0,1", "-e", `DIBS_B=x\;`,
		"--", "python", "-c", `print(1)\;`,
		";", "set-option", "-w", "-t", "=dibs-n1-7:", "remain-on-exit", "off",
		";", "display-message", "-p", "-t", "=dibs-n1-7:", "#{pane_pid}",
	}
	if !slices.Equal(got, want) {
		t.Errorf("startArgs =\n%q\nwant\n%q", got, want)
	}
	// Recording the exit status puts the wrapper in front of the argv; the
	// status file travels as an argument, not in the job's environment.
	got, err = l.startArgs(spec, "/run/dibs/exit/1000/dibs-n1-7.exit")
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Concat(want[:11], []string{
		"/bin/sh", "-c", `f=$1; shift; "$@"; s=$?; printf '%s\n' "$s" >"$f"; exit "$s"`, "dibs-job", "/run/dibs/exit/1000/dibs-n1-7.exit",
	}, want[11:])
	if !slices.Equal(got, want) {
		t.Errorf("startArgs with an exit file =\n%q\nwant\n%q", got, want)
	}

	// The same list as a command file's line (what Start passes with a
	// StatusDir): every word single-quoted, what cannot stand inside
	// single quotes as an octal escape, ';' inside quotes left alone.
	cmds, err := l.startCommands(Spec{Name: "dibs-n1-7", User: u, Env: map[string]string{"DIBS_B": "x;'y\n"}, Command: []string{"echo", "it's", ""}}, "")
	if err != nil {
		t.Fatal(err)
	}
	wantLine := `'new-session' '-d' '-s' 'dibs-n1-7' '-c' '/' '-e' 'DIBS_B=x;'"\047"'y'"\012" '--' 'echo' 'it'"\047"'s' '' ; ` +
		`'set-option' '-w' '-t' '=dibs-n1-7:' 'remain-on-exit' 'off' ; 'display-message' '-p' '-t' '=dibs-n1-7:' '#{pane_pid}'` + "\n"
	if got := startScript(cmds); got != wantLine {
		t.Errorf("startScript =\n%s\nwant\n%s", got, wantLine)
	}

	bad := []struct {
		name string
		spec Spec
	}{
		{"bad name", Spec{Name: "a.b", User: u}},
		{"unresolved user", Spec{Name: "a", User: User{UID: 5}}},
		{"bad env key", Spec{Name: "a", User: u, Env: map[string]string{"A-B": "1"}}},
		{"NUL in env", Spec{Name: "a", User: u, Env: map[string]string{"A": "\x00"}}},
		{"relative dir", Spec{Name: "a", User: u, Dir: "rel"}},
		{"empty command", Spec{Name: "a", User: u, Command: []string{""}}},
	}
	for _, tc := range bad {
		if _, err := l.startArgs(tc.spec, ""); err == nil {
			t.Errorf("%s: startArgs accepted %+v", tc.name, tc.spec)
		}
	}
}

// TestCheckDir is the working-directory check as a personal agent makes it,
// for its own user; TestWorkingDirCheckedAsUser covers root acting for others.
func TestCheckDir(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	if err := h.l.checkDir(t.Context(), h.me, dir); err != nil {
		t.Errorf("checkDir(%s) = %v, want nil", dir, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), file} {
		err := h.l.checkDir(t.Context(), h.me, bad)
		want := "working directory " + bad + " does not exist or " + h.me.Name + " may not enter it: give a directory you can cd into"
		if err == nil || err.Error() != want || !errors.Is(err, ErrWorkDir) {
			t.Errorf("checkDir(%s) = %v, want ErrWorkDir saying %q", bad, err, want)
		}
	}
}

// TestCheckDirThreadsAreBounded: a check stuck in a file system that never
// answers keeps its thread; once every slot is held, checks go to a child
// process (which a timeout can kill) and still answer, so no user can pile
// up the agent's threads. A check that returned gives its slot back.
func TestCheckDirThreadsAreBounded(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	// With tmux unusable, only a check on a thread can answer: the child
	// reports tmux's error.
	noChild := errors.New("the child process was asked")
	h.l.tmuxErr = noChild
	for i := range 3 * maxDirThreads {
		if err := h.l.checkDir(t.Context(), h.me, dir); err != nil {
			if errors.Is(err, noChild) && i == 0 {
				t.Skipf("no per-thread check here: %v", err)
			}
			t.Fatalf("checkDir(%s) on a thread = %v, want nil", dir, err)
		}
	}
	if n := len(h.l.dirThreads); n != 0 {
		t.Fatalf("%d slots held after every check returned, want 0", n)
	}
	for range maxDirThreads { // as if that many were stuck
		h.l.dirThreads <- struct{}{}
	}
	if err := h.l.checkDir(t.Context(), h.me, dir); !errors.Is(err, noChild) {
		t.Errorf("checkDir with every slot held = %v, want the child asked", err)
	}
	h.l.tmuxErr = nil
	if err := h.l.checkDir(t.Context(), h.me, dir); err != nil {
		t.Errorf("checkDir by a child with every slot held = %v, want nil", err)
	}
	if err := h.l.checkDir(t.Context(), h.me, filepath.Join(dir, "missing")); !errors.Is(err, ErrWorkDir) {
		t.Errorf("checkDir of a missing directory by a child = %v, want ErrWorkDir", err)
	}
}

func TestAttachCommand(t *testing.T) {
	u := User{Name: "alice", UID: 1000}
	tests := []struct {
		opts Options
		want []string
	}{
		{Options{}, []string{"tmux", "attach-session", "-t", "=dibs-n1-7"}},
		{Options{TmuxPath: "/opt/tmux/bin/tmux", TmuxTmpDir: "/run/dibs"}, []string{"/opt/tmux/bin/tmux", "-S", "/run/dibs/tmux-1000/default", "attach-session", "-t", "=dibs-n1-7"}},
	}
	for _, tc := range tests {
		if got := New(tc.opts).AttachCommand(u, "dibs-n1-7"); !slices.Equal(got, tc.want) {
			t.Errorf("AttachCommand with %+v = %q, want %q", tc.opts, got, tc.want)
		}
	}
}

func TestTmuxError(t *testing.T) {
	tests := []struct {
		stderr   string
		wantMsg  string
		wantKind error
	}{
		{"duplicate session: x\n", "tmux new-session: duplicate session: x", ErrSessionExists},
		{"can't find session: x\n", "tmux new-session: can't find session: x", ErrNoSession},
		{"no server running on /tmp/tmux-0/default\n", "tmux new-session: no server running on /tmp/tmux-0/default", ErrNoSession},
		{"error connecting to /tmp/d/tmux-0/default (No such file or directory)\n", "tmux new-session: error connecting to /tmp/d/tmux-0/default (No such file or directory)", ErrNoSession},
		{"error connecting to /tmp/d/tmux-0/default (Permission denied)\n", "tmux new-session: error connecting to /tmp/d/tmux-0/default (Permission denied)", nil},
		{"server exited unexpectedly\n", "tmux new-session: server exited unexpectedly", ErrNoSession},
		{"no current target\n", "tmux new-session: no current target", ErrNoSession},
		{"  first\nsecond\n", "tmux new-session: first", nil},
		{"", "tmux new-session: failed with no message", nil},
	}
	for _, tc := range tests {
		err := newTmuxError("new-session", tc.stderr)
		if err.Error() != tc.wantMsg {
			t.Errorf("newTmuxError(%q) = %q, want %q", tc.stderr, err, tc.wantMsg)
		}
		if !errors.Is(err, tc.wantKind) && tc.wantKind != nil || tc.wantKind == nil && err.Unwrap() != nil {
			t.Errorf("newTmuxError(%q) kind = %v, want %v", tc.stderr, err.Unwrap(), tc.wantKind)
		}
	}
}

func TestEscapeSemicolon(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a;": `a\;`, `a\;`: `a\\;`, ";": `\;`, "a;b": "a;b"} {
		if got := escapeSemicolon(in); got != want {
			t.Errorf("escapeSemicolon(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkStartSession measures what `dibs run -- cmd` costs in launch: one
// Start, plus the Kill that ends it. "warm" is the usual case, the user's
// server already running; "cold" starts a server every time.
// "warm-start-only-argv" is the start as it was before issue 31, its
// command list on tmux's argv (a Launcher without a StatusDir), against
// "warm-start-only", the list in a command file.
func BenchmarkStartSession(b *testing.B) {
	h := newHarness(b)
	ctx := b.Context()
	bench := func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			name := "bench-" + strconv.Itoa(i)
			if _, err := h.l.Start(ctx, Spec{Name: name, User: h.me, Command: []string{"sleep", "10"}}); err != nil {
				b.Fatal(err)
			}
			if err := h.l.Kill(ctx, h.me, name); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("cold", bench)
	if _, err := h.l.Start(ctx, Spec{Name: "keeper", User: h.me, Command: []string{"sleep", "600"}}); err != nil {
		b.Fatal(err)
	}
	b.Run("warm", bench)
	env := map[string]string{"CUDA_VISIBLE_DEVICES": "0", "DIBS_LEASE_TOKEN": "7", "MASTER_PORT": "29500", "PATH": DefaultPath}
	startOnly := func(l *Launcher, prefix string) func(b *testing.B) {
		return func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := l.Start(ctx, Spec{Name: prefix + strconv.Itoa(i), User: h.me, Env: env, Command: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("warm-start-only", startOnly(h.l, "short-"))
	b.Run("warm-start-only-argv", startOnly(New(Options{TmuxTmpDir: h.tmpDir, Logf: safeLogf(b)}), "argv-"))
}

// TestStartAnswersWhenTmuxPrintsThePane: Start returns as soon as tmux has
// printed the new pane's pid, the last command of its list — with the
// session made, its window set to end with the command and its output piped
// to the log — and not when the tmux client exits; lines a hook of the
// user's tmux.conf prints before the pid are not taken for it.
func TestStartAnswersWhenTmuxPrintsThePane(t *testing.T) {
	requireTmux(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	// A new-session client that lingers 5 s after it answered, holding its
	// output open.
	lingering := filepath.Join(worldDir(t), "tmux")
	script := "#!/bin/sh\n\"" + tmux + "\" \"$@\"\ns=$?\ncase \" $* \" in *\" new-session \"*) exec sleep 5;; esac\nexit $s\n"
	if err := os.WriteFile(lingering, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		tmuxPath string
		// hook, when set, is a hook the user's server has before the start.
		hook string
	}{
		{name: "a client that lingers after its answer", tmuxPath: lingering},
		{name: "a hook that prints first", hook: "display-message -p 'hello from a hook'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.l = New(Options{TmuxPath: tt.tmuxPath, TmuxTmpDir: h.tmpDir, Logf: safeLogf(t)})
			if tt.hook != "" {
				if out, err := h.rawTmux(t, h.me, "new-session", "-d", "-s", "mine", ";", "set-hook", "-g", "after-new-session", tt.hook); err != nil {
					t.Fatalf("set up the user's server: %v %s", err, out)
				}
			}
			home := worldDir(t)
			me := h.me
			me.Home = home
			began := time.Now()
			sess, err := h.l.Start(t.Context(), Spec{Name: "job", User: me, Command: []string{"sleep", "30"}, KeepLog: true})
			took := time.Since(began)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() { h.l.Kill(context.Background(), me, "job") })
			if took > 3*time.Second {
				t.Errorf("Start took %v: it waited for the client to exit, not for its answer", took)
			}
			out, err := h.rawTmux(t, me, "display-message", "-p", "-t", "=job:", "#{pane_pid} #{pane_pipe} #{remain-on-exit}")
			if err != nil {
				t.Fatalf("tmux display: %v %s", err, out)
			}
			if want := strconv.Itoa(sess.PanePID) + " 1 off"; strings.TrimSpace(out) != want {
				t.Errorf("the session's pane pid, pipe and remain-on-exit = %q, want %q (Start's PanePID, piped, off)", strings.TrimSpace(out), want)
			}
		})
	}
}

// TestClientOutputIsCapped: whatever answers on a user's tmux socket
// decides what the agent's tmux client prints; the agent keeps at most
// maxClientOutput of it, refusing an answer over that rather than reading
// part of it, and the first maxClientErrors of its errors.
func TestClientOutputIsCapped(t *testing.T) {
	requireTmux(t)
	dir := worldDir(t)
	tests := []struct {
		name, script, want string
	}{
		{"an endless answer", "head -c 3000000 /dev/zero | tr '\\0' 's'; echo", "printed more than 1048576 bytes"},
		{"endless errors", "yes 'lost on the moon' | head -c 3000000 >&2; exit 1", "tmux list-sessions: lost on the moon"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loud := filepath.Join(dir, "tmux"+strconv.Itoa(i))
			if err := os.WriteFile(loud, []byte("#!/bin/sh\n"+tt.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			l := New(Options{TmuxPath: loud, TmuxTmpDir: dir})
			me, err := LookupUID(os.Geteuid())
			if err != nil {
				t.Fatal(err)
			}
			names, err := l.List(t.Context(), me)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("List = %d names, %v; want an error saying %q", len(names), err, tt.want)
			}
		})
	}
}
