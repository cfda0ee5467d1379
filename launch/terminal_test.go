//go:build linux

package launch_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// openPTY opens a pseudo-terminal pair the way the SSH server does, as this
// process (root, for the agent), and returns the master and the slave.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), req, uintptr(arg)); errno != 0 {
			t.Fatalf("ioctl %#x on /dev/ptmx: %v", req, errno)
		}
	}
	var unlock int32
	ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	var n uint32
	ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	ws := struct{ row, col, x, y uint16 }{24, 80, 0, 0}
	ioctl(syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, s
}

// TestAttachTerminal runs AttachTerminal's command on a PTY this process
// holds, as the SSH front door does, and checks who the attached tmux client
// is and what it was given.
func TestAttachTerminal(t *testing.T) {
	u := me(t)
	if os.Geteuid() == 0 {
		u = launchtest.User(t) // the real case: root holds the PTY, a user attaches
	} else {
		t.Log("not root: attaching as this user only")
	}
	t.Setenv("DIBS_AGENT_SECRET", "root's")
	l, tmpDir := launch.NewTestLauncher(t, "")
	if _, err := l.Start(t.Context(), launch.Spec{Name: "att", User: u, Command: []string{"sleep", "60"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Kill(context.Background(), u, "att") })

	cmd, err := l.AttachTerminal(u, "att", "screen-256color")
	if err != nil {
		t.Fatal(err)
	}
	master, slave := openPTY(t)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave // what ssh.Pty.Start does
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the attach on the PTY: %v", err)
	}
	drained := make(chan struct{})
	go func() { io.Copy(io.Discard, master); close(drained) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		slave.Close()
		<-drained // the master reads EIO once no slave is left
		master.Close()
	})

	// The client tmux lists for the session is ours, on our PTY.
	var clients string
	poll.Until(t, 10*time.Second, "the client to attach", func() bool {
		out, err := rawTmux(tmpDir, u, "list-clients", "-t", "=att", "-F", "#{client_pid} #{client_tty}")
		clients = strings.TrimSpace(out)
		return err == nil && clients != ""
	})
	if want := strconv.Itoa(cmd.Process.Pid) + " " + slave.Name(); clients != want {
		t.Errorf("list-clients = %q, want %q", clients, want)
	}

	// The PTY is the client's controlling terminal, so a resize of the SSH
	// window (TIOCSWINSZ on the master) reaches tmux as SIGWINCH.
	ws := struct{ row, col, x, y uint16 }{30, 100, 0, 0}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws))); errno != 0 {
		t.Fatalf("resize the PTY: %v", errno)
	}
	poll.Until(t, 10*time.Second, "the client to see the new size", func() bool {
		out, _ := rawTmux(tmpDir, u, "list-clients", "-t", "=att", "-F", "#{client_width}x#{client_height}")
		return strings.TrimSpace(out) == "100x30"
	})

	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := strconv.Itoa(u.UID), strconv.Itoa(u.GID)
	ids := u.Groups
	if u.UID == os.Geteuid() { // not switched: the client keeps this process's groups
		if ids, err = os.Getgroups(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
	}
	groups := make([]string, len(ids))
	for i, g := range ids {
		groups[i] = strconv.Itoa(g)
	}
	for _, want := range []string{
		"Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n",
		"Gid:\t" + gid + "\t" + gid + "\t" + gid + "\t" + gid + "\n",
		"Groups:\t" + strings.Join(groups, " ") + " \n",
	} {
		if !strings.Contains(string(status), want) {
			t.Errorf("the client's /proc status lacks %q:\n%s", want, status)
		}
	}

	environ, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	gotEnv := strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00")
	slices.Sort(gotEnv)
	wantEnv := []string{
		"HOME=" + u.Home, "LANG=C.UTF-8", "LOGNAME=" + u.Name, "PATH=" + launch.DefaultPath,
		"SHELL=" + u.Shell, "TERM=screen-256color", "TMUX_TMPDIR=" + tmpDir, "USER=" + u.Name,
	}
	if !slices.Equal(gotEnv, wantEnv) {
		t.Errorf("the client's environment =\n%q\nwant\n%q", gotEnv, wantEnv)
	}
}

func rawTmux(tmpDir string, u launch.User, args ...string) (string, error) {
	cmd := exec.Command("tmux", args...)
	cmd.Env = []string{"TMUX_TMPDIR=" + tmpDir, "HOME=" + u.Home, "PATH=" + launch.DefaultPath}
	if cred, err := launch.Credential(u); err != nil {
		return "", err
	} else if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTerminalCommand(t *testing.T) {
	u := me(t)
	l := launch.New(launch.Options{TmuxTmpDir: "/run/dibs"})
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	tests := []struct {
		name, term string
		argv       []string
		wantPath   string
		wantTerm   string
		wantErr    string
	}{
		{"bare name found in DefaultPath", "xterm", []string{"sh", "-c", "true"}, "", "TERM=xterm", ""},
		{"path kept", "", []string{sh}, sh, "TERM=xterm-256color", ""},
		{"odd TERM replaced", "x\x1b]0;pwned\a", []string{sh}, sh, "TERM=xterm-256color", ""},
		{"not installed", "xterm", []string{"no-such-dibs-tool"}, "", "", "no-such-dibs-tool not found in " + launch.DefaultPath + ": install it"},
		{"empty", "xterm", nil, "", "", "no command to run on the terminal"},
		{"NUL", "xterm", []string{sh, "a\x00b"}, "", "", `command argument "a\x00b" contains a NUL byte`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := l.TerminalCommand(u, tc.term, tc.argv)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantPath != "" && cmd.Path != tc.wantPath {
				t.Errorf("Path = %s, want %s", cmd.Path, tc.wantPath)
			}
			if !strings.HasPrefix(cmd.Path, "/") || !slices.Equal(cmd.Args, tc.argv) {
				t.Errorf("Path, Args = %s, %q; want an absolute path and %q", cmd.Path, cmd.Args, tc.argv)
			}
			if !slices.Contains(cmd.Env, tc.wantTerm) || !slices.Contains(cmd.Env, "TMUX_TMPDIR=/run/dibs") {
				t.Errorf("Env = %q; want %s and the Launcher's TMUX_TMPDIR", cmd.Env, tc.wantTerm)
			}
			if a := cmd.SysProcAttr; a == nil || !a.Setsid || !a.Setctty || cmd.Dir != "/" {
				t.Errorf("SysProcAttr = %+v, Dir = %q; want a new session on the terminal, in /", a, cmd.Dir)
			}
		})
	}
}
