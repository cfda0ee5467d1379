package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestMerge(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-03-09T10:00:00Z"},
	}}
	tests := []struct {
		name    string
		stamped Build
		bi      *debug.BuildInfo
		want    Build
	}{
		{"release stamps win over the toolchain's record",
			Build{Version: "0.2.0", Commit: "feedface", Date: "2026-03-10T16:00:00Z"}, vcs,
			Build{Version: "0.2.0", Commit: "feedface", Date: "2026-03-10T16:00:00Z"}},
		{"a checkout build takes commit and date from VCS",
			Build{}, vcs,
			Build{Version: "devel", Commit: "0123456789abcdef0123", Date: "2026-03-09T10:00:00Z"}},
		{"go install @v0.2.0 takes the module version",
			Build{}, &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}},
			Build{Version: "0.2.0"}},
		{"no build record at all is devel",
			Build{}, nil,
			Build{Version: "devel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Merge(tt.stamped, tt.bi); got != tt.want {
				t.Errorf("Merge = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBuildString(t *testing.T) {
	tests := []struct {
		name string
		b    Build
		want string
	}{
		{"daemon release with NVML",
			Build{Name: "dibsd", Version: "0.2.0", Commit: "0123456789abcdef0123", Date: "2026-03-10T16:00:00Z", Go: "go1.26.8", OS: "linux", Arch: "amd64", Probes: true, NVML: true},
			"dibsd version 0.2.0 (commit 0123456789ab, 2026-03-10T16:00:00Z)\ngo1.26.8 linux/amd64; GPUs through NVML, nvidia-smi as fallback\n"},
		{"daemon built without NVML says so",
			Build{Name: "dibsd", Version: "devel", Go: "go1.26.8", OS: "linux", Arch: "arm64", Probes: true},
			"dibsd version devel\ngo1.26.8 linux/arm64; GPUs through nvidia-smi (built without NVML: cgo and the nvml tag)\n"},
		{"the client reads no GPUs and says nothing of them",
			Build{Name: "dibs", Version: "0.2.0", Commit: "0123456789abcdef0123", Go: "go1.26.8", OS: "linux", Arch: "amd64"},
			"dibs version 0.2.0 (commit 0123456789ab)\ngo1.26.8 linux/amd64\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.String(); got != tt.want {
				t.Errorf("String() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
