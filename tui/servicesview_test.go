package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// mkService is a service's replica as the board carries it: on gpus of
// node (none for -g 0), its status as its supervisor last wrote it.
func mkService(id, node, user string, uid int, gpus []int, name string, port int, st service.Status) lease.Lease {
	l := mkLease(id, node, user, uid, gpus, lease.ServiceSpan)
	l.Kind = lease.KindService
	l.Session = service.SessionName(name)
	l.Service = &service.Service{Spec: service.Spec{Name: name, Port: port}, Status: st}
	return *l
}

// svcBoard is testBoard with services in every state, across the nodes:
// alice's own two (one with GPUs, one without), others' healthy, idle,
// unhealthy, restarting, crash-looping, one moving off the dead node04 and
// one whose node04 is dead and not yet moved (unknown).
func svcBoard() api.Board {
	b := testBoard()
	ago := func(d time.Duration) time.Time { return fixedNow.Add(-d) }
	vllm := mkService("node02-20", "node02", "alice", uidAlice, []int{0, 1}, "vllm", 8000,
		service.Status{State: service.Healthy, Restarts: 2, Since: ago(3*time.Hour + 10*time.Minute), PID: 9100})
	vllm.Service.Health = "/health"
	svcs := []lease.Lease{
		vllm,
		mkService("node03-21", "node03", "alice", uidAlice, nil, "tensorboard", 6006,
			service.Status{State: service.Starting, Since: ago(20 * time.Second), PID: 9200}),
		mkService("node01-22", "node01", "bob", uidBob, []int{7}, "embed", 8080,
			service.Status{State: service.Unhealthy, Restarts: 4, Since: ago(50 * time.Minute), PID: 9300}),
		mkService("node02-23", "node02", "erin", uidErin, []int{3}, "rerank", 9000,
			service.Status{State: service.CrashLoop, Restarts: 5, Since: ago(12 * time.Minute)}),
		mkService("node03-24", "node03", "dave", uidDave, []int{3}, "notebook-api", 8888,
			service.Status{State: service.Healthy, Since: ago(26 * time.Hour), PID: 9400, IdleSince: ago(3 * time.Hour)}),
		mkService("node03-25", "node03", "erin", uidErin, nil, "ingest", 0,
			service.Status{State: service.Restarting, Restarts: 1, Since: ago(time.Hour)}),
		mkService("node04-26", "node04", "carol", uidCarol, nil, "grafana", 3000,
			service.Status{State: service.Moving, Since: ago(48 * time.Hour)}),
		mkService("node04-27", "node04", "bob", uidBob, []int{1}, "asr", 7000,
			service.Status{State: service.Healthy, Since: ago(5 * time.Hour)}),
	}
	svcs[5].Service.HealthCmd = "curl -fs localhost:9999/ok"
	b.Services = svcs
	at := func(node string, gpu int) *api.GPU {
		for i := range b.Nodes {
			if b.Nodes[i].Name == node {
				return &b.Nodes[i].GPUs[gpu]
			}
		}
		panic("no node " + node)
	}
	for i := range svcs {
		for _, g := range svcs[i].GPUs {
			l := svcs[i]
			at(svcs[i].Node, g).Lease = &l
		}
	}
	setUtil(at("node02", 0), 64)
	setUtil(at("node02", 1), 58)
	setUtil(at("node01", 7), 3)
	// dave's idle service's GPU is judged idle too: the cell still names
	// the service (it is never reclaimed for it).
	at("node03", 3).Flags = []lease.Flag{lease.FlagIdle}
	return b
}

// TestServicesGolden renders the services view and the board with
// services' GPUs, at 80×24 and 160×48: each replica's owner, where it
// runs, URL, state, uptime, restarts and GPUs; the caller's first.
func TestServicesGolden(t *testing.T) {
	tests := []struct {
		name string
		w, h int
		keys []string
	}{
		{"services_80x24", 80, 24, []string{"6"}},
		{"services_160x48", 160, 48, []string{"6"}},
		{"services_idle_80x24", 80, 24, []string{"6", "j", "j", "j", "j", "j"}},
		{"services_stop_80x24", 80, 24, []string{"6", "x"}},
		{"services_help_160x48", 160, 48, []string{"6", "?"}},
		{"services_board_80x24", 80, 24, nil},
		{"services_board_160x48", 160, 48, []string{"j", "l"}},
		// The caller's service in their sessions: no end, not "36500d".
		{"services_sessions_80x24", 80, 24, []string{"4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{})
			h.send(BoardMsg(svcBoard()))
			h.keys(tc.keys...)
			requireGolden(t, tc.name, h.screen())
		})
	}
}

