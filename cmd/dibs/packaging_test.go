package main

import (
	"bufio"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dibs-gpu/dibs/agent/config"
	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
)

// unitDirectives reads a systemd unit as its KEY=VALUE lines, without
// comments, blank lines or section headers.
func unitDirectives(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// TestPackagedUnit holds the promises the package makes about the agent's
// service: user sessions survive a restart, /run/dibs survives a stop, a bad
// config does not restart-loop (the status is the one `dibs agent` exits
// with), and the from-source unit in docs/examples says the same.
func TestPackagedUnit(t *testing.T) {
	pkg := unitDirectives(t, "../../packaging/dibs.service")
	for _, want := range []string{
		"ExecStart=/usr/bin/dibsd agent --config /etc/dibs/dibs.toml",
		"KillMode=process",
		"Restart=on-failure",
		"RestartPreventExitStatus=" + strconv.Itoa(daemoncmd.ExitConfig),
		"RuntimeDirectory=dibs",
		"RuntimeDirectoryMode=0755",
		"RuntimeDirectoryPreserve=yes",
		"StateDirectory=dibs",
		"WantedBy=multi-user.target",
	} {
		if !slices.Contains(pkg, want) {
			t.Errorf("packaging/dibs.service lacks %q", want)
		}
	}
	src := unitDirectives(t, "../../docs/examples/dibs.service")
	for i := range src {
		src[i] = strings.ReplaceAll(src[i], "/usr/local/bin/dibsd", "/usr/bin/dibsd")
	}
	if !slices.Equal(pkg, src) {
		t.Errorf("docs/examples/dibs.service differs from packaging/dibs.service beyond the binary's path:\n%q\n%q", src, pkg)
	}
}

// TestPackagedConfig: the /etc/dibs/dibs.toml a package installs loads, and
// turns clustering on with the key the install steps make.
func TestPackagedConfig(t *testing.T) {
	fc, err := config.LoadFile("../../packaging/dibs.toml")
	if err != nil {
		t.Fatal(err)
	}
	if fc.Cluster.KeyFile != "/etc/dibs/cluster.key" {
		t.Errorf("packaged config's [cluster] key_file = %q, want /etc/dibs/cluster.key", fc.Cluster.KeyFile)
	}
}

// configKeys lists every key the agent's config file reads, as
// docs/operations.md's table names them: section ("" at the top, "pools.NAME"
// for a map of tables) and key.
func configKeys(t reflect.Type, section string) [][2]string {
	var out [][2]string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct:
			out = append(out, configKeys(ft, name)...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), name+".NAME")...)
		default:
			out = append(out, [2]string{section, name})
		}
	}
	return out
}

