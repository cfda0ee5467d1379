// Package launchtest makes real accounts for tests that must act as another
// user: a claim by someone else, a file planted in a victim's directory, a
// socket served by the wrong uid. The kernel is the only judge of identity
// in dibs, so these tests need real uids, not fakes.
package launchtest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
)

// User creates a throwaway account with useradd (its home in a fresh
// directory every user may enter), in the given supplementary groups,
// resolves it, and deletes it at cleanup. It skips the test, saying why,
// unless it runs as root with useradd.
func User(tb testing.TB, groups ...string) launch.User {
	tb.Helper()
	needRoot(tb)
	name := randomName("dibst")
	base, err := os.MkdirTemp("", "dibs-home-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chmod(base, 0o755)
	home := filepath.Join(base, name)
	args := []string{"--create-home", "--home-dir", home, "--shell", "/bin/sh", "--user-group"}
	if len(groups) > 0 {
		args = append(args, "--groups", strings.Join(groups, ","))
	}
	out, err := exec.Command("useradd", append(args, name)...).CombinedOutput()
	if err != nil {
		os.RemoveAll(base)
		tb.Fatalf("useradd %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return made(tb, name, base)
}

// Group creates a throwaway group (an admin group, say) and deletes it at
// cleanup.
func Group(tb testing.TB) string {
	tb.Helper()
	needRoot(tb)
	name := randomName("dibsg")
	if out, err := exec.Command("groupadd", name).CombinedOutput(); err != nil {
		tb.Fatalf("groupadd %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	tb.Cleanup(func() { exec.Command("groupdel", name).Run() })
	return name
}

func needRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		prereq.Missing(tb, "needs root: creates real user accounts and groups with useradd")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		prereq.Missing(tb, "needs useradd (Debian package passwd) to create a user account")
	}
}

func randomName(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Run runs argv as u (uid, gid and groups set, a clean environment with
// extra added) and returns its combined output and exit error.
func Run(tb testing.TB, u launch.User, extra []string, argv ...string) (string, error) {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name, "PATH=" + launch.DefaultPath}, extra...)
	cmd.Dir = "/"
	cred, err := launch.Credential(u)
	if err != nil {
		tb.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MuteTmux does to u's tmux server what a hostile user can do to their
// own: it renames the server's socket (under tmpDir, TMUX_TMPDIR) aside and
// puts in its place a listener, owned by u, that accepts every connection
// and never answers, so every tmux client that asks the server anything
// waits forever. The returned restore (also run at cleanup) closes the
// listener and puts the real socket back. With no server running it mutes
// the place one would be.
func MuteTmux(tb testing.TB, tmpDir string, u launch.User) (restore func()) {
	tb.Helper()
	sock := launch.SocketPath(tmpDir, u.UID)
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		tb.Fatal(err)
	}
	os.Chown(filepath.Dir(sock), u.UID, u.GID)
	real := sock + ".real"
	moved := os.Rename(sock, real) == nil
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatalf("listen in place of %s: %v", sock, err)
	}
	if err := os.Chown(sock, u.UID, u.GID); err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	var once sync.Once
	restore = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for _, c := range held {
				c.Close()
			}
			mu.Unlock()
			os.Remove(sock)
			if moved {
				os.Rename(real, sock)
			}
		})
	}
	tb.Cleanup(restore)
	return restore
}

// made resolves the account name that useradd just made, with its home
// under base, and deletes both (ending its processes) at cleanup.
func made(tb testing.TB, name, base string) launch.User {
	tb.Helper()
	tb.Cleanup(func() {
		exec.Command("pkill", "-KILL", "-u", name).Run()
		exec.Command("userdel", "--force", name).Run()
		os.RemoveAll(base)
	})
	u, err := launch.LookupUser(name)
	if err != nil {
		tb.Fatalf("look up the new user %s: %v", name, err)
	}
	return u
}

// Replace does what an admin does when someone leaves and someone joins:
// it deletes old's account (ending its processes) and creates a new
// account, with a new name, that gets old's uid. It returns the newcomer,
// deleted at cleanup.
func Replace(tb testing.TB, old launch.User) launch.User {
	tb.Helper()
	needRoot(tb)
	exec.Command("pkill", "-KILL", "-u", old.Name).Run()
	if out, err := exec.Command("userdel", "--force", old.Name).CombinedOutput(); err != nil {
		tb.Fatalf("userdel %s: %v: %s", old.Name, err, strings.TrimSpace(string(out)))
	}
	name := randomName("dibsn")
	base, err := os.MkdirTemp("", "dibs-home-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chmod(base, 0o755)
	home := filepath.Join(base, name)
	uid := strconv.Itoa(old.UID)
	out, err := exec.Command("useradd", "--create-home", "--home-dir", home, "--shell", "/bin/sh", "--user-group", "--uid", uid, name).CombinedOutput()
	if err != nil {
		os.RemoveAll(base)
		tb.Fatalf("useradd %s with uid %s: %v: %s", name, uid, err, strings.TrimSpace(string(out)))
	}
	return made(tb, name, base)
}