// TestServicesViewKeys: 6 opens the services view and 1 goes back to the
// board; tab and shift+tab pass through it; the footer names its keys.
func TestServicesViewKeys(t *testing.T) {
	h := newHarness(t, 100, 30, Options{})
	h.send(BoardMsg(svcBoard()))
	h.keys("6")
	if h.m.view != viewServices {
		t.Fatalf("6 opened view %s, want services", viewNames[h.m.view])
	}
	s := h.screen()
	for _, want := range []string{"6 services", "services · 8 replicas · 2 yours", "a attach", "x stop", "1-6 views"} {
		if !strings.Contains(s, want) {
			t.Errorf("the services view does not show %q:\n%s", want, s)
		}
	}
	h.keys("1")
	if h.m.view != viewBoard {
		t.Fatalf("1 opened view %s, want the board", viewNames[h.m.view])
	}
	h.keys("5", "tab")
	if h.m.view != viewServices {
		t.Errorf("tab after events opened %s, want services", viewNames[h.m.view])
	}
	h.keys("tab")
	if h.m.view != viewBoard {
		t.Errorf("tab after services opened %s, want the board", viewNames[h.m.view])
	}
	h.keys("shift+tab")
	if h.m.view != viewServices {
		t.Errorf("shift+tab from the board opened %s, want services", viewNames[h.m.view])
	}
}

// TestServicesViewActions: x on the caller's service asks, then stops it
// (a release of its lease) and says so in a service's words; n keeps it;
// a attaches to its session; a on someone else's says whose it is and
// attaches to nothing.
func TestServicesViewActions(t *testing.T) {
	h := newHarness(t, 100, 30, Options{})
	h.be.board = svcBoard()
	h.send(BoardMsg(svcBoard()))
	h.keys("6", "j", "x") // alice's tensorboard, then her vllm
	if s := h.screen(); !strings.Contains(s, "stop service vllm?") || !strings.Contains(s, "http://node02:8000 stops answering") {
		t.Fatalf("x did not ask before stopping vllm:\n%s", s)
	}
	h.keys("n")
	if len(h.be.releases) != 0 {
		t.Fatalf("n released %v", h.be.releases)
	}
	h.keys("x", "y")
	if len(h.be.releases) != 1 || h.be.releases[0].IDs[0] != "node02-20" {
		t.Fatalf("releases = %v, want node02-20 (vllm's lease)", h.be.releases)
	}
	if s := h.screen(); !strings.Contains(s, "stopped service vllm (lease node02-20); its log stays: dibs logs vllm") {
		t.Errorf("the status line does not say vllm stopped:\n%s", s)
	}
	h.keys("a")
	if len(h.be.attaches) != 1 || h.be.attaches[0] != "node02-20" {
		t.Errorf("attaches = %v, want node02-20", h.be.attaches)
	}
	h.keys("j", "a") // bob's asr
	if len(h.be.attaches) != 1 {
		t.Errorf("a on bob's service attached: %v", h.be.attaches)
	}
	if s := h.screen(); !strings.Contains(s, "asr is bob's service: only its owner attaches to it") {
		t.Errorf("a on bob's service does not say why not:\n%s", s)
	}
}

// TestServicesIdleFlag: a replica its supervisor judged idle shows "idle
// 3h" beside its state, and under the list since when.
func TestServicesIdleFlag(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(svcBoard()))
	h.keys("6")
	var row string
	for _, l := range strings.Split(h.screen(), "\n") {
		if strings.Contains(l, "notebook-api") {
			row = l
		}
	}
	if !strings.Contains(row, "healthy idle 3h") {
		t.Errorf("dave's idle service's row %q does not say idle 3h", row)
	}
	for range 5 { // alice's two, bob's two, carol's: dave's is next
		h.keys("j")
	}
	if s := h.screen(); !strings.Contains(s, "idle since 13:00 (3h): no requests, no GPU use") {
		t.Errorf("the idle service under the cursor does not say since when:\n%s", s)
	}
}

// TestServicesOnTheGrid: a GPU a service holds shows the service's name
// after ⚙ (★⚙ for the caller's own), where it showed only its holder (or
// "zz idle" for an idle one); the filter finds it by that name.
func TestServicesOnTheGrid(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(svcBoard()))
	s := h.screen()
	for _, want := range []string{"★⚙vllm", "⚙embed", "⚙rerank", "⚙noteboo…"} {
		if !strings.Contains(s, want) {
			t.Errorf("the grid does not show %q:\n%s", want, s)
		}
	}
	h.keys("/")
	h.typeText("rerank")
	h.keys("enter")
	if got := len(h.m.grid.views); got != 1 || h.m.grid.views[0].name != "node02" {
		t.Errorf("filter rerank shows %d nodes, want node02 alone", got)
	}
}

