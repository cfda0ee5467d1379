package gossip

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
)

var updateWire = flag.Bool("update-wire", false, "rewrite testdata/wire/unreleased from this release's encoders")

// wireReleases are the releases whose messages are kept in testdata/wire:
// each was written by that release's own code (testdata/wire/gen). At a
// release, unreleased/ is renamed to the release's version and a new
// unreleased/ made with -update-wire.
var wireReleases = []string{"v0.1.0", "unreleased"}

// TestWireFixtures: this release decodes every kept release's gossip
// messages, and reads in them what that release's own decoder read
// (summary.txt, written by the release that encoded them).
func TestWireFixtures(t *testing.T) {
	if *updateWire {
		writeUnreleased(t)
	}
	for _, rel := range wireReleases {
		t.Run(rel, func(t *testing.T) {
			dir := filepath.Join("testdata/wire", rel)
			sum, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for line := range strings.Lines(string(sum)) {
				name, want, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
				if !ok {
					continue
				}
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				got, err := WireDecode(b)
				if err != nil {
					t.Errorf("%s %s: %v", rel, name, err)
					continue
				}
				if got != want {
					t.Errorf("%s %s reads as\n%s\nwant (as %s read it)\n%s", rel, name, got, rel, want)
				}
				n++
			}
			if n < 8 {
				t.Errorf("%s: %d gossip messages, want one of each of 8 kinds", rel, n)
			}
		})
	}
}

// writeUnreleased writes this release's messages into
// testdata/wire/unreleased: the gossip ones here, the peer ones by the
// generator built in this tree.
func writeUnreleased(t *testing.T) {
	dir := "testdata/wire/unreleased"
	os.RemoveAll(dir)
	writeSamples(t, dir)
	run(t, "", "go", "run", "./testdata/wire/gen", "write", dir)
}

func writeSamples(t *testing.T, dir string) {
	t.Helper()
	gs, err := WireSamples()
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	var sum []string
	for name, b := range gs {
		os.WriteFile(filepath.Join(dir, "gossip-"+name+".bin"), b, 0o644)
		s, err := WireDecode(b)
		if err != nil {
			t.Fatalf("own %s: %v", name, err)
		}
		sum = append(sum, "gossip-"+name+".bin: "+s)
	}
	slices.Sort(sum)
	os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(strings.Join(sum, "\n")+"\n"), 0o644)
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// firstRelease is v0.1.0's commit (tags may not travel with a clone).
const firstRelease = "e4e3039"

// TestFirstReleaseDecodesThisRelease runs v0.1.0's own decoders, built
// from git history, on what this release sends a v0.1.0 agent: every
// gossip message, every peer request in protocol 6 and every reply to a
// protocol-6 caller. v0.1.0 decodes strictly, so a field it does not know
// would be refused here.
func TestFirstReleaseDecodesThisRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds v0.1.0 from git history")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		prereq.Missing(t, "not in a git clone (%v): cannot build v0.1.0 from history", err)
	}
	repo := strings.TrimSpace(string(top))
	if exec.Command("git", "-C", repo, "cat-file", "-e", firstRelease+"^{commit}").Run() != nil {
		prereq.Missing(t, "commit %s (v0.1.0) is not in this clone (a shallow clone?): fetch the history to run this test", firstRelease)
	}
	src := t.TempDir()
	run(t, "", "sh", "-c", "git -C "+repo+" archive "+firstRelease+" | tar -x -C "+src)
	os.MkdirAll(filepath.Join(src, "cmd/wiregen"), 0o755)
	for _, f := range []string{"main.go", "gossip_glue.go", "gossip_none.go", "place_v010.go", "place_now.go"} {
		b, _ := os.ReadFile(filepath.Join("testdata/wire/gen", f))
		os.WriteFile(filepath.Join(src, "cmd/wiregen", f), b, 0o644)
	}
	// The samples this release's tests encode, in v0.1.0's package as
	// an ordinary file: both releases encode the same messages.
	b, err := os.ReadFile("wire_samples_test.go")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "gossip/zz_wire.go"), b, 0o644)
	old := filepath.Join(t.TempDir(), "wiregen-v0.1.0")
	// -trimpath keeps the build cache's entries independent of the
	// temporary directory, so a second run compiles only what changed.
	build := exec.Command("go", "build", "-trimpath", "-tags", "wiregen_gossip,wiregen_v010", "-o", old, "./cmd/wiregen")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		for _, offline := range []string{"module lookup disabled", "missing go.sum entry", "dial tcp", "no required module provides"} {
			if strings.Contains(string(out), offline) {
				prereq.Missing(t, "cannot build v0.1.0 here: its modules are not in the module cache and cannot be fetched:\n%s", out)
			}
		}
		t.Fatalf("build v0.1.0's decoders: %v\n%s", err, out)
	}

	mine := t.TempDir()
	writeSamples(t, mine)
	run(t, "", "go", "run", "./testdata/wire/gen", "write", mine)
	files, _ := filepath.Glob(filepath.Join(mine, "*-*"))
	if len(files) < 28 {
		t.Fatalf("%d messages written, want 8 gossip and 20 peer", len(files))
	}
	cmd := exec.Command(old, append([]string{"check"}, files...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("v0.1.0's decoders refuse this release's messages: %v\n%s", err, out)
	}
	t.Logf("v0.1.0 read:\n%s", out)
}
