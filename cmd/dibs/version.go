package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Stamped at release time by the linker (see .goreleaser.yaml):
//
//	-X main.version=0.2.0 -X main.commit=<sha> -X main.date=<RFC 3339>
//
// They are package-level only because -X can set nothing else; nothing writes
// them at run time. A plain `go build` leaves them empty and buildInfo falls
// back to what the Go toolchain recorded.
var (
	version string
	commit  string
	date    string
)

// build describes this binary for `dibs version`, `dibs --version` and the
// man pages, so an operator can tell which release runs on which node.
type build struct {
	Version string // "0.2.0", or "devel" for a build from a checkout
	Commit  string // full commit hash, or "" when unknown
	Date    string // commit date (RFC 3339), or "" when unknown
	Go      string // the Go toolchain, e.g. go1.26.8
	OS      string // runtime.GOOS
	Arch    string // runtime.GOARCH
	NVML    bool   // built with cgo on Linux, so the agent can use NVML
}

// buildInfo merges the linker stamps with the toolchain's own record (module
// version for `go install …@v0.2.0`, VCS revision for a build in a checkout).
func buildInfo() build {
	var bi *debug.BuildInfo
	if version == "" || commit == "" || date == "" { // a release binary skips the parse
		bi, _ = debug.ReadBuildInfo()
	}
	return mergeBuild(build{Version: version, Commit: commit, Date: date, Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, NVML: nvmlBuilt}, bi)
}

// mergeBuild fills what the linker left empty in stamped from bi (nil when
// the binary carries no build record), and names an unversioned build
// "devel".
func mergeBuild(stamped build, bi *debug.BuildInfo) build {
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

// String is the text `dibs version` prints: the release on the first line,
// what the binary can do on the second.
func (b build) String() string {
	return "dibs version " + b.release() + "\n"
}

// release is String without the "dibs version " cobra puts before the
// command's Version and the newline it puts after: set as the root command's
// Version, `dibs --version` prints exactly what `dibs version` does, through
// cobra's plain default, not a text/template (which would cost 4 MB of binary).
func (b build) release() string {
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
	probe := "GPUs through NVML, nvidia-smi as fallback"
	if !b.NVML {
		probe = "GPUs through nvidia-smi (built without cgo: no NVML)"
	}
	fmt.Fprintf(&s, "\n%s %s/%s; %s", b.Go, b.OS, b.Arch, probe)
	return s.String()
}

// shortCommit keeps the 12 characters people paste into `git show`.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func versionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release, commit and build of this dibs binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(c.stdout, buildInfo())
			return err
		},
	}
}
