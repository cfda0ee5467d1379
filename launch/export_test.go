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

// CheckDirBoth is the working-directory check as u, made both ways: on a
// thread of its own and in a child process. The two must agree.
func (l *Launcher) CheckDirBoth(tb testing.TB, u User, dir string) (thread, child error) {
	tb.Helper()
	cred, err := credentialFor(l.euid, u)
	if err != nil {
		tb.Fatal(err)
	}
	thread, asked := enterOnThread(tb.Context(), u, dir, func() {})
	if !asked {
		tb.Skipf("no per-thread check on this platform: %v", thread)
	}
	return thread, l.enterInChild(tb.Context(), u, cred, dir)
}
