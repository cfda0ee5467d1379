//go:build linux

package launch_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// statusRoot is a path for Options.StatusDir that does not exist yet, in a
// fresh directory users may pass through (as /run is), so the Launcher makes
// it itself the way it would in production.
func statusRoot(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "dibs-status-")
	if err != nil {
		t.Fatal(err)
	}
	exit := filepath.Join(base, "exit")
	t.Cleanup(func() {
		if err := launch.ReleaseStatusDir(exit); err != nil {
			t.Error(err)
		}
		os.RemoveAll(base)
	})
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return exit
}

// me is the account this test runs as.
func me(t *testing.T) launch.User {
	t.Helper()
	u, err := launch.LookupUID(os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// asUser runs a shell script as u (args become $1, $2...), failing the test
// if it fails: how a user plants things in their own directory.
func asUser(t *testing.T, u launch.User, script string, args ...string) {
	t.Helper()
	argv := append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	var out string
	var err error
	if u.UID == os.Geteuid() {
		b, e := execCombined(argv)
		out, err = string(b), e
	} else {
		out, err = launchtest.Run(t, u, nil, argv...)
	}
	if err != nil {
		t.Fatalf("as %s: %s: %v: %s", u.Name, script, err, out)
	}
}

// runSession starts a session that records its exit status and waits for it
// to end.
func runSession(t *testing.T, l *launch.Launcher, u launch.User, name string, command ...string) {
	t.Helper()
	if _, err := l.Start(t.Context(), launch.Spec{Name: name, User: u, Command: command, RecordExit: true}); err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	t.Cleanup(func() { l.Kill(context.Background(), u, name) })
	launch.WaitClosed(t, "session "+name+" to end", l.Watch(t.Context(), u, name, 10*time.Millisecond))
}

func TestExitStatusOfSessions(t *testing.T) {
	users := []launch.User{me(t)}
	if os.Geteuid() == 0 {
		users = append(users, launchtest.User(t)) // the agent's real case: root reads another user's status
	} else {
		t.Log("not root: checking only a personal agent's own sessions")
	}
	for _, u := range users {
		t.Run(u.Name, func(t *testing.T) {
			sdir := statusRoot(t)
			l, _ := launch.NewTestLauncher(t, sdir)
			if code, ok, err := l.ExitStatus(u, "never-started"); ok || err != nil {
				t.Errorf("ExitStatus before anything was recorded = %d, %v, %v; want 0, false, nil", code, ok, err)
			}
			tests := []struct {
				name    string
				command []string
				want    int
			}{
				{"argv-exit-3", []string{"sh", "-c", "exit 3"}, 3},
				{"argv-exit-0", []string{"sh", "-c", "exit 0"}, 0},
				{"line-exit-7", []string{"exit 7"}, 7}, // one string: a command line for the user's shell
				{"line-pipeline", []string{"true | false"}, 1},
				{"killed-by-signal", []string{"sh", "-c", "kill -9 $$"}, 128 + 9},
			}
			for _, tc := range tests {
				if sh := filepath.Base(u.Shell); len(tc.command) == 1 && (sh == "nologin" || sh == "false") {
					t.Logf("%s: skipped: %s's shell is %s, which runs no command line", tc.name, u.Name, u.Shell)
					continue
				}
				runSession(t, l, u, tc.name, tc.command...)
				code, ok, err := l.ExitStatus(u, tc.name)
				if code != tc.want || !ok || err != nil {
					t.Errorf("%s: ExitStatus = %d, %v, %v; want %d, true, nil", tc.name, code, ok, err, tc.want)
				}
				// Read once: the status is gone afterwards.
				if code, ok, err := l.ExitStatus(u, tc.name); ok || err != nil {
					t.Errorf("%s: second ExitStatus = %d, %v, %v; want 0, false, nil", tc.name, code, ok, err)
				}
			}

			// The directories are what the package promises.
			checkOwnerMode(t, sdir, os.Geteuid(), 0o711)
			checkOwnerMode(t, filepath.Join(sdir, strconv.Itoa(u.UID)), u.UID, 0o700)

			// A session killed as a whole records nothing, and a status left
			// behind by an earlier session of the same name does not count.
			stale := filepath.Join(sdir, strconv.Itoa(u.UID), "killed.exit")
			asUser(t, u, `echo 0 > "$1"`, stale)
			if _, err := l.Start(t.Context(), launch.Spec{Name: "killed", User: u, Command: []string{"sleep", "30"}, RecordExit: true}); err != nil {
				t.Fatal(err)
			}
			if err := l.Kill(t.Context(), u, "killed"); err != nil {
				t.Fatal(err)
			}
			launch.WaitClosed(t, "the killed session to end", l.Watch(t.Context(), u, "killed", 10*time.Millisecond))
			if code, ok, err := l.ExitStatus(u, "killed"); ok || err != nil {
				t.Errorf("killed session: ExitStatus = %d, %v, %v; want 0, false, nil", code, ok, err)
			}
		})
	}
}

func checkOwnerMode(t *testing.T, path string, uid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || !fi.IsDir() || fi.Mode().Perm() != mode {
		t.Errorf("%s: uid %d, %v; want a directory of uid %d, mode %v", path, st.Uid, fi.Mode(), uid, mode)
	}
}

// TestExitStatusRefusesPlantedFiles plays the user who wants the root agent
// to read something for them, or to choke: between the session's end and the
// agent's read, they replace their status file.
func TestExitStatusRefusesPlantedFiles(t *testing.T) {
	victim := launchtest.User(t) // skips unless root
	other := launchtest.User(t)
	sdir := statusRoot(t)
	l, _ := launch.NewTestLauncher(t, sdir)
	runSession(t, l, victim, "first", "sh", "-c", "exit 0") // makes the victim's directory
	if code, ok, err := l.ExitStatus(victim, "first"); code != 0 || !ok || err != nil {
		t.Fatalf("ExitStatus of a clean session = %d, %v, %v; want 0, true, nil", code, ok, err)
	}
	udir := filepath.Join(sdir, strconv.Itoa(victim.UID))

	// A root-only file whose content a naive reader would return as the
	// status, in a directory the user may pass through.
	secretDir := launch.WorldDir(t)
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file of another user's that the victim may hard-link (it is
	// world-writable, which fs.protected_hardlinks allows).
	shared := filepath.Join(launch.WorldDir(t), "shared")
	asUser(t, other, `echo 0 > "$1"; chmod 666 "$1"`, shared)

	tests := []struct {
		name   string
		plant  func(t *testing.T, path string)
		want   string // in the error
		remove bool   // ExitStatus removes the entry
	}{
		{"symlink-to-dev-zero", func(t *testing.T, p string) { asUser(t, victim, `ln -s /dev/zero "$1"`, p) }, "symbolic link", true},
		{"symlink-to-root-only-file", func(t *testing.T, p string) { asUser(t, victim, `ln -s "$2" "$1"`, p, secret) }, "symbolic link", true},
		{"fifo", func(t *testing.T, p string) { asUser(t, victim, `mkfifo "$1"`, p) }, "not a regular file", true},
		{"sixty-four-kilobytes", func(t *testing.T, p string) {
			// "0" and then 64 KiB of blanks (what fits in the user's capped
			// status space): a reader without a cap would trim it to a
			// clean 0.
			asUser(t, victim, `{ echo 0; head -c 65536 /dev/zero | tr '\0' ' '; } > "$1"`, p)
		}, "more than an exit status", true},
		{"chowned-to-other", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, other.UID, other.GID); err != nil {
				t.Fatal(err)
			}
		}, "belongs to uid " + strconv.Itoa(other.UID), true},
		{"hard-link-to-other", func(t *testing.T, p string) {
			if out, err := launchtest.Run(t, victim, nil, "ln", shared, p); err != nil {
				t.Skipf("the link cannot be made here (%s: fs.protected_hardlinks, or the user's status directory is a filesystem of its own); the chowned case covers the rule", strings.TrimSpace(out))
			}
		}, "belongs to uid " + strconv.Itoa(other.UID), true},
		{"directory", func(t *testing.T, p string) { asUser(t, victim, `mkdir "$1"`, p) }, "not a regular file", false},
		{"not-a-number", func(t *testing.T, p string) { asUser(t, victim, `echo abc > "$1"`, p) }, "does not hold an exit status", true},
		{"out-of-range", func(t *testing.T, p string) { asUser(t, victim, `echo 300 > "$1"`, p) }, "does not hold an exit status", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(udir, tc.name+".exit")
			tc.plant(t, path)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			type result struct {
				code int
				ok   bool
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, ok, err := l.ExitStatus(victim, tc.name)
				done <- result{code, ok, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ExitStatus still blocked after 5s")
			}
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if r.ok || r.code != 0 || r.err == nil {
				t.Fatalf("ExitStatus = %d, %v, %v; want it refused", r.code, r.ok, r.err)
			}
			if !errors.Is(r.err, launch.ErrStatusDir) || !strings.Contains(r.err.Error(), tc.want) {
				t.Errorf("error = %q; want ErrStatusDir saying %q", r.err, tc.want)
			}
			if took > time.Second {
				t.Errorf("ExitStatus took %v; a refusal must be quick", took)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
				t.Errorf("ExitStatus allocated %d bytes; it must never read more than a status", grew)
			}
			_, err := os.Lstat(path)
			if gone := errors.Is(err, os.ErrNotExist); gone != tc.remove {
				t.Errorf("after ExitStatus, %s gone = %v; want %v", path, gone, tc.remove)
			}
		})
	}
	if data, err := os.ReadFile(secret); err != nil || string(data) != "42\n" {
		t.Errorf("the root-only file is now %q, %v; removing the link must leave it alone", data, err)
	}
}

