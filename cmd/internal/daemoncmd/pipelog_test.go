package daemoncmd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestPipeLogArgv: jobs keep their output through the client beside the
// daemon's binary when it is a trustworthy executable, else through the
// daemon's own.
func TestPipeLogArgv(t *testing.T) {
	for _, tc := range []struct {
		name   string
		make   func(path string) error
		client bool
	}{
		{"client beside", func(p string) error { return os.WriteFile(p, nil, 0o755) }, true},
		{"no client", func(string) error { return nil }, false},
		{"client writable by others", func(p string) error {
			if err := os.WriteFile(p, nil, 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		}, false},
		{"client not executable", func(p string) error { return os.WriteFile(p, nil, 0o644) }, false},
		{"a directory named dibs", func(p string) error { return os.Mkdir(p, 0o755) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, "dibsd")
			if err := tc.make(filepath.Join(dir, "dibs")); err != nil {
				t.Fatal(err)
			}
			want := []string{exe, "_pipe-log"}
			if tc.client {
				want = []string{filepath.Join(dir, "dibs"), "_pipe-log"}
			}
			if got := pipeLogArgv(exe); !slices.Equal(got, want) {
				t.Errorf("pipeLogArgv = %q, want %q", got, want)
			}
		})
	}
}

// Weak 5 of the fourth round: a dibsd started from a directory others may
// write (a sticky /tmp) took another user's `dibs → /bin/bash` link beside
// it for its pipe-log (a stat followed the link to root's bash), and every
// job's log was lost. Another user's plant there is refused: jobs keep
// their output through dibsd itself.
func TestPipeLogArgvRefusesAnotherUsersPlant(t *testing.T) {
	mallory := launchtest.User(t)
	base, err := os.MkdirTemp("", "dibs-pipelog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sticky := filepath.Join(base, "tmp")
	os.Chmod(base, 0o755)
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sticky, 0o777|os.ModeSticky)
	exe := filepath.Join(sticky, "dibsd")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, plant := range []string{"ln -s /bin/bash " + sticky + "/dibs", "printf '#!/bin/sh\\n' > " + sticky + "/dibs && chmod 755 " + sticky + "/dibs"} {
		os.Remove(filepath.Join(sticky, "dibs"))
		if out, err := launchtest.Run(t, mallory, nil, "/bin/sh", "-c", plant); err != nil {
			t.Fatalf("as %s: %s: %v: %s", mallory.Name, plant, err, out)
		}
		if got, want := pipeLogArgv(exe), []string{exe, "_pipe-log"}; !slices.Equal(got, want) {
			t.Errorf("beside a dibsd in a sticky /tmp, after %s plants `%s`: pipeLogArgv = %q, want %q", mallory.Name, plant, got, want)
		}
	}
}
