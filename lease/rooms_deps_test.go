package lease_test

import (
	"slices"
	"testing"
)

// The rooms nested under lease are pure too: the replay's only clock is
// its simulated time, the export and the doctor's arithmetic write text and
// numbers, never files.
func TestPureSubpackageDeps(t *testing.T) {
	for _, pkg := range []string{
		"github.com/dibs-gpu/dibs/lease/replay",
		"github.com/dibs-gpu/dibs/lease/slurm",
		"github.com/dibs-gpu/dibs/lease/doctor",
	} {
		t.Run(pkg, func(t *testing.T) {
			g := depGraph(t, pkg)
			for _, imp := range g[pkg] {
				if slices.Contains([]string{"os", "os/exec", "os/signal", "syscall", "net", "io/fs", "log", "path/filepath", "go.etcd.io/bbolt", "github.com/dibs-gpu/dibs/lease/store"}, imp) {
					t.Errorf("%s imports %s: it must not do I/O", pkg, imp)
				}
			}
			checkDeps(t, g, pkg)
		})
	}
}
