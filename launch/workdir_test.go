//go:build linux

package launch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/internal/poll"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestWorkingDirCheckedAsUser: whether a directory exists where the user
// cannot look is not the user's to learn from dibs.
func TestWorkingDirCheckedAsUser(t *testing.T) {
	victim := launchtest.User(t) // skips unless root
	l, _ := launch.NewTestLauncher(t, "")
	open := launch.WorldDir(t)
	locked, err := os.MkdirTemp("", "dibs-locked-") // root's, 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(locked) })
	mkdir(t, filepath.Join(locked, "inner"), 0o755)
	file := filepath.Join(open, "file")
	os.WriteFile(file, nil, 0o644)

	message := func(dir string) string {
		t.Helper()
		_, err := l.Start(t.Context(), launch.Spec{Name: "wd", User: victim, Command: []string{"sleep", "30"}, Dir: dir})
		if err == nil {
			l.Kill(context.Background(), victim, "wd")
			t.Fatalf("Start in %s succeeded; %s cannot enter it", dir, victim.Name)
		}
		if !errors.Is(err, launch.ErrWorkDir) {
			t.Errorf("Start in %s = %v; want ErrWorkDir", dir, err)
		}
		return strings.ReplaceAll(err.Error(), dir, "DIR")
	}
	want := message(filepath.Join(open, "missing"))
	if !strings.Contains(want, "does not exist or "+victim.Name+" may not enter it") {
		t.Errorf("missing directory: %q; want it to say what is wrong", want)
	}
	for _, dir := range []string{
		filepath.Join(locked, "inner"),   // exists, behind a root-only directory
		filepath.Join(locked, "missing"), // does not exist, behind it
		locked,                           // visible, not enterable
		file,                             // not a directory
	} {
		if got := message(dir); got != want {
			t.Errorf("Start in %s: %q; want the same message as a missing directory, %q", dir, got, want)
		}
	}

	// A directory the user can enter works, and the job runs there.
	mine := filepath.Join(victim.Home, "work")
	asUser(t, victim, `mkdir "$1"`, mine)
	out := filepath.Join(mine, "pwd")
	if _, err := l.Start(t.Context(), launch.Spec{Name: "wd-ok", User: victim, Command: []string{"sh", "-c", "pwd > pwd; sleep 30"}, Dir: mine}); err != nil {
		t.Fatalf("Start in the user's own directory: %v", err)
	}
	t.Cleanup(func() { l.Kill(context.Background(), victim, "wd-ok") })
	poll.Until(t, 10*time.Second, "the job to write its directory", func() bool {
		data, err := os.ReadFile(out)
		return err == nil && strings.TrimSpace(string(data)) == mine
	})
}
