package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestServeServicesURLLogsAndStopByName: a person serves a real HTTP
// server with `dibs serve`, sees it healthy in `dibs services` with its
// URL, reads its address with `dibs url`, its output with `dibs logs
// NAME`, and stops it with `dibs stop NAME`, all by the service's name.
func TestServeServicesURLLogsAndStopByName(t *testing.T) {
	agenttest.RequireTmux(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "2xL40S")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", p.socket, args...)
	}

	if out, errOut, code := dibs("serve", "web", "-g", "1", "--for", "1h", "--", "true"); code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 || !strings.Contains(errOut, "no time limit") {
		t.Fatalf("serve --for: exit %d %q %q, want one line saying a service has no time limit", code, out, errOut)
	}
	out, errOut, code := dibs("serve", "web", "-g", "1", "--port", port, "--health", "/", "--", "python3", "-m", "http.server", port, "--bind", "127.0.0.1")
	if code != 0 || !strings.Contains(out, "service web started on node01") || !strings.Contains(out, "http://node01:"+port) {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}
	var rows []serviceRow
	agenttest.Eventually(t, 30*time.Second, "dibs services --json to show web healthy", func() bool {
		out, _, _ := dibs("services", "--json")
		rows = nil
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 1 && rows[0].State == "healthy"
	})
	if r := rows[0]; r.Name != "web" || r.Owner != u.Name || r.Node != "node01" || r.URL != "http://node01:"+port || len(r.GPUs) != 1 {
		t.Fatalf("dibs services --json: %+v", r)
	}
	if out, _, _ := dibs("services"); !strings.Contains(out, "web") || !strings.Contains(out, "healthy") || !strings.Contains(out, "URL") {
		t.Fatalf("dibs services:\n%s", out)
	}
	if out, errOut, code := dibs("url", "web"); code != 0 || strings.TrimSpace(out) != "http://node01:"+port {
		t.Fatalf("dibs url web: exit %d %q %q", code, out, errOut)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/", port))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET the service: %v %v", resp, err)
	}
	resp.Body.Close()
	agenttest.Eventually(t, 15*time.Second, "dibs logs web to show the server's requests", func() bool {
		out, _, _ := dibs("logs", "web")
		return strings.Contains(out, `"GET / HTTP/1.1" 200`)
	})
	if out, errOut, code := dibs("stop", "web"); code != 0 || !strings.Contains(out, "service web stopped") {
		t.Fatalf("dibs stop web: exit %d %q %q", code, out, errOut)
	}
	if out, _, _ := dibs("services", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("services after stop: %s", out)
	}
	if out, _, _ := dibs("logs", "web"); !strings.Contains(out, "GET /") {
		t.Fatalf("the stopped service's log is gone: %q", out)
	}
}

// TestServeThroughTheProxy: with [services] proxy on in dibsd's config,
// `dibs url` prints the service's proxy address first, then its replica's;
// `dibs services` shows the proxy port; and the service answers there.
func TestServeThroughTheProxy(t *testing.T) {
	agenttest.RequireTmux(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	first := 0
	for try := 0; try < 50 && first == 0; try++ {
		first = 20000 + rand.IntN(30000)
		for p := first; p < first+3; p++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				first = 0
				break
			}
			l.Close()
		}
	}
	dir := agenttest.PublicDir(t)
	conf := filepath.Join(dir, "dibs.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "[services]\nproxy = true\nproxy_ports = \"%d-%d\"\n", first, first+2), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, dir, "--sim", "2xL40S", "--config", conf)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", p.socket, args...)
	}
	if out, errOut, code := dibs("serve", "web", "-g", "0", "--port", port, "--", "python3", "-m", "http.server", port, "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}
	agenttest.Eventually(t, 30*time.Second, "dibs services --json to show web healthy", func() bool {
		out, _, _ := dibs("services", "--json")
		var rows []serviceRow
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 1 && rows[0].State == "healthy"
	})
	proxy := strconv.Itoa(first + 1)
	want := "http://node01:" + proxy + " (proxy, any node)\nhttp://node01:" + port + "\n"
	if out, errOut, code := dibs("url", "web"); code != 0 || out != want {
		t.Fatalf("dibs url web: exit %d %q %q, want %q", code, out, errOut, want)
	}
	if out, _, _ := dibs("services"); !strings.Contains(out, "PROXY") || !strings.Contains(out, ":"+proxy) {
		t.Fatalf("dibs services lacks the proxy port %s:\n%s", proxy, out)
	}
	agenttest.Eventually(t, 15*time.Second, "the service answering on the proxy's port", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + proxy + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
