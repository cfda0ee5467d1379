package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestServicesShowsAnIdleServiceAndEventsItsLife: with service_idle_after
// 2s, a served HTTP server nobody calls reads "healthy, idle" in `dibs
// services` and carries idle_since in --json; `dibs events` prints its
// svc-started, svc-healthy and svc-idle lines, and --json names the
// service and its state on each; `dibs stop` adds svc-stopped.
func TestServicesShowsAnIdleServiceAndEventsItsLife(t *testing.T) {
	agenttest.RequireTmux(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	dir := agenttest.PublicDir(t)
	conf := filepath.Join(dir, "dibs.toml")
	if err := os.WriteFile(conf, []byte("[leases]\nservice_idle_after = \"2s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, dir, "--sim", "2xL40S", "--config", conf)
	port := strconv.Itoa(freePort(t))
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", p.socket, args...)
	}
	if out, errOut, code := dibs("serve", "tb", "-g", "0", "--port", port, "--", "python3", "-m", "http.server", port, "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}
	var rows []serviceRow
	agenttest.Eventually(t, 30*time.Second, "dibs services --json to show tb idle", func() bool {
		out, _, _ := dibs("services", "--json")
		rows = nil
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 1 && !rows[0].IdleSince.IsZero()
	})
	if out, _, _ := dibs("services"); !strings.Contains(out, "healthy, idle") {
		t.Fatalf("dibs services does not flag tb idle:\n%s", out)
	}
	out, _, _ := dibs("events", "--since", "1h")
	for _, want := range []string{"svc-started", "svc-healthy", "svc-idle", "service tb on node01 is idle"} {
		if !strings.Contains(out, want) {
			t.Errorf("dibs events lacks %q:\n%s", want, out)
		}
	}
	if out, errOut, code := dibs("stop", "tb"); code != 0 {
		t.Fatalf("dibs stop tb: exit %d %q %q", code, out, errOut)
	}
	var list api.EventList
	agenttest.Eventually(t, 10*time.Second, "dibs events --json to hold svc-stopped", func() bool {
		out, _, _ := dibs("events", "--since", "1h", "--json")
		list = api.EventList{}
		if json.Unmarshal([]byte(out), &list) != nil {
			return false
		}
		for _, e := range list.Events {
			if e.Kind == event.EventSvcStopped {
				return true
			}
		}
		return false
	})
	for _, e := range list.Events {
		if event.IsServiceKind(e.Kind) && (e.Service != "tb" || e.State == "") {
			t.Errorf("%s in --json: service %q state %q, want tb and a state", e.Kind, e.Service, e.State)
		}
	}
}
