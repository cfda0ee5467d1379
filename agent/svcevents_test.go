package agent_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// svcEvents are the service events about me's service name, oldest first.
func svcEvents(t *testing.T, me *core.Bound, name string) []event.Event {
	t.Helper()
	list, err := me.Events(ctx(t), api.EventsRequest{Since: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Event
	for _, e := range list.Events {
		if event.IsServiceKind(e.Kind) && e.Service == name {
			out = append(out, e)
		}
	}
	return out
}

func kinds(evs []event.Event) []event.EventKind {
	out := make([]event.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// inOrder reports whether want appears in got in order (others between).
func inOrder(got, want []event.EventKind) bool {
	i := 0
	for _, k := range got {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	return i == len(want)
}

// healthChecks is the count of dibs_service_health_seconds for service
// on the agent's /metrics (-1 when it has none) and their sum in seconds.
func healthChecks(t *testing.T, addr, service string) (int, float64) {
	t.Helper()
	r, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	count, sum := -1, 0.0
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `service="`+service+`"`) {
			continue
		}
		v := line[strings.LastIndexByte(line, ' ')+1:]
		switch {
		case strings.HasPrefix(line, "dibs_service_health_seconds_count{"):
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			count = n
		case strings.HasPrefix(line, "dibs_service_health_seconds_sum{"):
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			sum = f
		}
	}
	return count, sum
}

// TestServiceEventsTellItsLifeInOrderAndItsChecksAreTimed: a service's
// events say started, healthy, restarted (after kill -9), healthy again
// and stopped, in that order, each naming the service; a check that
// keeps passing adds none, and every check's time is in
// dibs_service_health_seconds.
func TestServiceEventsTellItsLifeInOrderAndItsChecksAreTimed(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: fastRules(), MetricsListen: "127.0.0.1:0"})
	me := n.Agent.For(u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port, Health: "/"}}); err != nil {
		t.Fatal(err)
	}
	l := waitHealthy(t, me, "web", 20*time.Second)
	agenttest.Eventually(t, 10*time.Second, "svc-started then svc-healthy", func() bool {
		return inOrder(kinds(svcEvents(t, me, "web")), []event.EventKind{event.EventSvcStarted, event.EventSvcHealthy})
	})
	checks, _ := healthChecks(t, n.Agent.MetricsAddr(), "web")
	agenttest.Eventually(t, 30*time.Second, "more health checks timed", func() bool {
		now, sum := healthChecks(t, n.Agent.MetricsAddr(), "web")
		if checks > 0 && now > checks+10 {
			t.Logf("health checks of python's http.server (GET /): %d, mean %.2f ms", now, 1000*sum/float64(now))
			return true
		}
		return false
	})

	pid := listenerPID(t, n, u, l.Session, port)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the service restarted and healthy", func() bool {
		l, _ = serviceOf(t, me, "web")
		return l.Service != nil && l.Service.Restarts == 1 && l.Service.State == service.Healthy
	})
	if _, err := me.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
		t.Fatal(err)
	}
	want := []event.EventKind{event.EventSvcStarted, event.EventSvcHealthy, event.EventSvcRestarted, event.EventSvcHealthy, event.EventSvcStopped}
	var evs []event.Event
	agenttest.Eventually(t, 10*time.Second, "the service's events in order", func() bool {
		evs = svcEvents(t, me, "web")
		return inOrder(kinds(evs), want)
	})
	for _, e := range evs {
		if e.User != u.Name || e.Node != "node01" || e.State == "" || !strings.Contains(e.Text, "service web") {
			t.Errorf("event %s: user %q node %q state %q text %q: want the owner, the node, a state and the service's name", e.Kind, e.User, e.Node, e.State, e.Text)
		}
	}
	// Hundreds of passing checks, one kill: a handful of events, not one
	// per check.
	if len(evs) > 8 {
		t.Errorf("%d service events for one start, one restart and one stop: %v", len(evs), kinds(evs))
	}
	if last := evs[len(evs)-1]; last.Kind != event.EventSvcStopped || last.Reason != string(lease.EndReleased) {
		t.Errorf("last event %s (%s), want svc-stopped by its holder", last.Kind, last.Reason)
	}
}

