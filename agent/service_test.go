package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Services are tested with a real HTTP server (python3 -m http.server) as
// the service, run by a real agent in real tmux as a throwaway user.

const python = "/usr/bin/python3"

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
}

// fastRules make the supervisor's numbers fit a test.
func fastRules() service.Rules {
	return service.Rules{StartAllowance: 20 * time.Second, FailsInARow: 2, BackoffBase: 200 * time.Millisecond, BackoffMax: time.Second,
		CrashRestarts: 5, CrashWindow: 10 * time.Minute}
}

// serviceOf is the board's lease of me's service name, if it runs.
func serviceOf(t *testing.T, me *core.Bound, name string) (lease.Lease, bool) {
	t.Helper()
	b, err := me.Board(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.Services {
		if l.Service != nil && l.Service.Name == name && l.User == me.Caller().User {
			return l, true
		}
	}
	return lease.Lease{}, false
}

// get is the status of GET url, 0 when nothing answers.
func get(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}

func waitHealthy(t *testing.T, me *core.Bound, name string, within time.Duration) lease.Lease {
	t.Helper()
	var l lease.Lease
	agenttest.Eventually(t, within, "service "+name+" healthy", func() bool {
		var ok bool
		l, ok = serviceOf(t, me, name)
		return ok && l.Service.State == service.Healthy
	})
	return l
}

// listenerPID is the pid of the process of the service's session that
// listens on port.
func listenerPID(t *testing.T, n *agenttest.Node, u launch.User, session string, port int) int {
	t.Helper()
	who, err := n.Sessions.ListenerOf(context.Background(), u, session, port)
	if err != nil {
		t.Fatal(err)
	}
	return who.PID
}

func TestServiceAnswersIsRestartedAfterKill9AndKeepsItsProcessAcrossAnAgentRestart(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: fastRules()})
	me := n.Agent.For(u.UID)
	r, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Session != "svc-web" || r.Kind != string(lease.KindService) {
		t.Fatalf("got session %q kind %q, want svc-web, service", r.Session, r.Kind)
	}
	if time.Until(r.ExpiresAt) < 50*365*24*time.Hour {
		t.Fatalf("a service's lease ends at %s: it should have no end while it is up", r.ExpiresAt)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	l := waitHealthy(t, me, "web", 20*time.Second)
	if got := get(url); got != 200 {
		t.Fatalf("GET %s: got %d, want 200", url, got)
	}
	first := listenerPID(t, n, u, l.Session, port)
	if first == 0 {
		t.Fatal("no process of the service's session listens on its port")
	}

	// kill -9: restarted in place and answering again.
	killed := time.Now()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the service restarted, healthy and answering", func() bool {
		l, _ = serviceOf(t, me, "web")
		return l.Service != nil && l.Service.Restarts == 1 && l.Service.State == service.Healthy && get(url) == 200
	})
	t.Logf("kill -9 to healthy and answering again: %s", time.Since(killed).Round(10*time.Millisecond))
	second := listenerPID(t, n, u, l.Session, port)
	if second == 0 || second == first {
		t.Fatalf("listener after the restart: pid %d, want a new one (was %d)", second, first)
	}

	// An agent restart (SIGTERM: the agent's Close) never restarts the
	// service: the same process keeps serving.
	n.Restart()
	me = n.Agent.For(u.UID)
	agenttest.Eventually(t, 20*time.Second, "the restarted agent's supervisor finds the service healthy", func() bool {
		l, _ = serviceOf(t, me, "web")
		return l.Service != nil && l.Service.State == service.Healthy && get(url) == 200
	})
	if got := listenerPID(t, n, u, l.Session, port); got != second {
		t.Fatalf("after the agent's restart the listener is pid %d, want the same %d", got, second)
	}
	if l.Service.Restarts != 1 {
		t.Fatalf("restarts after the agent's restart: %d, want 1 (the agent's restart is not the service's)", l.Service.Restarts)
	}

	// Stopped by its owner: the lease ends and the session goes.
	if _, err := me.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the stopped service's port closed", func() bool { return get(url) == 0 })
}

