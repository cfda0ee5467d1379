// Package buildinfo says which release a dibs binary is: the linker's stamps
// for a release, else what the Go toolchain recorded. Both binaries (dibs,
// the client, and dibsd, the daemon) print it, so an operator can tell which
// release runs on which node; it lives apart from both so the client links
// nothing of the daemon's to say it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped at release time by the linker (see .goreleaser.yaml):
//
//	-X github.com/dibs-gpu/dibs/base/buildinfo.version=0.2.0
//	-X github.com/dibs-gpu/dibs/base/buildinfo.commit=<sha>
//	-X github.com/dibs-gpu/dibs/base/buildinfo.date=<RFC 3339>
//
// They are package-level only because -X can set nothing else; nothing writes
// them at run time. A plain `go build` leaves them empty and Read falls back
// to what the Go toolchain recorded.
var (
	version string
	commit  string
	date    string
)

// Build describes one binary for `dibs version`, `dibsd version`, their
// --version and the man pages.
type Build struct {
	Name    string // the binary: "dibs" or "dibsd"
	Version string // "0.2.0", or "devel" for a build from a checkout
	Commit  string // full commit hash, or "" when unknown
	Date    string // commit date (RFC 3339), or "" when unknown
	Go      string // the Go toolchain, e.g. go1.26.8
	OS      string // runtime.GOOS
	Arch    string // runtime.GOARCH
	// Probes is true for the daemon, which reads the GPUs; its line then
	// says through what (NVML says which).
	Probes bool
	NVML   bool // built with NVML (cgo on Linux and the nvml tag)
}

// Read merges the linker stamps with the toolchain's own record (module
// version for `go install …@v0.2.0`, VCS revision for a build in a
// checkout) for the binary name.
func Read(name string) Build {
	var bi *debug.BuildInfo
	if version == "" || commit == "" || date == "" { // a release binary skips the parse
		bi, _ = debug.ReadBuildInfo()
	}
	return Merge(Build{Name: name, Version: version, Commit: commit, Date: date, Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH}, bi)
}

// Merge fills what the linker left empty in stamped from bi (nil when the
// binary carries no build record), and names an unversioned build "devel".
func Merge(stamped Build, bi *debug.BuildInfo) Build {
	b := stamped
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.Date == "":
				b.Date = s.Value
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// String is the text `NAME version` prints: the release on the first line,
// the toolchain (and, for the daemon, how it reads GPUs) on the second.
func (b Build) String() string {
	return b.Name + " version " + b.Release() + "\n"
}

// Release is String without the "NAME version " cobra puts before the
// command's Version and the newline it puts after: set as the root command's
// Version, `dibs --version` prints exactly what `dibs version` does, through
// cobra's plain default, not a text/template (which would cost 4 MB of
// binary).
func (b Build) Release() string {
	var s strings.Builder
	s.WriteString(b.Version)
	var meta []string
	if b.Commit != "" {
		meta = append(meta, "commit "+shortCommit(b.Commit))
	}
	if b.Date != "" {
		meta = append(meta, b.Date)
	}
	if len(meta) > 0 {
		fmt.Fprintf(&s, " (%s)", strings.Join(meta, ", "))
	}
	fmt.Fprintf(&s, "\n%s %s/%s", b.Go, b.OS, b.Arch)
	switch {
	case !b.Probes:
	case b.NVML:
		s.WriteString("; GPUs through NVML, nvidia-smi as fallback")
	default:
		s.WriteString("; GPUs through nvidia-smi (built without NVML: cgo and the nvml tag)")
	}
	return s.String()
}

// shortCommit keeps the 12 characters people paste into `git show`.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
