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
// svc-started, svc-healthy and svc-idle lines (--kind picks them), and
// --json names the service and its state on each; `dibs stop` adds
// svc-stopped.
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
	port := strconv.Itoa(agenttest.FreePort(t))
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
	// --kind keeps one kind, or a family by its prefix; a kind that is
	// not one is a one-line refusal.
	out, _, _ = dibs("events", "--since", "1h", "--kind", "svc-idle")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "svc-idle") {
		t.Errorf("dibs events --kind svc-idle: want the one svc-idle line:\n%s", out)
	}
	out, _, _ = dibs("events", "--since", "1h", "--kind", "svc-")
	if strings.Contains(out, " claim ") || !strings.Contains(out, "svc-started") || !strings.Contains(out, "svc-idle") {
		t.Errorf("dibs events --kind svc-: want the service's steps and no claim:\n%s", out)
	}
	if _, errOut, code := dibs("events", "--kind", "svc-bogus"); code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 || !strings.Contains(errOut, "--kind svc-bogus: no such kind") {
		t.Errorf("dibs events --kind svc-bogus: exit %d %q, want a one-line refusal", code, errOut)
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