func TestServiceFailingItsHealthCheckIsRestartedThenStoppedAsACrashLoop(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	rules := fastRules()
	rules.StartAllowance, rules.CrashRestarts = 2*time.Second, 2
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: rules})
	me := n.Agent.For(u.UID)
	sink := newWebhookSink(t)
	if _, err := me.Notify(ctx(t), api.NotifyRequest{Webhook: sink.srv.URL + "/hook", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(u.Home, "ok.txt")
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", "echo ok > "+ok); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	_, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "api", Port: port, Health: "/ok.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	l := waitHealthy(t, me, "api", 20*time.Second)
	first := l.Service.PID

	// The check starts failing (404): restarted in place.
	if err := os.Remove(ok); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the service restarted for its failing check", func() bool {
		l, _ = serviceOf(t, me, "api")
		return l.Service != nil && l.Service.Restarts >= 1 && l.Service.PID != first
	})
	// It keeps failing: a crash loop ends it, its owner told, its log kept.
	agenttest.Eventually(t, 40*time.Second, "the crash-looping service stopped", func() bool {
		_, running := serviceOf(t, me, "api")
		return !running
	})
	b, err := me.Board(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(b.Notices, "\n"), "service api crash-looped") {
		t.Fatalf("notices %q: want one saying service api crash-looped", b.Notices)
	}
	agenttest.Eventually(t, 15*time.Second, "the owner's webhook to hear of the crash loop", func() bool {
		return sink.has("your service api crash-looped on node01")
	})
	if got := get(fmt.Sprintf("http://127.0.0.1:%d/", port)); got != 0 {
		t.Fatalf("the stopped service still answers (%d)", got)
	}
	log, err := os.ReadFile(launch.LogPath(u, l.LogName()))
	if err != nil {
		t.Fatalf("the crash-looped service's log: %v", err)
	}
	if !strings.Contains(string(log), "404") {
		t.Fatalf("its log lacks the failing checks' 404s:\n%s", log)
	}
	evs, err := me.Events(ctx(t), api.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fmt.Sprint(evs), string(lease.EndCrashLoop)) {
		t.Fatalf("no event says the service ended as a crash loop: %v", evs)
	}
}

func TestServiceCheckRefusesAnotherUsersListenerOnItsPort(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	other := launchtest.User(t)
	port := agenttest.FreePort(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: fastRules()})
	me := n.Agent.For(u.UID)
	hold := filepath.Join(u.Home, "hold")
	// The service waits while the hold file exists, so another user can
	// take its port between a kill and the restart.
	script := fmt.Sprintf("while [ -e %s ]; do sleep 0.1; done; exec %s -m http.server %d --bind 127.0.0.1", hold, python, port)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{script}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port}}); err != nil {
		t.Fatal(err)
	}
	l := waitHealthy(t, me, "web", 20*time.Second)
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", "touch "+hold); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := syscall.Kill(listenerPID(t, n, u, l.Session, port), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the service restarting", func() bool {
		l, _ = serviceOf(t, me, "web")
		return l.Service != nil && l.Service.Restarts == 1 && l.Service.State != service.Healthy
	})
	// Another user binds the port, and answers on it.
	squat := exec.Command(python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1")
	cred, err := launch.Credential(other)
	if err != nil {
		t.Fatal(err)
	}
	squat.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	squat.Dir = "/"
	if err := squat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { squat.Process.Kill(); squat.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	agenttest.Eventually(t, 10*time.Second, "the other user's server answering on the port", func() bool { return get(url) == 200 })
	// An absence check: for several probes (SessionPoll is 100 ms) the
	// service must not be found healthy on the other user's listener.
	poll.Never(t, 2*time.Second, fmt.Sprintf("the service passed its check on another user's listener (its port answers for %s)", other.Name), func() bool {
		l, _ := serviceOf(t, me, "web")
		return l.Service != nil && l.Service.State == service.Healthy
	})
	// The other user goes; the service takes its port back.
	squat.Process.Kill()
	squat.Wait()
	if out, err := launchtest.Run(t, u, nil, "/bin/rm", "-f", hold); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitHealthy(t, me, "web", 20*time.Second)
	if got := get(url); got != 200 {
		t.Fatalf("GET %s after the other user left: %d, want 200", url, got)
	}
}

func TestServeRefusesASecondServiceOfTheSameNameAndPastThePolicy(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "8xL40S", ServiceRules: fastRules()})
	me := n.Agent.For(u.UID)
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: run, Service: &service.Spec{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  api.ClaimRequest
		want string
	}{
		{api.ClaimRequest{Count: 1, Run: run, Service: &service.Spec{Name: "a"}}, "you already run a service named a"},
		{api.ClaimRequest{Count: 2, Run: run, Service: &service.Spec{Name: "b"}}, "services may hold at most 2 GPUs per person (leases.service_gpus_per_user)"},
		{api.ClaimRequest{Count: 1, Run: run, Kind: "service"}, "a service lease is started with dibs serve"},
	} {
		_, err := me.Claim(ctx(t), c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("got %v, want one line saying %q", err, c.want)
		}
	}
	// -g 0: a service without a GPU.
	r, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: "tb"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 0 {
		t.Fatalf("-g 0 service got GPUs %v", r.GPUs)
	}
	waitHealthy(t, me, "tb", 20*time.Second)
}

