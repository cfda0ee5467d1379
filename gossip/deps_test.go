package gossip

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports holds the floor plan of DESIGN.md: gossip imports only the
// standard library, memberlist, lease (with its leaf termsafe) and nodeprobe.
func TestImports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/hashicorp/memberlist":         true,
		"github.com/dibs-gpu/dibs/lease":          true,
		"github.com/dibs-gpu/dibs/lease/termsafe": true,
		"github.com/dibs-gpu/dibs/nodeprobe":      true,
	}
	for _, imp := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(imp, "/")
		stdlib := !strings.Contains(first, ".")
		if !stdlib && !allowed[imp] {
			t.Errorf("gossip imports %s; it may import only the standard library, memberlist, lease and nodeprobe", imp)
		}
	}
}
