package lease_test

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The rules must stay pure: no gossip, no NVML, no terminals, no SSH, no HTTP,
// no processes. These are matched as import-path prefixes.
var forbidden = []string{
	"github.com/hashicorp/memberlist",
	"github.com/NVIDIA/go-nvml",
	"charm.land/",
	"github.com/charmbracelet/",
	"golang.org/x/crypto/ssh",
	"net/http",
	"os/exec",
}

// nodeprobe is allowed below lease (DESIGN.md), but today it is one package
// holding both the snapshot types and the NVML and nvidia-smi backends, so it
// drags these into every importer of lease. They are tolerated only on paths
// through nodeprobe; splitting the types into an I/O-free package would let
// this list go.
var viaNodeprobe = []string{"github.com/NVIDIA/go-nvml", "os/exec"}

const nodeprobePkg = "github.com/dibs-gpu/dibs/nodeprobe"

func TestLeaseDeps(t *testing.T) {
	const pkg = "github.com/dibs-gpu/dibs/lease"
	g := depGraph(t, pkg)
	// The package itself does no I/O: none of these among its own imports.
	for _, imp := range g[pkg] {
		if slices.Contains([]string{"os", "os/exec", "os/signal", "syscall", "net", "io/fs", "log", "path/filepath", "go.etcd.io/bbolt"}, imp) {
			t.Errorf("lease imports %s: the rules must not do I/O; put it in agent/ or lease/store", imp)
		}
	}
	checkDeps(t, g, pkg)
}

func TestStoreDeps(t *testing.T) {
	checkDeps(t, depGraph(t, "github.com/dibs-gpu/dibs/lease/store"), "github.com/dibs-gpu/dibs/lease/store")
}

// checkDeps fails for every forbidden package reachable from root, naming the
// import chain. A package in viaNodeprobe is tolerated only when every path to
// it runs through nodeprobe.
func checkDeps(t testing.TB, g map[string][]string, root string) {
	t.Helper()
	isForbidden := func(dep string, list []string) bool {
		return slices.ContainsFunc(list, func(f string) bool { return matches(dep, f) })
	}
	all, direct := reach(g, root, ""), reach(g, root, nodeprobePkg)
	for _, dep := range slices.Sorted(maps.Keys(all)) {
		switch {
		case !isForbidden(dep, forbidden):
		case direct[dep] != "" || dep == root:
			t.Errorf("forbidden dependency: %s", chain(direct, dep))
		case isForbidden(dep, viaNodeprobe):
			t.Logf("known: %s (nodeprobe mixes its types with its backends)", chain(all, dep))
		default:
			t.Errorf("forbidden dependency: %s", chain(all, dep))
		}
	}
}

// reach walks the graph breadth-first from root without entering skip and
// returns each reached package's parent on a shortest path.
func reach(g map[string][]string, root, skip string) map[string]string {
	parent := map[string]string{root: ""}
	for queue := []string{root}; len(queue) > 0; queue = queue[1:] {
		for _, q := range g[queue[0]] {
			if _, seen := parent[q]; !seen && q != skip {
				parent[q] = queue[0]
				queue = append(queue, q)
			}
		}
	}
	return parent
}

func chain(parent map[string]string, dep string) string {
	c := []string{dep}
	for p := parent[dep]; p != ""; p = parent[p] {
		c = append([]string{p}, c...)
	}
	return strings.Join(c, " -> ")
}

func matches(path, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// depGraph maps every package in pkg's build to its direct imports, for the
// current GOOS/GOARCH and cgo setting, as `go build` sees them.
func depGraph(t *testing.T, pkg string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	g := make(map[string][]string)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		g[f[0]] = f[1:]
	}
	if _, ok := g[pkg]; !ok {
		t.Fatalf("go list -deps %s did not list the package itself", pkg)
	}
	return g
}

// errRecorder counts the failures checkDeps reports, for testing the check itself.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckDepsCatches makes sure the check fails when it should: a graph in
// which the rules reach net/http directly, and os/exec through something
// other than nodeprobe.
func TestCheckDepsCatches(t *testing.T) {
	g := map[string][]string{
		"lease":      {"fmt", nodeprobePkg, "lease/util"},
		nodeprobePkg: {"os/exec", "github.com/NVIDIA/go-nvml/pkg/nvml"},
		"lease/util": {"net/http", "os/exec"},
		"net/http":   {"os"},
	}
	r := &errRecorder{TB: t}
	checkDeps(r, g, "lease")
	want := []string{
		"forbidden dependency: lease -> lease/util -> net/http",
		"forbidden dependency: lease -> lease/util -> os/exec",
	}
	if !slices.Equal(r.errs, want) {
		t.Errorf("checkDeps reported\n%s\nwant\n%s", strings.Join(r.errs, "\n"), strings.Join(want, "\n"))
	}
}
