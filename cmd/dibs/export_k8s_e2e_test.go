package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/outgrow/k8s"
)

// TestExportK8sOfARealService: a person serves an HTTP server with `dibs
// serve` and exports it with `dibs export k8s NAME`: the Deployment runs
// its command under /bin/sh -c on one GPU with an HTTP probe, a Service
// sits on its port, and stderr says to fill in the image and to listen on
// 0.0.0.0. Another person is refused in one line (the command is the
// owner's to see), and so is a name nobody runs.
func TestExportK8sOfARealService(t *testing.T) {
	agenttest.RequireTmux(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	u, v := launchtest.User(t), launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "2xL40S")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	as := func(who string, args ...string) (string, string, int) {
		t.Helper()
		usr := u
		if who == "v" {
			usr = v
		}
		return dibsAs(t, usr, "/usr/bin:/bin", p.socket, args...)
	}
	if out, errOut, code := as("u", "serve", "web", "-g", "1", "--port", port, "--health", "/", "--", "python3", "-m", "http.server", port, "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() { as("u", "stop", "web") })

	out, errOut, code := as("u", "export", "k8s", "web")
	if code != 0 {
		t.Fatalf("export k8s web: exit %d %q", code, errOut)
	}
	for _, want := range []string{
		"kind: Deployment", "kind: Service", `image: "` + k8s.Image + `"`,
		`- "exec python3 -m http.server ` + port + ` --bind 127.0.0.1"`,
		"containerPort: " + port, `"nvidia.com/gpu": 1`, `path: "/"`, `value: "/usr/bin:/bin"`,
		"dibs's address was http://node01:" + port,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the manifest lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "fill in the image") || !strings.Contains(errOut, "0.0.0.0") {
		t.Errorf("stderr %q does not say to fill in the image and to listen on 0.0.0.0", errOut)
	}
	file := filepath.Join(u.Home, "web.yaml")
	if o, e, code := as("u", "export", "k8s", "web", "--out", file); code != 0 || !strings.Contains(o, "kubectl apply -f "+file) {
		t.Fatalf("export --out: exit %d %q %q", code, o, e)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != out {
		t.Errorf("--out wrote %q (%v), want what stdout had", b, err)
	}
	for _, tc := range []struct{ who, name, want string }{
		{"v", "web", "service web is " + u.Name + "'s: only its owner and admins see its command"},
		{"u", "nope", "no service named nope runs"},
	} {
		o, e, code := as(tc.who, "export", "k8s", tc.name)
		if code == 0 || o != "" || !strings.Contains(e, tc.want) || strings.Count(strings.TrimSpace(e), "\n") > 0 {
			t.Errorf("%s: export k8s %s: exit %d %q %q, want one line with %q", tc.who, tc.name, code, o, e, tc.want)
		}
	}
}
