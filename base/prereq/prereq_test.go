package prereq

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test was ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = args[0].(string) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

// TestMissingFailsUnderCI: without CI a missing prerequisite skips; with
// CI=true it fails, naming what is missing.
func TestMissingFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci         string
		skip, fail bool
	}{{"", true, false}, {"false", true, false}, {"true", false, true}} {
		t.Setenv(CIEnv, tc.ci)
		r := &recorder{TB: t}
		Missing(r, "needs %s", "tmux")
		if got := r.skipped != ""; got != tc.skip {
			t.Errorf("CI=%q: skipped %v, want %v", tc.ci, got, tc.skip)
		}
		if got := r.failed != ""; got != tc.fail {
			t.Errorf("CI=%q: failed %v, want %v", tc.ci, got, tc.fail)
		}
		if tc.skip && r.skipped != "needs tmux" {
			t.Errorf("CI=%q: skip says %q, want %q", tc.ci, r.skipped, "needs tmux")
		}
		if tc.fail && !strings.Contains(r.failed, ".ci/run provides this") {
			t.Errorf("CI=%q: failure says %q", tc.ci, r.failed)
		}
	}
}
