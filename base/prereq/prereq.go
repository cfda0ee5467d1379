// Package prereq is how a test says it lacks something it needs from the
// machine (root, a tool, a package, a built .deb): a skip on a developer's
// machine, where the test cannot run, but a failure under CI, whose .ci/run
// provides every such thing. So a test CI ought to run never passes there by
// skipping, as TestInstallByTheGuide once did without its package.
package prereq

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CIEnv is the environment variable that says the tests run under CI; CI
// services set it to "true", and so does .ci/run.
const CIEnv = "CI"

// CI reports whether the tests run under CI (CI=true): there, what .ci/run
// provides must be there.
func CI() bool { return os.Getenv(CIEnv) == "true" }

// Missing ends tb for a prerequisite it lacks: a skip, or a failure under
// CI. The message says what is missing and how to get it.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("%s (%s=true: .ci/run provides this, so its absence is a failure, not a skip)", msg, CIEnv)
	} else {
		tb.Skip(msg)
	}
}

// Root ends tb (Missing) unless it runs as root; why says what the test
// does as root.
func Root(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missing(tb, "needs root: %s", why)
	}
}

// Command ends tb (Missing) unless name is on PATH; get says how to
// install it.
func Command(tb testing.TB, name, get string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		Missing(tb, "needs %s: %s", name, get)
	}
}
