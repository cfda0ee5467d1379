package job_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
)

// Container ids as nodeprobe reads them from a process's cgroup.
const ctrA = "3f2a9c1b7d4e"

func TestParseContainerID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{ctrA, ctrA},
		{"  " + ctrA + "\n", ctrA},
		{strings.ToUpper(ctrA), ctrA},
		{ctrA + strings.Repeat("0", 52), ctrA}, // the full id docker run -d prints
		{"3f2a9c1b7d4", ""},                    // too short to be unambiguous
		{ctrA + strings.Repeat("0", 53), ""},   // longer than any id
		{"my-container", ""},                   // a name: the agent cannot ask the runtime
		{"3f2a9c1b7d4g", ""},
		{"", ""},
		{"3f2a9c1b7d4e\x1b[2J", ""},
	} {
		got, err := job.ParseContainerID(tc.in)
		if tc.want == "" {
			if err == nil || refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), "docker ps") {
				t.Errorf("ParseContainerID(%q) = %q, %v; want an invalid-input refusal that says where the id is", tc.in, got, err)
			}
			if err != nil && strings.Contains(err.Error(), "\x1b") {
				t.Errorf("ParseContainerID(%q): the refusal echoes an escape: %q", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseContainerID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
