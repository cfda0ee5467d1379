package launch

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps holds launch to its room in DESIGN.md: processes and tmux, on the
// standard library alone (golang.org/x/sys allowed), so nothing above can drag
// memberlist, charm or NVML into the code that starts people's jobs.
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH; cannot list dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/dibs-gpu/dibs/launch" || strings.HasPrefix(pkg, "golang.org/x/sys/") {
			continue
		}
		t.Errorf("launch imports %s; it may use only the standard library and golang.org/x/sys", pkg)
	}
}
