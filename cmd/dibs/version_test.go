package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestVersionCommand runs both binaries as a person would: `dibs version`
// and `dibs --version` print the same two lines (release, toolchain), and
// need no agent; `dibsd version` and its --version add how the daemon reads
// GPUs.
func TestVersionCommand(t *testing.T) {
	for _, bin := range []struct{ path, name, line2 string }{
		{dibsBin, "dibs", ""},
		{dibsdBin, "dibsd", "; GPUs through "},
	} {
		out := map[string]string{}
		for _, arg := range []string{"version", "--version"} {
			cmd := exec.Command(bin.path, arg)
			cmd.Env = append(cmd.Environ(), "DIBS_SOCKET=/nonexistent/dibs.sock")
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", bin.name, arg, err, b)
			}
			out[arg] = string(b)
		}
		if out["version"] != out["--version"] {
			t.Errorf("%s version and %s --version differ:\n%q\n%q", bin.name, bin.name, out["version"], out["--version"])
		}
		lines := strings.Split(strings.TrimSuffix(out["version"], "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], bin.name+" version ") || !strings.HasPrefix(lines[1], "go") ||
			strings.Contains(lines[1], "GPUs") != (bin.line2 != "") || !strings.Contains(lines[1], bin.line2) {
			t.Errorf("%s version printed %q, want two lines: release, then toolchain%s", bin.name, out["version"], bin.line2)
		}
	}
}

// TestNoReflectiveMethodLookup guards the binary's size and start-up: once
// anything reachable calls text/template's method calls (e.g. through
// cobra's Set*Template), the linker must keep every exported method of every
// type, which made dibs 4 MB larger when --version used a template.
//
// reflect.Value.MethodByName itself is linked since /metrics uses
// prometheus/client_golang, whose protobuf dependency formats descriptors
// with it (google.golang.org/protobuf/internal/descfmt); the issue asks for
// client_golang, so only the template path is forbidden.
func TestNoReflectiveMethodLookup(t *testing.T) {
	out, err := exec.Command("go", "tool", "nm", dibsBin).Output()
	if err != nil {
		t.Skipf("go tool nm %s: %v", dibsBin, err)
	}
	for _, sym := range []string{"text/template.(*state).evalCall"} {
		if strings.Contains(string(out), " "+sym+"\n") {
			t.Errorf("dibs links %s: find what calls it (go build -ldflags=-dumpdep ./cmd/dibs) and avoid it", sym)
		}
	}
}
