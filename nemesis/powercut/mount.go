package powercut

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
)

// Mount mounts a power-cut file system in a temporary directory for tb and
// unmounts it when tb ends. It needs root and /dev/fuse (root mounts with
// mount(2), so no fusermount is needed): without them tb skips, or fails
// under CI=true (base/prereq).
func Mount(tb testing.TB, opts Options) *FS {
	tb.Helper()
	prereq.Root(tb, "mounts a FUSE file system that drops unsynced writes (nemesis/powercut)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		prereq.Missing(tb, "needs /dev/fuse to mount the power-cut file system: load the fuse module (modprobe fuse)")
	}
	dir := tb.TempDir()
	backing, durable, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "durable"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, durable, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	p, err := New(backing, durable, mnt, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("unmount the power-cut file system: %v", err)
		}
	})
	return p
}