func TestServiceNeverBorrowsBeyondItsOwnersQuotaUnlessPreemptible(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "8xL40S", ServiceRules: fastRules(),
		Sched: queue.SchedConfig{Quotas: map[string]int{u.Name: 1}}})
	me := n.Agent.For(u.UID)
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	_, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: run, Service: &service.Spec{Name: "llm"}})
	if err == nil || !strings.Contains(err.Error(), "a service never borrows") {
		t.Fatalf("a service past the quota: got %v, want a refusal saying a service never borrows", err)
	}
	r, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: run, Service: &service.Spec{Name: "llm", Preemptible: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Borrowed {
		t.Fatalf("a --preemptible service past the quota: borrowed %v, want true (quota preemption may take it)", r.Borrowed)
	}
}

// TestServeIsRefusedWhileANodeSpeaksAnOlderProtocol: a v0.2.0 agent
// (protocol 7) would take a service's lease for a plain claim (and v0.1.0
// refuses its kind), so `dibs serve` waits for every live node to speak
// protocol 8, and says which node holds it back.
func TestServeIsRefusedWhileANodeSpeaksAnOlderProtocol(t *testing.T) {
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S"}, Quiet: true})
	old, err := gossip.New(gossip.Config{NodeName: "node00", BindAddr: "127.0.0.1", ClusterName: "test", Key: nodes[0].Opts.Cluster.Key,
		Join: []string{nodes[0].Agent.GossipAddr()}, Protocol: peer.ServiceSince - 1}, fakeScheduler{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Shutdown() })
	me := nodes[0].Me()
	agenttest.Eventually(t, 10*time.Second, "node01 to see node00 alive", func() bool {
		st, err := me.Status(ctx(t))
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.Name == "node00" && m.State == "alive" && m.Protocol == peer.ServiceSince-1 {
				return true
			}
		}
		return false
	})
	_, err = me.Claim(ctx(t), api.ClaimRequest{Count: 1, Node: "node01", Run: &api.RunSpec{Command: []string{"sleep", "600"}}, Service: &service.Spec{Name: "llm"}})
	want := "services (dibs serve) needs every node at agent protocol 8 or newer, and node00 runs an older dibs (protocol 7)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestServiceHealthCommandRunsAsItsOwner: --health-cmd runs as the
// service's owner in its directory; exit 0 is healthy, and once it fails
// the service is restarted in place.
func TestServiceHealthCommandRunsAsItsOwner(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: fastRules()})
	me := n.Agent.For(u.UID)
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", "touch "+filepath.Join(u.Home, "ok")); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Healthy only while ./ok exists and the check runs as the owner.
	check := fmt.Sprintf("test -e ok && test \"$(id -u)\" = %d", u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home},
		Service: &service.Spec{Name: "dash", HealthCmd: check}}); err != nil {
		t.Fatal(err)
	}
	l := waitHealthy(t, me, "dash", 20*time.Second)
	if err := os.Remove(filepath.Join(u.Home, "ok")); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the service restarted for its failing --health-cmd", func() bool {
		cur, _ := serviceOf(t, me, "dash")
		return cur.Service != nil && cur.Service.Restarts >= 1 && cur.Service.PID != l.Service.PID
	})
}

// TestServeOnAnotherNodeAndItsDefinitionOnEveryNode: a service asked for
// at node01 for node02 (with a GPU, and without) is granted there,
// supervised there, and its definition — the command — is held by node01
// too, from node02's gossip, so a move could start it without node02.
func TestServeOnAnotherNodeAndItsDefinitionOnEveryNode(t *testing.T) {
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true})
	me := nodes[0].Me()
	for _, c := range []struct {
		name  string
		count int
	}{{"gpu", 1}, {"nogpu", 0}} {
		r, err := me.Claim(ctx(t), api.ClaimRequest{Count: c.count, Node: "node02", Run: &api.RunSpec{Command: []string{"sleep", "600"}},
			Service: &service.Spec{Name: c.name}})
		if err != nil {
			t.Fatalf("serve %s on node02 from node01: %v", c.name, err)
		}
		if r.Node != "node02" || len(r.GPUs) != c.count {
			t.Fatalf("serve %s: got node %s GPUs %v", c.name, r.Node, r.GPUs)
		}
		waitHealthy(t, me, c.name, 20*time.Second)
		var held lease.Lease
		for _, l := range nodes[0].Agent.Service().View().Leases() {
			if l.ID == r.ID {
				held = l
			}
		}
		if held.Job == nil || strings.Join(held.Job.Command, " ") != "sleep 600" {
			t.Fatalf("node01's copy of %s's lease holds job %+v, want its command (every node holds the definition)", c.name, held.Job)
		}
	}
}
