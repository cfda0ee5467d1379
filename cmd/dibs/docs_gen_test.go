//go:build gendocs

package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
)

// TestGenDocs checks what a package ships: one man page per visible command
// (none for the hidden generator), stamped with the release and the given
// date, and completion scripts for bash, zsh and fish. Run it with
// `go test -tags gendocs -run TestGenDocs ./cmd/dibs`.
func TestGenDocs(t *testing.T) {
	dir := t.TempDir()
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	when := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	if err := genDocs(rootCmd(c), daemoncmd.Root(io.Discard, io.Discard), dir, "9.8.7", when); err != nil {
		t.Fatal(err)
	}
	page := func(name string) string {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, "man", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !zr.ModTime.IsZero() || zr.Name != "" {
			t.Errorf("%s: gzip header carries time %v / name %q; packages would not repeat", name, zr.ModTime, zr.Name)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	root := page("dibs.1.gz")
	for _, want := range []string{`.TH "DIBS" "1" "Mar 2026" "dibs 9.8.7" "dibs manual"`, `\fBdibs-claim(1)\fP`} {
		if !strings.Contains(root, want) {
			t.Errorf("dibs.1 lacks %q:\n%s", want, root)
		}
	}
	if agent := page("dibs-agent.1.gz"); !strings.Contains(agent, `\fB--cluster-key-file\fP`) {
		t.Errorf("dibs-agent.1 does not document --cluster-key-file:\n%s", agent)
	}
	for _, name := range []string{"dibs-config-check.1.gz", "dibs-version.1.gz", "dibs-run.1.gz", "dibsd.1.gz", "dibsd-version.1.gz"} {
		page(name)
	}
	// dibsd's pages: the unit runs dibsd agent, and `man dibsd-agent`
	// documents the same flags as `man dibs-agent`.
	if agent := page("dibsd-agent.1.gz"); !strings.Contains(agent, `\fB--cluster-key-file\fP`) {
		t.Errorf("dibsd-agent.1 does not document --cluster-key-file:\n%s", agent)
	}
	if _, err := os.Stat(filepath.Join(dir, "man", "dibsd-_pipe-log.1.gz")); err == nil {
		t.Error("dibsd's hidden _pipe-log got a man page")
	}
	if _, err := os.Stat(filepath.Join(dir, "man", "dibs-gen-docs.1.gz")); err == nil {
		t.Error("the hidden gen-docs command got a man page")
	}
	// man dibs-claim (issue 30): no DESCRIPTION that repeats the NAME
	// line, no cobra raw defaults (--for="", --force[=false], --gpus=0),
	// and what a person asks the page: -g against --ids, eval, the
	// output, the exit status.
	claim := page("dibs-claim.1.gz")
	if strings.Count(claim, "Claim GPUs (an advisory lease with a time limit)") != 1 {
		t.Errorf("dibs-claim.1 repeats its title:\n%s", claim)
	}
	for _, raw := range []string{`=""`, `[=false]`, `=0\n`, `=[]`, `=0s`} {
		if strings.Contains(claim, raw) {
			t.Errorf("dibs-claim.1 shows cobra's raw default %q:\n%s", raw, claim)
		}
	}
	for _, want := range []string{"--ids 0,2", `eval "$(dibs claim -g 1)"`, "Output:", "Exit status:", "124", `(default interactive)`} {
		if !strings.Contains(claim, want) {
			t.Errorf("dibs-claim.1 lacks %q:\n%s", want, claim)
		}
	}
	// PowerShell completion is neither shipped nor documented: no page.
	if _, err := os.Stat(filepath.Join(dir, "man", "dibs-completion-powershell.1.gz")); err == nil {
		t.Error("dibs completion powershell got a man page: the package ships no PowerShell completion")
	}
	if strings.Contains(page("dibs-completion.1.gz"), "powershell") {
		t.Error("man dibs-completion names powershell")
	}
	for file, want := range map[string]string{"dibs.bash": "__start_dibs", "_dibs": "#compdef dibs", "dibs.fish": "complete -c dibs"} {
		b, err := os.ReadFile(filepath.Join(dir, "completions", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("completions/%s lacks %q", file, want)
		}
	}
}