// TestServicesShowOnBoard: enter on a replica opens the board with the
// cursor on its GPU; on one with no GPU, on its node, saying so; when the
// filter hides its node, it says how to show it and stays.
func TestServicesShowOnBoard(t *testing.T) {
	h := newHarness(t, 100, 30, Options{})
	h.send(BoardMsg(svcBoard()))
	h.keys("6", "j", "enter") // alice's vllm, node02 GPUs 0 and 1
	if h.m.view != viewBoard {
		t.Fatalf("enter opened %s, want the board", viewNames[h.m.view])
	}
	if n, g := h.cursor(); n != "node02" || g != 0 {
		t.Errorf("cursor on %s/%d, want node02/0 (vllm's first GPU)", n, g)
	}
	if s := h.screen(); !strings.Contains(s, "vllm on node02 — 6 goes back to the services") {
		t.Errorf("the status line does not say where vllm is:\n%s", s)
	}
	h.keys("6", "k", "enter") // alice's tensorboard: no GPU, on node03
	if n, _ := h.cursor(); h.m.view != viewBoard || n != "node03" {
		t.Errorf("enter on tensorboard: view %s, node %s; want the board on node03", viewNames[h.m.view], n)
	}
	if s := h.screen(); !strings.Contains(s, "tensorboard holds no GPU: it runs on node03") {
		t.Errorf("the status line does not say tensorboard holds no GPU:\n%s", s)
	}
	h.keys("/")
	h.typeText("node01")
	h.keys("enter", "6", "j", "enter")
	if h.m.view != viewServices {
		t.Errorf("enter with node02 filtered out opened %s, want to stay on services", viewNames[h.m.view])
	}
	if s := h.screen(); !strings.Contains(s, "node02 is hidden by the filter") {
		t.Errorf("the status line does not say node02 is hidden:\n%s", s)
	}
}

// TestServicesViewEmpty: with no services the view says how to start one.
func TestServicesViewEmpty(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	h.keys("6")
	if s := h.screen(); !strings.Contains(s, "no services: dibs serve NAME --port P -- COMMAND starts one") {
		t.Errorf("the empty services view does not say how to start one:\n%s", s)
	}
	h.keys("x", "a", "enter", "j")
	if h.m.confirm != nil || len(h.be.attaches) != 0 || h.m.view != viewServices {
		t.Errorf("keys on an empty list acted: confirm %v, attaches %v, view %s", h.m.confirm, h.be.attaches, viewNames[h.m.view])
	}
}

// TestServicesStateColours: each state is drawn in its colour — healthy
// green, starting, unhealthy and restarting yellow, crash-looping red,
// moving and unknown dim — and idle in the notice's yellow beside it.
func TestServicesStateColours(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(svcBoard()))
	h.keys("6", "j") // the cursor off tensorboard, onto vllm
	h.keys("k")      // and back: every other row in its own colours
	st := h.m.st
	rowOf := func(name string) string {
		for _, l := range strings.Split(h.m.View().Content, "\n") {
			if p := ansi.Strip(l); strings.Contains(p, name+" ") && strings.Contains(p, "node0") && !strings.Contains(p, "lease") {
				return l
			}
		}
		t.Fatalf("no row for %s", name)
		return ""
	}
	for _, tc := range []struct {
		name, state string
		p           paint
	}{
		{"vllm", "healthy", st.stateAlive},
		{"embed", "unhealthy", st.stateSuspect},
		{"ingest", "restarting", st.stateSuspect},
		{"rerank", "crash-looping", st.stateDown},
		{"grafana", "moving", st.dim},
		{"asr", "unknown (dead)", st.dim},
		{"notebook-api", "healthy", st.stateAlive},
	} {
		if want := tc.p.render(tc.state); tc.p.pre == "" || !strings.Contains(rowOf(tc.name), want) {
			t.Errorf("%s's row %q does not draw %q as %q", tc.name, rowOf(tc.name), tc.state, want)
		}
	}
	if want := st.statusNotice.render("idle 3h"); !strings.Contains(rowOf("notebook-api"), want) {
		t.Errorf("notebook-api's row does not draw idle 3h as %q", want)
	}
	h.keys("j") // vllm under the cursor: one colour across the row
	if strings.Contains(rowOf("vllm"), st.stateAlive.pre) {
		t.Errorf("the row under the cursor keeps the state's colour inside the cursor's: %q", rowOf("vllm"))
	}
}
