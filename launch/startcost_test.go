package launch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartIsOneTmuxClient: a run's start costs one tmux process, which
// also proves the user can enter the working directory (it starts there);
// only a start that fails runs the separate check that says why.
func TestStartIsOneTmuxClient(t *testing.T) {
	h := newHarness(t)
	real, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	bin := t.TempDir()
	os.Chmod(bin, 0o755)
	calls := filepath.Join(h.tmpDir, "calls")
	wrapper := filepath.Join(bin, "tmux")
	script := "#!/bin/sh\necho \"$1\" >> '" + calls + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l := New(Options{TmuxPath: wrapper, TmuxTmpDir: h.tmpDir, Logf: safeLogf(t)})
	work := worldDir(t)
	for _, tc := range []struct {
		name, dir string
		want      string // the tmux commands run, one a line
		err       error
	}{
		{name: "a directory the user can enter", dir: work, want: "new-session\n"},
		{name: "a missing directory", dir: filepath.Join(work, "missing"), want: "", err: ErrWorkDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(calls)
			_, err := l.Start(t.Context(), Spec{Name: "cost", User: h.me, Command: []string{"sleep", "30"}, Dir: tc.dir})
			if err == nil {
				defer l.Kill(context.Background(), h.me, "cost")
			}
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Start in %s: %v, want %v", tc.dir, err, tc.err)
			}
			got, _ := os.ReadFile(calls)
			if string(got) != tc.want {
				t.Errorf("tmux ran %q, want %q", strings.Split(strings.TrimSpace(string(got)), "\n"), strings.Split(strings.TrimSpace(tc.want), "\n"))
			}
		})
	}
}