// TestAnIdleServiceIsFlaggedOnceAndNotWhileUsed: with service_idle_after
// 3s, a service nobody connects to is flagged idle on its lease (and so
// on the board), with one svc-idle event and one notice to its owner
// however long it stays idle; a service a client holds a connection to,
// and one a client keeps asking, are never flagged; a request clears the
// flag.
func TestAnIdleServiceIsFlaggedOnceAndNotWhileUsed(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	pol := lease.DefaultPolicy()
	pol.ServiceIdleAfter = 3 * time.Second
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: fastRules(), Policy: pol})
	me := n.Agent.For(u.UID)
	hook := newPayloadSink(t)
	if _, err := me.Notify(ctx(t), api.NotifyRequest{Webhook: hook.srv.URL + "/hook", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, name := range []string{"quiet", "held", "asked"} {
		ports[name] = agenttest.FreePort(t)
		if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(ports[name]), "--bind", "127.0.0.1"}, Dir: u.Home},
			Service: &service.Spec{Name: name, Port: ports[name]}}); err != nil {
			t.Fatal(err)
		}
	}
	// asked: a client asks every half second from now on; held: a client
	// holds one connection open from when it answers.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			get(fmt.Sprintf("http://127.0.0.1:%d/", ports["asked"]))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	waitHealthy(t, me, "held", 20*time.Second)
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports["held"]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	idle := func(name string) bool {
		l, ok := serviceOf(t, me, name)
		return ok && !l.Service.IdleSince.IsZero()
	}
	// On a loaded machine held and asked may be flagged before their
	// clients start; once seen in use they are not.
	agenttest.Eventually(t, 20*time.Second, "quiet flagged idle, held and asked not", func() bool {
		return idle("quiet") && !idle("held") && !idle("asked")
	})
	// Watch the used ones (and quiet's events) for twice the idle time.
	watchFrom := time.Now()
	poll.Never(t, 6*time.Second, "a used service flagged idle", func() bool { return idle("held") || idle("asked") })
	var told []event.Event
	for _, e := range svcEvents(t, me, "quiet") {
		if e.Kind == event.EventSvcIdle {
			told = append(told, e)
		}
	}
	if len(told) != 1 {
		t.Fatalf("quiet idle for 6 s past its flag: %d svc-idle events, want exactly 1", len(told))
	}
	for _, name := range []string{"held", "asked"} {
		for _, e := range svcEvents(t, me, name) {
			// Before its client started, a loaded machine may have
			// flagged it; not since it is in use.
			if e.Kind == event.EventSvcIdle && !e.At.Before(watchFrom) {
				t.Errorf("%s, in use, has a svc-idle event: %s", name, e.Text)
			}
		}
	}
	b, err := me.Board(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(b.Notices, func(s string) bool { return strings.Contains(s, "your service quiet on node01 is idle") }) {
		t.Errorf("the owner's notices %q do not say quiet is idle", b.Notices)
	}

	// The webhook's post names the service, its owner, node and state.
	if !poll.Wait(10*time.Second, func() bool {
		p, ok := hook.find("quiet", event.EventSvcIdle)
		return ok && p.Dibs.User == u.Name && p.Dibs.Node == "node01" && p.Dibs.State == string(service.Healthy) &&
			strings.Contains(p.Text, "your service quiet on node01 is idle")
	}) {
		t.Fatalf("no webhook post of quiet's idle flag with its service, owner, node and state; posts: %+v", hook.all())
	}

	// A request clears the flag.
	if got := get(fmt.Sprintf("http://127.0.0.1:%d/", ports["quiet"])); got != 200 {
		t.Fatalf("GET quiet: %d", got)
	}
	agenttest.Eventually(t, 10*time.Second, "quiet no longer idle after a request", func() bool { return !idle("quiet") })
}

// payloadSink is a webhook that keeps the JSON posts whole.
type payloadSink struct {
	mu    sync.Mutex
	posts []events.Payload
	srv   *httptest.Server
}

