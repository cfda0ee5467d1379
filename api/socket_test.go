package api

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// mkdir makes dir with exactly mode (no umask) owned by uid.
func mkdir(t *testing.T, dir string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid != os.Geteuid() {
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// listenAt puts a socket at path, as an agent (or an impostor) would.
func listenAt(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

func TestCheckSocket(t *testing.T) {
	me := os.Geteuid()
	// other is a real second account when the test can make one (root);
	// cases that need it skip otherwise.
	var other launch.User
	if me == 0 {
		other = launchtest.User(t)
	}
	tests := []struct {
		name     string
		needRoot string // why the case needs root, if it does
		// setup builds the tree under base and returns the socket path and
		// the uid to check it as.
		setup func(t *testing.T, base string) (sock string, caller int)
		want  string // "" accepts; else a piece of the refusal
	}{
		{"own 0700 directory", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/own", 0o700, me)
			return base + "/own/dibs.sock", me
		}, ""},
		{"user's own 0700 directory, checked as that user", "chown to another account", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/u", 0o700, other.UID)
			return base + "/u/dibs.sock", other.UID
		}, ""},
		{"root-owned 0755 directory, checked as a user", "a directory owned by root", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/run", 0o755, 0)
			return base + "/run/dibs.sock", other.UID
		}, ""},
		{"sticky world-writable ancestor like /tmp", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/tmp", os.ModeSticky|0o777, me)
			mkdir(t, base+"/tmp/d", 0o700, me)
			return base + "/tmp/d/dibs.sock", me
		}, ""},
		{"socket present in own directory", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/own", 0o700, me)
			listenAt(t, base+"/own/dibs.sock")
			return base + "/own/dibs.sock", me
		}, ""},
		{"world-writable directory", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/ww", 0o777, me)
			return base + "/ww/dibs.sock", me
		}, "its directory " + "BASE/ww is writable by group or others (drwxrwxrwx)"},
		{"socket straight in a sticky /tmp", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/tmp", os.ModeSticky|0o777, me)
			return base + "/tmp/dibs.sock", me
		}, "its directory BASE/tmp is writable by group or others (dtrwxrwxrwx)"},
		{"group-writable directory", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/gw", 0o770, me)
			return base + "/gw/dibs.sock", me
		}, "is writable by group or others (drwxrwx---), so someone else could have put a fake agent there (it is yours: chmod go-w BASE/gw, then restart the agent)"},
		{"directory owned by another user", "chown to another account", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/theirs", 0o700, other.UID)
			return base + "/theirs/dibs.sock", me
		}, "its directory BASE/theirs belongs to uid OTHER, not to root or you"},
		{"ancestor owned by another user", "chown to another account", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/theirs", 0o755, other.UID)
			mkdir(t, base+"/theirs/d", 0o700, me)
			return base + "/theirs/d/dibs.sock", me
		}, "BASE/theirs, above its directory, belongs to uid OTHER"},
		{"world-writable ancestor that is not sticky", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/ww", 0o777, me)
			mkdir(t, base+"/ww/d", 0o700, me)
			return base + "/ww/d/dibs.sock", me
		}, "BASE/ww, above its directory, is writable by group or others and not sticky (drwxrwxrwx)"},
		{"symlink to a socket in a bad directory", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/own", 0o700, me)
			mkdir(t, base+"/ww", 0o777, me)
			listenAt(t, base+"/ww/dibs.sock")
			if err := os.Symlink(base+"/ww/dibs.sock", base+"/own/dibs.sock"); err != nil {
				t.Fatal(err)
			}
			return base + "/own/dibs.sock", me
		}, "its directory BASE/ww is writable by group or others (drwxrwxrwx), so someone else could have put a fake agent there (it is yours: chmod go-w BASE/ww, then restart the agent) (the real path of BASE/own/dibs.sock is BASE/ww/dibs.sock)"},
		{"symlinked directory pointing at a bad one", "", func(t *testing.T, base string) (string, int) {
			mkdir(t, base+"/ww", 0o777, me)
			if err := os.Symlink(base+"/ww", base+"/link"); err != nil {
				t.Fatal(err)
			}
			return base + "/link/dibs.sock", me
		}, "its directory BASE/ww is writable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needRoot != "" && me != 0 {
				prereq.Missing(t, "needs root: %s", tc.needRoot)
			}
			base := t.TempDir()
			sock, caller := tc.setup(t, base)
			real, err := checkSocket(sock, caller)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkSocket(%s) as uid %d: %v; want it accepted", sock, caller, err)
				}
				if want := sock; real != want {
					t.Errorf("real path = %s, want %s", real, want)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "BASE", base)
			want = strings.ReplaceAll(want, "OTHER", strconv.Itoa(other.UID)+" ("+other.Name+")")
			var ue *UntrustedError
			if !errors.As(err, &ue) {
				t.Fatalf("checkSocket(%s) = %q, %v; want a refusal", sock, real, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, want) || !strings.HasPrefix(msg, "refusing the dibs socket "+sock+": ") ||
				!strings.HasSuffix(msg, "; "+useInstead) || strings.Contains(msg, "\n") {
				t.Errorf("refusal:\n %s\nwant one line containing:\n %s", msg, want)
			}
		})
	}
}