// TestStatusDirRefused: the Launcher uses no status directory that anyone but
// this process could shape, and says what to fix.
func TestStatusDirRefused(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name     string
		rootOnly bool
		setup    func(t *testing.T) string // returns Options.StatusDir
		want     string                    // in the error; "" means usable
	}{
		{"world-writable", false, func(t *testing.T) string {
			d := statusRoot(t)
			mkdir(t, d, 0o777)
			return d
		}, "is writable by group or others"},
		{"symlink", false, func(t *testing.T) string {
			d := statusRoot(t)
			mkdir(t, d+".real", 0o711)
			if err := os.Symlink(d+".real", d); err != nil {
				t.Fatal(err)
			}
			return d
		}, "is a symbolic link or not a directory"},
		{"a file", false, func(t *testing.T) string {
			d := statusRoot(t)
			os.WriteFile(d, nil, 0o644)
			return d
		}, "is a symbolic link or not a directory"},
		{"ancestor-writable", false, func(t *testing.T) string {
			d := statusRoot(t)
			os.Chmod(filepath.Dir(d), 0o777)
			return d
		}, "is writable by group or others, who could replace what lies under it"},
		{"ancestor-sticky-is-fine", false, func(t *testing.T) string {
			d := statusRoot(t)
			os.Chmod(filepath.Dir(d), os.ModeSticky|0o777) // like /tmp
			return d
		}, ""},
		{"missing-parent", false, func(t *testing.T) string {
			return filepath.Join(statusRoot(t), "exit") // only the last element is made
		}, "does not exist: create it"},
		{"relative", false, func(t *testing.T) string { return "run/dibs/exit" }, "not an absolute path"},
		{"owned-by-other", true, func(t *testing.T) string {
			other := launchtest.User(t)
			d := statusRoot(t)
			mkdir(t, d, 0o711)
			os.Chown(d, other.UID, other.GID)
			return d
		}, "belongs to uid"},
		{"not-traversable", true, func(t *testing.T) string {
			d := statusRoot(t)
			mkdir(t, d, 0o700)
			return d
		}, "does not let users through"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && !root {
				prereq.Missing(t, "needs root: makes another user's directory")
			}
			l, _ := launch.NewTestLauncher(t, tc.setup(t))
			u := me(t)
			_, err := l.Start(t.Context(), launch.Spec{Name: "s", User: u, Command: []string{"true"}, RecordExit: true})
			t.Cleanup(func() { l.Kill(context.Background(), u, "s") })
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Start = %v; want the directory used", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v; want it refused, saying %q", err, tc.want)
			}
			if errors.Is(err, os.ErrNotExist) {
				// Nothing can have been recorded where nothing exists.
				if code, ok, err := l.ExitStatus(u, "s"); ok || err != nil {
					t.Errorf("ExitStatus = %d, %v, %v; want 0, false, nil", code, ok, err)
				}
				return
			}
			if !errors.Is(err, launch.ErrStatusDir) {
				t.Errorf("Start = %v; want ErrStatusDir", err)
			}
			if _, ok, err := l.ExitStatus(u, "s"); ok || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ExitStatus = %v, %v; want refused, saying %q", ok, err, tc.want)
			}
		})
	}
}

