//go:build linux

package launch_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestStatusDirIsCappedPerUser (issue 20, weak 2): a user tries to fill the
// filesystem the exit statuses live on (/run, in production) by writing
// into their own status directory. What they can write there is capped at
// their own quota, the filesystem under the status directory does not
// grow, and another user's exit status is still recorded and read.
func TestStatusDirIsCappedPerUser(t *testing.T) {
	mallory, alice := launchtest.User(t), launchtest.User(t)
	sdir := statusRoot(t)
	l, _ := launch.NewTestLauncher(t, sdir)
	runSession(t, l, mallory, "first", "true") // makes her directory
	l.ExitStatus(mallory, "first")

	var before syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(sdir), &before); err != nil {
		t.Fatal(err)
	}
	const tried = 64 << 20
	fill := filepath.Join(sdir, strconv.Itoa(mallory.UID), "fill")
	launchtest.Run(t, mallory, nil, "/bin/sh", "-c", `head -c `+strconv.Itoa(tried)+` /dev/zero > "$0"`, fill)
	var got int64
	if fi, err := os.Stat(fill); err == nil {
		got = fi.Size()
	}
	t.Logf("mallory wrote %d of the %d bytes she tried into her status directory", got, tried)
	if got > launch.DefaultStatusQuota {
		t.Errorf("mallory wrote %d bytes into her status directory; want at most her quota of %d", got, launch.DefaultStatusQuota)
	}
	var after syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(sdir), &after); err != nil {
		t.Fatal(err)
	}
	if grew := (int64(before.Bfree) - int64(after.Bfree)) * int64(after.Bsize); grew > 8<<20 {
		t.Errorf("the filesystem holding the status directory lost %d bytes to mallory's writes", grew)
	}

	runSession(t, l, alice, "job", "sh", "-c", "exit 3")
	if code, ok, err := l.ExitStatus(alice, "job"); code != 3 || !ok || err != nil {
		t.Errorf("alice's exit status with mallory's space full: %d, %v, %v; want 3, true, nil", code, ok, err)
	}
}
