package dibs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestArchitectureNamesExist holds docs/architecture.md to the code: every
// name it puts in backticks that reads as Go must be declared in the
// module, so a renamed function, a folded type or a moved package shows up
// here instead of misleading the next reader. The code is read with
// go/parser (every .go file of the module), never from a list, so
// the test follows the packages as they move.
//
// The rule, exactly. Fenced code blocks are skipped; every other `span` is
// trimmed, a trailing "()" dropped and "(*T).M" read as "T.M". Then:
//
//   - A dotted name (A.B or A.B.C, each part a Go identifier) is checked.
//     When A is a package of the module, B must be declared at its top
//     level and C, if any, must be a method or field of a type named B.
//     When A is a type of the module, B must be one of its methods or
//     fields (C, if any, any name the module declares). When A is the name
//     of a package the module imports (time, memberlist, tea…), the name is
//     not the module's and is not checked. Anything else fails: the doc
//     names a package or type that does not exist (any longer).
//   - A single word is checked when it reads as a Go name and not as a
//     word, a command or an environment variable: it mixes upper- and
//     lower-case letters (Publish, LocalState, notifyLoop). It must be
//     declared somewhere in the module (a type, function, method, field,
//     constant or variable) or be a package name.
//   - Anything else (flags, paths, file names such as x.go or y.json,
//     commands, JSON, lower-case words, ALL CAPS) is prose and not checked.
//
// So a name of another module is written qualified (`memberlist.Config`,
// `http.Server.ConnContext`), and a method as Type.Method, never as a
// variable's (`o.mu` is `Origin.mu`).
func TestArchitectureNamesExist(t *testing.T) {
	idx := indexModule(t)
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	names := backticked(string(doc))
	checked := 0
	for _, n := range names {
		ok, counts, why := idx.resolve(n)
		if !counts {
			continue
		}
		checked++
		if !ok {
			t.Errorf("docs/architecture.md names `%s`, which the code does not declare: %s", n, why)
		}
	}
	if checked < 100 {
		t.Errorf("only %d names checked in docs/architecture.md; the rule or the parser is broken", checked)
	}
}

// goIdent is one Go identifier; dotted is one to three of them.
var (
	goIdent = `[A-Za-z_][A-Za-z0-9_]*`
	dotted  = regexp.MustCompile(`^` + goIdent + `(\.` + goIdent + `){0,2}$`)
	method  = regexp.MustCompile(`^\(\*(` + goIdent + `(?:\.` + goIdent + `)?)\)\.(` + goIdent + `)$`)
	span    = regexp.MustCompile("`([^`]+)`")
)

// fileExt are the endings that make a dotted span a file's name.
var fileExt = map[string]bool{"go": true, "json": true, "md": true, "sh": true, "golden": true, "yaml": true, "yml": true, "toml": true, "txt": true, "service": true, "db": true, "log": true}

// backticked is every inline code span of a Markdown text outside fenced
// blocks, as the rule above reads it (trimmed, "()" dropped, "(*T).M" as
// "T.M").
func backticked(doc string) []string {
	var prose strings.Builder
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			prose.WriteString("\n")
			continue
		}
		if !fenced {
			prose.WriteString(line)
		}
	}
	var out []string
	for _, m := range span.FindAllStringSubmatch(prose.String(), -1) {
		s := strings.TrimSpace(strings.ReplaceAll(m[1], "\n", " "))
		s = strings.TrimSuffix(s, "()")
		if mm := method.FindStringSubmatch(s); mm != nil {
			s = mm[1] + "." + mm[2]
		}
		out = append(out, s)
	}
	return out
}

// moduleIndex is what the module declares, by name.
type moduleIndex struct {
	pkgs    map[string]map[string]bool // package name → its top-level names
	types   map[string]map[string]bool // type name → its methods and fields
	all     map[string]bool            // every declared name
	imports map[string]bool            // names of the packages the module imports
}

