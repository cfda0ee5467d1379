package launch_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// ReadUserFile is how the root agent reads what a user controls (their
// authorized_keys): every trick a hostile user can plant there is refused
// quickly, without reading what the user could not.
func TestReadUserFileRefusesWhatAUserCanPlant(t *testing.T) {
	u := launchtest.User(t)
	ssh := filepath.Join(u.Home, ".ssh")
	plant := func(t *testing.T, f func(path string)) {
		t.Helper()
		os.RemoveAll(ssh)
		if err := os.Mkdir(ssh, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(ssh, u.UID, u.GID)
		f(filepath.Join(ssh, "authorized_keys"))
	}
	secret := filepath.Join(t.TempDir(), "root-only")
	os.WriteFile(secret, []byte("root secret"), 0o600)
	mine := func(path string, mode os.FileMode, data string) {
		os.WriteFile(path, []byte(data), mode)
		os.Chmod(path, mode)
		os.Chown(path, u.UID, u.GID)
	}
	tests := []struct {
		name  string
		plant func(path string)
		want  string // "" means the content reads back
		err   error
	}{
		{"a plain file reads", func(p string) { mine(p, 0o600, "ssh-ed25519 AAAA key") }, "", nil},
		{"a link to /dev/zero", func(p string) { os.Symlink("/dev/zero", p) }, "link", ErrUnsafe},
		{"a link to a root-only file", func(p string) { os.Symlink(secret, p) }, "link", ErrUnsafe},
		{"a FIFO", func(p string) { syscall.Mkfifo(p, 0o600); os.Chown(p, u.UID, u.GID) }, "not a regular file", ErrUnsafe},
		{"a file others can write", func(p string) { mine(p, 0o666, "x") }, "writable", ErrUnsafe},
		{"a file over the cap", func(p string) { mine(p, 0o600, strings.Repeat("k", 70<<10)) }, "over", ErrUnsafe},
		{"a file owned by someone else", func(p string) { os.WriteFile(p, []byte("x"), 0o644); os.Chown(p, 65534, 65534) }, "belongs to", ErrUnsafe},
		{"a missing file", func(p string) {}, "", fs.ErrNotExist},
		{"a .ssh that is a link", func(p string) { os.RemoveAll(ssh); os.Symlink("/root", ssh) }, "link", ErrUnsafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plant(t, tt.plant)
			start := time.Now()
			data, err := launch.New(launch.Options{}).ReadUserFile(t.Context(), u, ".ssh/authorized_keys", 64<<10)
			if time.Since(start) > 2*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
			if tt.err == nil && tt.want == "" {
				if err != nil || string(data) != "ssh-ed25519 AAAA key" {
					t.Fatalf("= %q, %v", data, err)
				}
				return
			}
			if strings.Contains(string(data), "secret") {
				t.Fatalf("read root's secret: %q", data)
			}
			if err == nil || !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.err, tt.want)
			}
		})
	}
}

var ErrUnsafe = launch.ErrUnsafeFile
