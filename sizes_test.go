package dibs_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Size limits for non-test code: past them a file or a type has more than
// one job and should be split.
const (
	maxFileLines   = 600
	maxTypeMethods = 30
)

// oversized lists what is over the limits today and waiting for its split,
// by file ("gossip/cluster.go") or type ("gossip.Cluster", the package
// directory then the type). TestSizeLimits fails when one of them is back
// within the limits, so the list only shrinks: never add to it.
func oversized() map[string]bool {
	return map[string]bool{}
}

// sizeReport is what measureSizes found over the limits, by the names
// oversized uses.
type sizeReport map[string]string

// measureSizes reads every non-test Go file below root, whatever its build
// tags, and reports files over maxFileLines lines and types (methods, or an
// interface's method set) over maxTypeMethods methods.
func measureSizes(root string) (sizeReport, error) {
	over := make(sizeReport)
	methods := make(map[string]int)
	fset := token.NewFileSet()
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
			over[rel] = fmt.Sprintf("%s has %d lines (limit %d)", rel, n, maxFileLines)
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv != nil && len(decl.Recv.List) == 1 {
					methods[dir+"."+receiverName(decl.Recv.List[0].Type)]++
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if it, ok := ts.Type.(*ast.InterfaceType); ok {
							methods[dir+"."+ts.Name.Name] += len(it.Methods.List)
						}
					}
				}
			}
		}
		return nil
	})
	for typ, n := range methods {
		if n > maxTypeMethods {
			over[typ] = fmt.Sprintf("type %s has %d methods (limit %d)", typ, n, maxTypeMethods)
		}
	}
	return over, err
}

// receiverName is the type name of a method's receiver: T for t T, *T,
// T[K] or *T[K].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

// TestSizeLimits holds non-test code to files of at most maxFileLines lines
// and types of at most maxTypeMethods methods.
func TestSizeLimits(t *testing.T) {
	over, err := measureSizes(".")
	if err != nil {
		t.Fatal(err)
	}
	known := oversized()
	for _, k := range slices.Sorted(maps.Keys(over)) {
		if !known[k] {
			t.Errorf("%s: split it by job into files or types of its own", over[k])
		} else if testing.Verbose() {
			t.Logf("known, waiting for its split: %s", over[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(known)) {
		if _, still := over[k]; !still {
			t.Errorf("%s is within the size limits now: remove it from oversized in sizes_test.go", k)
		}
	}
}

// TestSizeLimitsCatch makes sure the measurement sees a long file and a
// type with too many methods, spread over two files, and an interface with
// too many methods, and nothing in tests or testdata.
func TestSizeLimitsCatch(t *testing.T) {
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
	var long, a, b, iface strings.Builder
	long.WriteString("package p\n")
	for range maxFileLines {
		long.WriteString("// filler\n")
	}
	a.WriteString("package q\n\ntype T struct{}\n")
	b.WriteString("package q\n")
	iface.WriteString("package q\n\ntype I interface {\n")
	for i := range maxTypeMethods + 1 {
		w := &a
		if i%2 == 1 {
			w = &b
		}
		fmt.Fprintf(w, "func (*T) M%d() {}\n", i)
		fmt.Fprintf(&iface, "\tM%d()\n", i)
	}
	iface.WriteString("}\n")
	write("p/long.go", long.String())
	write("p/long_test.go", long.String())
	write("p/testdata/long.go", long.String())
	write("q/a.go", a.String())
	write("q/b.go", b.String())
	write("q/i.go", iface.String())
	over, err := measureSizes(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p/long.go", "q.I", "q.T"}
	if got := slices.Sorted(maps.Keys(over)); !slices.Equal(got, want) {
		t.Errorf("measureSizes found %q, want %q", got, want)
	}
}