// A missing socket or directory is "no agent", which the client turns into
// how to start one, not a refusal.
func TestCheckSocketMissing(t *testing.T) {
	base := t.TempDir()
	mkdir(t, base+"/own", 0o700, os.Geteuid())
	if err := os.Symlink(base+"/nowhere/dibs.sock", base+"/own/dangling.sock"); err != nil {
		t.Fatal(err)
	}
	for _, sock := range []string{base + "/none/dibs.sock", base + "/own/dangling.sock"} {
		_, err := CheckSocket(sock)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("CheckSocket(%s) = %v, want not-exist", sock, err)
		}
		_, err = NewClient(sock).Status(t.Context())
		if err == nil || !strings.HasPrefix(err.Error(), "no dibs agent at "+sock+": start one") {
			t.Errorf("Status via %s: %v, want how to start an agent", sock, err)
		}
	}
}

func TestUserSocket(t *testing.T) {
	uid := os.Geteuid()
	run := filepath.Join("/run/user", strconv.Itoa(uid))
	home := "/home/alice"
	if fi, err := os.Lstat(run); err == nil && fi.IsDir() && ownerOf(fi) == uid {
		home = run // the runtime dir wins over the home when it is the caller's
	}
	fallback := func(p string) string {
		if home == run {
			return run + "/dibs.sock"
		}
		return p
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"runtime dir", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/alice"}, "/run/user/1000/dibs.sock"},
		{"no runtime dir: state dir", map[string]string{"HOME": "/home/alice"}, fallback("/home/alice/.local/state/dibs/dibs.sock")},
		{"XDG_STATE_HOME", map[string]string{"XDG_STATE_HOME": "/srv/alice/state", "HOME": "/home/alice"}, fallback("/srv/alice/state/dibs/dibs.sock")},
		{"relative XDG values are ignored", map[string]string{"XDG_RUNTIME_DIR": "tmp", "XDG_STATE_HOME": "s", "HOME": "/home/alice"}, fallback("/home/alice/.local/state/dibs/dibs.sock")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := UserSocket(func(k string) string { return tc.env[k] })
			if got != tc.want {
				t.Errorf("UserSocket = %s, want %s", got, tc.want)
			}
			if strings.HasPrefix(got, os.TempDir()+"/") || strings.HasPrefix(got, "/tmp/") {
				t.Errorf("UserSocket = %s: a shared temp directory anyone can create first", got)
			}
		})
	}
}

func TestSocketPath(t *testing.T) {
	base := t.TempDir()
	mkdir(t, base+"/run", 0o755, os.Geteuid())
	present, absent := base+"/run/dibs/dibs.sock", base+"/gone/dibs/dibs.sock"
	mkdir(t, base+"/run/dibs", 0o755, os.Geteuid())
	env := map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}
	withSocket := map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "DIBS_SOCKET": "/srv/dibs.sock"}
	tests := []struct {
		name   string
		flag   string
		env    map[string]string
		euid   int
		system string
		want   string
	}{
		{"flag first", "/a.sock", withSocket, 1000, present, "/a.sock"},
		{"then DIBS_SOCKET", "", withSocket, 1000, present, "/srv/dibs.sock"},
		{"root: the system agent", "", env, 0, absent, absent},
		{"system agent's directory present, even while it is stopped", "", env, 1000, present, present},
		{"no system agent: your own", "", env, 1000, absent, "/run/user/1000/dibs.sock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := socketPath(tc.flag, func(k string) string { return tc.env[k] }, tc.euid, tc.system)
			if got != tc.want {
				t.Errorf("socketPath = %s, want %s", got, tc.want)
			}
		})
	}
}
