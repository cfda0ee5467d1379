package main

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func TestMergeBuild(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-03-09T10:00:00Z"},
	}}
	tests := []struct {
		name    string
		stamped build
		bi      *debug.BuildInfo
		want    build
	}{
		{"release stamps win over the toolchain's record",
			build{Version: "0.2.0", Commit: "feedface", Date: "2026-03-10T16:00:00Z"}, vcs,
			build{Version: "0.2.0", Commit: "feedface", Date: "2026-03-10T16:00:00Z"}},
		{"a checkout build takes commit and date from VCS",
			build{}, vcs,
			build{Version: "devel", Commit: "0123456789abcdef0123", Date: "2026-03-09T10:00:00Z"}},
		{"go install @v0.2.0 takes the module version",
			build{}, &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}},
			build{Version: "0.2.0"}},
		{"no build record at all is devel",
			build{}, nil,
			build{Version: "devel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeBuild(tt.stamped, tt.bi); got != tt.want {
				t.Errorf("mergeBuild = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBuildString(t *testing.T) {
	tests := []struct {
		name string
		b    build
		want string
	}{
		{"release with NVML",
			build{Version: "0.2.0", Commit: "0123456789abcdef0123", Date: "2026-03-10T16:00:00Z", Go: "go1.26.8", OS: "linux", Arch: "amd64", NVML: true},
			"dibs version 0.2.0 (commit 0123456789ab, 2026-03-10T16:00:00Z)\ngo1.26.8 linux/amd64; GPUs through NVML, nvidia-smi as fallback\n"},
		{"build without cgo says it has no NVML",
			build{Version: "devel", Go: "go1.26.8", OS: "linux", Arch: "arm64"},
			"dibs version devel\ngo1.26.8 linux/arm64; GPUs through nvidia-smi (built without cgo: no NVML)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.String(); got != tt.want {
				t.Errorf("String() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestVersionCommand runs the binary as a person would: `dibs version` and
// `dibs --version` print the same two lines, and `version` needs no agent.
func TestVersionCommand(t *testing.T) {
	out := map[string]string{}
	for _, arg := range []string{"version", "--version"} {
		cmd := exec.Command(dibsBin, arg)
		cmd.Env = append(cmd.Environ(), "DIBS_SOCKET=/nonexistent/dibs.sock")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dibs %s: %v\n%s", arg, err, b)
		}
		out[arg] = string(b)
	}
	if out["version"] != out["--version"] {
		t.Errorf("dibs version and dibs --version differ:\n%q\n%q", out["version"], out["--version"])
	}
	lines := strings.Split(strings.TrimSuffix(out["version"], "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "dibs version ") || !strings.Contains(lines[1], "GPUs through") {
		t.Errorf("dibs version printed %q, want two lines: release, then toolchain and GPU backend", out["version"])
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
