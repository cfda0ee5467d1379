package main

import (
	"bufio"
	"os"
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
