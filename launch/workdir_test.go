//go:build linux

package launch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
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

// TestWorkingDirCheckKeepsTheAgentAsItWas: the check takes the user's
// identity on a thread of its own; the agent's working directory and every
// thread it goes on with stay root's, and the check answers as the user
// would with the user's groups, the same as a process of theirs.
func TestWorkingDirCheckKeepsTheAgentAsItWas(t *testing.T) {
	group := launchtest.Group(t)
	member := launchtest.User(t, group) // skips unless root
	outsider := launchtest.User(t)
	l, _ := launch.NewTestLauncher(t, "")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	capEff := func(status string) string {
		for _, line := range strings.Split(status, "\n") {
			if k, v, _ := strings.Cut(line, ":"); k == "CapEff" {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	rootCaps := capEff(string(status))
	base := launch.WorldDir(t)
	shared := filepath.Join(base, "shared") // root:group 0750
	mkdir(t, shared, 0o750)
	if out, err := exec.Command("chgrp", group, shared).CombinedOutput(); err != nil {
		t.Fatalf("chgrp: %v: %s", err, out)
	}
	locked := filepath.Join(base, "locked") // root's 0700
	mkdir(t, locked, 0o700)
	inner := filepath.Join(locked, "inner") // 0755, behind it
	mkdir(t, inner, 0o755)
	// A process of root's working in inner: /proc/PID/cwd leads there past
	// locked, for whoever may look into root's processes (root, by its
	// capabilities), and for nobody else.
	sleeper := exec.Command("sleep", "60")
	sleeper.Dir = inner
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	throughProc := fmt.Sprintf("/proc/%d/cwd", sleeper.Process.Pid)

	cases := []struct {
		who   launch.User
		dir   string
		enter bool
	}{
		{member, shared, true},
		{outsider, shared, false},
		{member, locked, false},
		{member, filepath.Join(base, "missing"), false},
		{outsider, base, true},
		{outsider, throughProc, false},
		{member, throughProc + "/", false},
	}
	var wg sync.WaitGroup
	for round := 0; round < 20; round++ { // many threads, at once
		for _, c := range cases {
			wg.Go(func() {
				thread, child := l.CheckDirBoth(t, c.who, c.dir)
				if (thread == nil) != c.enter || (child == nil) != c.enter {
					t.Errorf("%s entering %s: on a thread %v, in a process %v; want entered=%v", c.who.Name, c.dir, thread, child, c.enter)
				}
			})
		}
	}
	wg.Wait()
	if now, err := os.Getwd(); err != nil || now != wd {
		t.Errorf("the agent's working directory is %q (%v) after the checks; want %q", now, err, wd)
	}
	// Every thread of the process is root's again, groups and
	// capabilities and all: the file-system ids went back (or the thread
	// went with its goroutine).
	poll.Until(t, 5*time.Second, "every thread of the process to be root's", func() bool {
		tasks, _ := filepath.Glob("/proc/self/task/*/status")
		for _, f := range tasks {
			data, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended while we looked
			}
			for _, line := range strings.Split(string(data), "\n") {
				k, v, _ := strings.Cut(line, ":")
				if (k == "Uid" || k == "Gid") && strings.Join(strings.Fields(v), " ") != "0 0 0 0" ||
					k == "Groups" && strings.Contains(" "+v+" ", " "+strconv.Itoa(member.GID)+" ") ||
					k == "CapEff" && strings.TrimSpace(v) != rootCaps {
					t.Logf("%s: %s", f, line)
					return false
				}
			}
		}
		return true
	})
	// And the agent still acts as root: it reads what only root may.
	if _, err := os.ReadDir(locked); err != nil {
		t.Errorf("the agent cannot read its own 0700 directory after the checks: %v", err)
	}
}
