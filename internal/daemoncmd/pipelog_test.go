package daemoncmd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