// TestOperationsListsEveryConfigKey: the install guide's key table names
// every key the config file takes (it once lacked sim, which a GPU-less
// node needs to start at all, and lost_after, requeue_backoff,
// max_requeue_backoff and signal_grace).
func TestOperationsListsEveryConfigKey(t *testing.T) {
	raw, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "\n## The config file\n")
	if !ok {
		t.Fatal("docs/operations.md has no \"## The config file\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	sectionRe := regexp.MustCompile(`\[([a-zA-Z_.]+)\]`)
	have := map[[2]string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		section := ""
		if m := sectionRe.FindStringSubmatch(cell); m != nil {
			section = m[1]
			cell = strings.Replace(cell, m[0], "`", 1)
		}
		for _, w := range strings.FieldsFunc(cell, func(r rune) bool { return r == '`' || r == ',' || r == '/' || r == ' ' }) {
			have[[2]string{section, w}] = true
		}
	}
	for _, k := range configKeys(reflect.TypeOf(config.FileConfig{}), "") {
		if !have[k] {
			name := k[1]
			if k[0] != "" {
				name = "[" + k[0] + "] " + k[1]
			}
			t.Errorf("docs/operations.md's config table lacks %s", name)
		}
	}
}

// TestNFPMMatchesGoreleaser holds packaging/nfpm.yaml (what
// packaging/build-deb.sh, CI and the install guide build with) to the
// package .goreleaser.yaml's release makes: the same files with the same
// modes, the same scripts, dependencies and description. Only the
// binaries differ in spelling (goreleaser adds them from its builds;
// nfpm.yaml lists them).
func TestNFPMMatchesGoreleaser(t *testing.T) {
	read := func(path string, v any) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var gr struct {
		NFPMs []map[string]any `yaml:"nfpms"`
	}
	read("../../.goreleaser.yaml", &gr)
	var nf map[string]any
	read("../../packaging/nfpm.yaml", &nf)
	if len(gr.NFPMs) == 0 {
		t.Fatal(".goreleaser.yaml has no nfpms")
	}
	g := gr.NFPMs[0] // amd64; arm64 differs only in dropping the glibc dependency
	for _, k := range []string{"vendor", "homepage", "maintainer", "description", "license", "section", "priority", "scripts"} {
		if !reflect.DeepEqual(g[k], nf[k]) {
			t.Errorf("%s: .goreleaser.yaml has %v, packaging/nfpm.yaml %v", k, g[k], nf[k])
		}
	}
	if g["package_name"] != nf["name"] {
		t.Errorf("name: .goreleaser.yaml has %v, packaging/nfpm.yaml %v", g["package_name"], nf["name"])
	}
	// Dependencies: nfpm.yaml's glibc one comes from build-deb.sh.
	script, err := os.ReadFile("../../packaging/build-deb.sh")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(deb_libc|rpm_libc)="([^"]*)"`).FindAllStringSubmatch(string(script), -1) {
		env["DIBS_"+strings.ToUpper(m[1])] = m[2]
	}
	if !reflect.DeepEqual(g["dependencies"], nf["depends"]) {
		t.Errorf("depends: .goreleaser.yaml has %v, packaging/nfpm.yaml %v", g["dependencies"], nf["depends"])
	}
	gov, _ := g["overrides"].(map[string]any)
	nov, _ := nf["overrides"].(map[string]any)
	for _, p := range []string{"deb", "rpm"} {
		go_, _ := gov[p].(map[string]any)
		no, _ := nov[p].(map[string]any)
		var deps []any
		for _, d := range no["depends"].([]any) {
			deps = append(deps, os.Expand(d.(string), func(k string) string { return env[k] }))
		}
		if !reflect.DeepEqual(go_["dependencies"], deps) {
			t.Errorf("%s depends: .goreleaser.yaml has %v, packaging/nfpm.yaml (with build-deb.sh's amd64 values) %v", p, go_["dependencies"], deps)
		}
		if !reflect.DeepEqual(go_["recommends"], no["recommends"]) {
			t.Errorf("%s recommends: .goreleaser.yaml has %v, packaging/nfpm.yaml %v", p, go_["recommends"], no["recommends"])
		}
	}
	// Contents: the same entries, in the same order, but the binaries.
	var ncontents []any
	for _, c := range nf["contents"].([]any) {
		if dst := c.(map[string]any)["dst"]; dst == "/usr/bin/dibs" || dst == "/usr/bin/dibsd" {
			continue
		}
		ncontents = append(ncontents, c)
	}
	gcontents, _ := g["contents"].([]any)
	if len(gcontents) != len(ncontents) {
		t.Fatalf("contents: .goreleaser.yaml has %d entries, packaging/nfpm.yaml %d (besides the binaries)", len(gcontents), len(ncontents))
	}
	for i := range gcontents {
		if !reflect.DeepEqual(gcontents[i], ncontents[i]) {
			t.Errorf("contents[%d]: .goreleaser.yaml has %v, packaging/nfpm.yaml %v", i, gcontents[i], ncontents[i])
		}
	}
	if len(ncontents) != len(nf["contents"].([]any))-2 {
		t.Error("packaging/nfpm.yaml does not list both binaries, /usr/bin/dibs and /usr/bin/dibsd")
	}
}

// TestReadmeListsEveryCommand: README.md's command table names every
// command people type (it once lacked doctor, export, replay and version).
func TestReadmeListsEveryCommand(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "\n## The commands\n")
	if !ok {
		t.Fatal("README.md has no \"## The commands\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	for _, cmd := range rootCmd(c).Commands() {
		if !cmd.IsAvailableCommand() || cmd.Name() == "help" {
			continue
		}
		if !regexp.MustCompile("`dibsd? " + regexp.QuoteMeta(cmd.Name()) + "[ `]").MatchString(table) {
			t.Errorf("README.md's command table does not list dibs %s (%s)", cmd.Name(), cmd.Short)
		}
	}
}
