package launch_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// openDir is a fresh directory of root's that every user may enter (a
// test's TempDir is root's alone), removed at cleanup.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dibs-trust-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stickyDir is a directory every user may write, sticky, owned by root: a
// /tmp of the test's own.
func stickyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(openDir(t), "tmp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// plant runs a shell line as u, the way another user on the node plants
// files in a directory they may write.
func plant(t *testing.T, u launch.User, line string) {
	t.Helper()
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", line); err != nil {
		t.Fatalf("as %s: %s: %v: %s", u.Name, line, err, out)
	}
}

// Weak 5 of the fourth round: `dibs` ran whatever dibsd sat beside it, and
// the agent took a `dibs` link to /bin/bash for its pipe-log because a stat
// followed the link. TrustedBinary passes only what nobody but root and
// the caller can change: another user's plant in a sticky /tmp (a file or
// a link), a directory of theirs on the way, or a directory anyone may
// write without the sticky bit, is refused; root's own files there pass.
func TestTrustedBinary(t *testing.T) {
	mallory := launchtest.User(t)
	sticky := stickyDir(t)
	open := filepath.Join(openDir(t), "open") // world-writable, not sticky
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	safe := openDir(t)
	prog := func(path string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
		return path
	}
	prog(filepath.Join(safe, "dibsd"), 0o755)
	prog(filepath.Join(sticky, "root-dibsd"), 0o755)
	prog(filepath.Join(open, "dibsd"), 0o755)
	prog(filepath.Join(safe, "writable"), 0o755)
	os.Chmod(filepath.Join(safe, "writable"), 0o775)
	os.Chown(filepath.Join(safe, "writable"), 0, mallory.GID) // her group may write it
	prog(filepath.Join(safe, "rootgroup"), 0o755)
	os.Chmod(filepath.Join(safe, "rootgroup"), 0o775) // root's group may write it, as sudo allows
	prog(filepath.Join(safe, "plain"), 0o644)
	os.Symlink(filepath.Join(safe, "dibsd"), filepath.Join(safe, "link"))
	os.Symlink("../"+filepath.Base(safe)+"/dibsd", filepath.Join(safe, "rel"))
	plant(t, mallory, "printf '#!/bin/sh\\n' > "+sticky+"/dibsd && chmod 755 "+sticky+"/dibsd")
	plant(t, mallory, "ln -s /bin/bash "+sticky+"/dibs")
	plant(t, mallory, "mkdir "+sticky+"/bin && chmod 755 "+sticky+"/bin")
	prog(filepath.Join(sticky, "bin", "dibsd"), 0o755) // root's file in mallory's directory

	for _, tc := range []struct {
		name, path string
		want       string // the path it resolves to; "" for a refusal
		refusal    string // words the refusal holds
		notExist   bool
	}{
		{"root's program in a root directory", filepath.Join(safe, "dibsd"), filepath.Join(safe, "dibsd"), "", false},
		{"root's link to it", filepath.Join(safe, "link"), filepath.Join(safe, "dibsd"), "", false},
		{"a relative link", filepath.Join(safe, "rel"), filepath.Join(safe, "dibsd"), "", false},
		{"root's program in a sticky /tmp", filepath.Join(sticky, "root-dibsd"), filepath.Join(sticky, "root-dibsd"), "", false},
		{"another user's program in a sticky /tmp", filepath.Join(sticky, "dibsd"), "", "owned by uid", false},
		{"another user's link to /bin/bash", filepath.Join(sticky, "dibs"), "", "owned by uid", false},
		{"root's program in another user's directory", filepath.Join(sticky, "bin", "dibsd"), "", "owned by uid", false},
		{"a directory anyone may write, not sticky", filepath.Join(open, "dibsd"), "", "not sticky", false},
		{"a program another group may write", filepath.Join(safe, "writable"), "", "written by others", false},
		{"a program root's group may write", filepath.Join(safe, "rootgroup"), filepath.Join(safe, "rootgroup"), "", false},
		{"not executable", filepath.Join(safe, "plain"), "", "not executable", false},
		{"a directory", safe, "", "not a program", false},
		{"nothing there", filepath.Join(safe, "nothing"), "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := launch.TrustedBinary(tc.path, 0)
			switch {
			case tc.want != "":
				if err != nil || got != tc.want {
					t.Errorf("TrustedBinary(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
				}
			case tc.notExist:
				if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, launch.ErrUntrustedBinary) {
					t.Errorf("TrustedBinary(%s) = %q, %v; want not there", tc.path, got, err)
				}
			default:
				if !errors.Is(err, launch.ErrUntrustedBinary) || !strings.Contains(err.Error(), tc.refusal) || strings.Contains(err.Error(), "\n") {
					t.Errorf("TrustedBinary(%s) = %q, %v; want a one-line refusal saying %q", tc.path, got, err, tc.refusal)
				}
			}
		})
	}
	// mallory herself may run her own program from the sticky /tmp.
	if got, err := launch.TrustedBinary(filepath.Join(sticky, "dibsd"), mallory.UID); err != nil || got != filepath.Join(sticky, "dibsd") {
		t.Errorf("her own program, for her: %q, %v; want it", got, err)
	}
}
