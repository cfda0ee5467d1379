package launch

import "testing"

// Exports for the tests in package launch_test, which act as real throwaway
// users from launchtest and so cannot live in package launch (launchtest
// imports launch).
var (
	WorldDir   = worldDir
	WaitClosed = waitClosed
)

// NewTestLauncher is newHarness's Launcher, on a private TMUX_TMPDIR (also
// returned) whose servers are killed at cleanup, with statusDir as
// Options.StatusDir.
func NewTestLauncher(tb testing.TB, statusDir string) (*Launcher, string) {
	tb.Helper()
	h := newHarness(tb)
	h.l = New(Options{TmuxTmpDir: h.tmpDir, StatusDir: statusDir, Logf: safeLogf(tb)})
	return h.l, h.tmpDir
}