func mkdir(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestSquattedUserDir: an attacker who got (or was given) a directory named
// after the victim's uid cannot fake the victim's job status.
func TestSquattedUserDir(t *testing.T) {
	victim := launchtest.User(t) // skips unless root
	attacker := launchtest.User(t)
	victimDir := func(sdir string) string { return filepath.Join(sdir, strconv.Itoa(victim.UID)) }
	// plantSuccess is the attacker's forged "exit 0" for the victim's session.
	plantSuccess := func(t *testing.T, dir string) {
		asUser(t, attacker, `echo 0 > "$1/job.exit"`, dir)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, sdir string)
		want  string
	}{
		{"in-a-world-writable-status-dir", func(t *testing.T, sdir string) {
			mkdir(t, sdir, 0o777) // the mistake the old /tmp/dibs-exit-UID made possible
			asUser(t, attacker, `mkdir -m 777 "$1"`, victimDir(sdir))
			plantSuccess(t, victimDir(sdir))
		}, "is writable by group or others"},
		{"left-owned-by-attacker", func(t *testing.T, sdir string) {
			mkdir(t, sdir, 0o711)
			mkdir(t, victimDir(sdir), 0o700)
			os.Chown(victimDir(sdir), attacker.UID, attacker.GID)
			plantSuccess(t, victimDir(sdir))
		}, "belongs to uid " + strconv.Itoa(attacker.UID) + ", not " + victim.Name},
		{"symlink-to-attacker-dir", func(t *testing.T, sdir string) {
			mkdir(t, sdir, 0o711)
			theirs := launch.WorldDir(t)
			plantSuccess(t, theirs)
			os.Symlink(theirs, victimDir(sdir))
		}, "is a symbolic link or not a directory"},
		{"a-file", func(t *testing.T, sdir string) {
			mkdir(t, sdir, 0o711)
			os.WriteFile(victimDir(sdir), nil, 0o644)
		}, "is a symbolic link or not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sdir := statusRoot(t)
			tc.setup(t, sdir)
			l, _ := launch.NewTestLauncher(t, sdir)
			_, err := l.Start(t.Context(), launch.Spec{Name: "job", User: victim, Command: []string{"sh", "-c", "exit 3"}, RecordExit: true})
			t.Cleanup(func() { l.Kill(context.Background(), victim, "job") })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start = %v; want it refused, saying %q", err, tc.want)
			}
			code, ok, err := l.ExitStatus(victim, "job")
			if ok || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ExitStatus = %d, %v, %v; want refused (never the planted 0), saying %q", code, ok, err, tc.want)
			}
		})
	}

	// A directory root made and did not manage to give away (root-owned,
	// 0700) is the Launcher's own: it is given to the victim and used.
	t.Run("left-owned-by-root", func(t *testing.T) {
		sdir := statusRoot(t)
		mkdir(t, sdir, 0o711)
		mkdir(t, victimDir(sdir), 0o700)
		l, _ := launch.NewTestLauncher(t, sdir)
		runSession(t, l, victim, "job", "sh", "-c", "exit 3")
		if code, ok, err := l.ExitStatus(victim, "job"); code != 3 || !ok || err != nil {
			t.Errorf("ExitStatus = %d, %v, %v; want 3, true, nil", code, ok, err)
		}
		checkOwnerMode(t, victimDir(sdir), victim.UID, 0o700)
	})
}

func execCombined(argv []string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + launch.DefaultPath}
	return cmd.CombinedOutput()
}