// indexModule parses every Go file of the module, tests included (the doc
// names tests too).
func indexModule(t *testing.T) *moduleIndex {
	t.Helper()
	idx := &moduleIndex{pkgs: map[string]map[string]bool{}, types: map[string]map[string]bool{}, all: map[string]bool{}, imports: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		idx.add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.pkgs) < 10 {
		t.Fatalf("found %d packages in the module; run the test from its root", len(idx.pkgs))
	}
	return idx
}

// add records one file's declarations.
func (idx *moduleIndex) add(f *ast.File) {
	pkg := strings.TrimSuffix(f.Name.Name, "_test") // a package's tests are its own
	top := idx.pkgs[pkg]
	if top == nil {
		top = map[string]bool{}
		idx.pkgs[pkg] = top
	}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(p)
		if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
			name = path.Base(path.Dir(p)) // charm.land/bubbletea/v2 is bubbletea
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		idx.imports[name] = true
		idx.imports[strings.TrimPrefix(strings.TrimPrefix(name, "go-"), "go")] = true // go-nvml is nvml
	}
	member := func(typ, name string) {
		m := idx.types[typ]
		if m == nil {
			m = map[string]bool{}
			idx.types[typ] = m
		}
		m[name] = true
		idx.all[name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			idx.all[d.Name.Name] = true
			if d.Recv == nil || len(d.Recv.List) == 0 {
				top[d.Name.Name] = true
				continue
			}
			if typ := recvType(d.Recv.List[0].Type); typ != "" {
				member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					top[s.Name.Name], idx.all[s.Name.Name] = true, true
					if idx.types[s.Name.Name] == nil {
						idx.types[s.Name.Name] = map[string]bool{}
					}
					switch ty := s.Type.(type) {
					case *ast.StructType:
						for _, fl := range ty.Fields.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 { // embedded: its name is the field's
								if n := recvType(fl.Type); n != "" {
									member(s.Name.Name, n)
								}
							}
						}
					case *ast.InterfaceType:
						for _, fl := range ty.Methods.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						top[n.Name], idx.all[n.Name] = true, true
					}
				}
			}
		}
	}
}

// recvType is the name of a receiver's or embedded field's type: T for T,
// *T, T[P], pkg.T.
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// resolve applies the rule to one span: counts says the rule checks it, ok
// that the code declares it, why what is missing.
func (idx *moduleIndex) resolve(s string) (ok, counts bool, why string) {
	if !dotted.MatchString(s) {
		return false, false, ""
	}
	parts := strings.Split(s, ".")
	if fileExt[parts[len(parts)-1]] {
		return false, false, "" // a file's name
	}
	a := parts[0]
	if len(parts) == 1 {
		if !mixedCase(a) {
			return false, false, ""
		}
		if idx.all[a] || idx.pkgs[a] != nil {
			return true, true, ""
		}
		return false, true, "no declaration of that name"
	}
	switch {
	case idx.pkgs[a] != nil:
		if !idx.pkgs[a][parts[1]] {
			return false, true, "package " + a + " declares no " + parts[1]
		}
		if len(parts) == 3 && !idx.types[parts[1]][parts[2]] {
			return false, true, a + "." + parts[1] + " has no method or field " + parts[2]
		}
		return true, true, ""
	case idx.types[a] != nil:
		if !idx.types[a][parts[1]] {
			return false, true, "type " + a + " has no method or field " + parts[1]
		}
		if len(parts) == 3 && !idx.all[parts[2]] {
			return false, true, "nothing is named " + parts[2]
		}
		return true, true, ""
	case idx.imports[a]:
		return false, false, "" // another module's or the standard library's
	}
	return false, true, "no package or type " + a + " in the module"
}

// mixedCase says s has both upper- and lower-case letters, as Go names of
// more than one word do and words, commands and ALL-CAPS constants of
// other programs do not.
func mixedCase(s string) bool {
	return slices.ContainsFunc([]rune(s), unicode.IsUpper) && slices.ContainsFunc([]rune(s), unicode.IsLower)
}
