package main

import (
	"bufio"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/config"
	"github.com/dibs-gpu/dibs/internal/daemoncmd"
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
