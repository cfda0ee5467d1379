package dibs_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFileLines is where a non-test file is long enough to ask whether it
// holds more than one job. It is a smell to look at, not a target: a file
// is split because its parts do different jobs, never to get under this
// number. There is no cap on a type's methods (memberlist keeps 91 on
// Memberlist in four topic files and reads well): cohesion is the rule, and
// methods live on their real types in files named by job.
const maxFileLines = 1000

// measureSizes reads every non-test Go file below root, whatever its build
// tags, and reports the files over maxFileLines lines.
func measureSizes(root string) (map[string]string, error) {
	over := make(map[string]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
			over[rel] = fmt.Sprintf("%s has %d lines (a smell past %d)", rel, n, maxFileLines)
		}
		return nil
	})
	return over, err
}

// TestFileSizes flags a non-test file past maxFileLines: look at whether it
// holds two jobs, and split it by job if it does.
func TestFileSizes(t *testing.T) {
	over, err := measureSizes(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(over)) {
		t.Errorf("%s: does it hold more than one job? split it by job into files of its own", over[k])
	}
}

// TestFileSizesCatch makes sure the measurement sees a long file and
// nothing in tests or testdata.
func TestFileSizesCatch(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := "package p\n" + strings.Repeat("// filler\n", maxFileLines)
	write("p/long.go", long)
	write("p/short.go", "package p\n")
	write("p/long_test.go", long)
	write("p/testdata/long.go", long)
	over, err := measureSizes(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(over)), []string{"p/long.go"}; !slices.Equal(got, want) {
		t.Errorf("measureSizes found %q, want %q", got, want)
	}
}