func newPayloadSink(t *testing.T) *payloadSink {
	s := &payloadSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p events.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err == nil {
			s.mu.Lock()
			s.posts = append(s.posts, p)
			s.mu.Unlock()
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// find is the first post of a notice of kind about service.
func (s *payloadSink) find(service string, kind event.EventKind) (events.Payload, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.posts {
		if p.Dibs != nil && p.Dibs.Kind == kind && p.Dibs.Service == service {
			return p, true
		}
	}
	return events.Payload{}, false
}

// all is every post so far, for a failure's words.
func (s *payloadSink) all() []events.Payload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// TestServiceEventsAreNotSentToAnOlderAgent: a node of the previous
// release (protocol 7) knows no svc-* kind and refuses an event of a kind
// it does not know, so a node answers its events request with the rest
// only (a v0.2.0 agent joining a cluster that runs services still reads
// everyone's claims and ends).
func TestServiceEventsAreNotSentToAnOlderAgent(t *testing.T) {
	agenttest.RequireTmux(t)
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*3 + 7)
	}
	cs := func(protocol int, join ...string) *agent.ClusterSettings {
		return &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "svcev", Key: key, Fast: true, Protocol: protocol, Join: join}
	}
	n1 := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "2xL40S", Quiet: true, Cluster: cs(0)})
	me := n1.Me()
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{"sleep", "600"}}, Service: &service.Spec{Name: "dash"}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 15*time.Second, "dash's svc-started and svc-healthy on node01", func() bool {
		return inOrder(kinds(svcEvents(t, me, "dash")), []event.EventKind{event.EventSvcStarted, event.EventSvcHealthy})
	})
	n2 := agenttest.Start(t, agenttest.Options{Name: "node02", Sim: "2xL40S", Quiet: true, Cluster: cs(peer.ServiceSince-1, n1.Agent.GossipAddr())})
	agenttest.WaitConverged(t, []*agenttest.Node{n1, n2}, 20*time.Second)
	for name, n := range map[string]*agenttest.Node{"node02 (protocol 7)": n2, "node01 (itself)": n1} {
		r, err := peer.Call(ctx(t), n.Agent.Peers(), "node01", peer.Events, peer.System, peer.EventsRequest{})
		if err != nil {
			t.Fatalf("%s asks node01's events: %v", name, err)
		}
		svc, claims := 0, 0
		for _, e := range r.Events {
			switch {
			case event.IsServiceKind(e.Kind):
				svc++
			case e.Kind == event.EventClaim && e.Service == "dash":
				claims++
			}
		}
		older := n == n2
		if claims != 1 || older != (svc == 0) {
			t.Errorf("%s got %d service events and %d claims of dash; want the claim, and service events only for a protocol-8 caller", name, svc, claims)
		}
	}
}

// TestAServiceNotHealthyForLongIsToldOnce: a service whose check never
// passes (a 404 on --health), and that its rules do not restart, is told
// to its owner once it has not been healthy for TellUnhealthyAfter: one
// svc-unhealthy event with reason long, and a notice on their board.
func TestAServiceNotHealthyForLongIsToldOnce(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	port := agenttest.FreePort(t)
	rules := service.Rules{StartAllowance: time.Second, FailsInARow: 100000, TellUnhealthyAfter: 3 * time.Second}
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", ServiceRules: rules})
	me := n.Agent.For(u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: u.Home},
		Service: &service.Spec{Name: "sick", Port: port, Health: "/nope"}}); err != nil {
		t.Fatal(err)
	}
	long := func() []event.Event {
		var out []event.Event
		for _, e := range svcEvents(t, me, "sick") {
			if e.Kind == event.EventSvcUnhealthy && e.Reason == event.ReasonLong {
				out = append(out, e)
			}
		}
		return out
	}
	agenttest.Eventually(t, 30*time.Second, "svc-unhealthy (long) for sick", func() bool { return len(long()) > 0 })
	agenttest.Eventually(t, 10*time.Second, "the owner's notice that sick is not healthy", func() bool {
		b, err := me.Board(ctx(t))
		return err == nil && slices.ContainsFunc(b.Notices, func(s string) bool {
			return strings.Contains(s, "your service sick on node01 fails its check: not healthy for 3s")
		})
	})
	// Told once: a few seconds more of failing checks add none.
	poll.Never(t, 4*time.Second, "a second svc-unhealthy (long) for sick", func() bool { return len(long()) > 1 })
}

// TestARollingUpdatesNewReplicaIsToldAsUpdated: the new replica of a
// rolling update (a claim whose Spec.Replaces names the old replica's
// lease) is told as svc-updated, naming the lease it replaces, not as a
// second svc-started.
func TestARollingUpdatesNewReplicaIsToldAsUpdated(t *testing.T) {
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	me := n.Me()
	old, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{"sleep", "600"}}, Service: &service.Spec{Name: "dash"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: &api.RunSpec{Command: []string{"sleep", "700"}}, Service: &service.Spec{Name: "dash", Replaces: old.ID}}); err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	agenttest.Eventually(t, 10*time.Second, "dash's svc-updated", func() bool {
		evs = svcEvents(t, me, "dash")
		return slices.ContainsFunc(evs, func(e event.Event) bool {
			return e.Kind == event.EventSvcUpdated && strings.Contains(e.Text, "it replaces lease "+old.ID)
		})
	})
	started := 0
	for _, e := range evs {
		if e.Kind == event.EventSvcStarted {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d svc-started for one start and one update, want 1: %v", started, kinds(evs))
	}
}
