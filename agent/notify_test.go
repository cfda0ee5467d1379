package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// webhookSink is a local HTTP server standing in for a team chat.
type webhookSink struct {
	mu    sync.Mutex
	texts []string
	srv   *httptest.Server
}

func newWebhookSink(t *testing.T) *webhookSink {
	s := &webhookSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Text string }
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &p)
		s.mu.Lock()
		s.texts = append(s.texts, p.Text)
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *webhookSink) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.texts {
		if strings.Contains(x, sub) {
			return true
		}
	}
	return false
}

// attachPane attaches a real tmux client (in a pane of a tmux server of the
// test's own) to u's session on n, and returns what the pane shows: the
// session and, in its status line, what dibs displays to the client.
func attachPane(t *testing.T, n *agenttest.Node, u launch.User, session string) func() string {
	t.Helper()
	sock := filepath.Join(agenttest.TmuxDir(t), "outer")
	inner := launch.SocketPath(n.Opts.TmuxTmpDir, u.UID)
	if out, err := exec.Command("tmux", "-S", sock, "new-session", "-d", "-s", "outer", "-x", "160", "-y", "8",
		"tmux -S '"+inner+"' attach -t '="+session+"'").CombinedOutput(); err != nil {
		t.Fatalf("outer tmux: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	return func() string {
		out, _ := exec.Command("tmux", "-S", sock, "capture-pane", "-p", "-t", "outer").CombinedOutput()
		return string(out)
	}
}

// TestNoticesReachEverySessionTheBoardAndTheWebhook drives the warnings of a
// lease end to end: the holder (a real account) has their run's session
// attached and a session of their own nobody is attached to; the ten-minute
// and the one-minute warnings show in the attached client at once, wait in
// the detached session until someone attaches, land on the board, and are
// posted to the webhook the holder set. A process of someone else's on the
// holder's GPU is told the same ways.
func TestNoticesReachEverySessionTheBoardAndTheWebhook(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Policy: shortPolicy(lease.ActionWarn), Clock: fake, Sim: "2xL40S"})
	me := n.Agent.For(u.UID)
	sink := newWebhookSink(t)
	if _, err := me.Notify(ctx(t), api.NotifyRequest{Webhook: sink.srv.URL + "/hook", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	r, err := me.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Duration: "1h", Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Sessions.Start(context.Background(), launch.Spec{Name: "mine", User: u, Command: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	attached := attachPane(t, n, u, r.Session)
	agenttest.Eventually(t, 15*time.Second, "a client attached to the run's session", func() bool {
		out, _ := n.Tmux(u.UID, "ls")
		return strings.Contains(out, r.Session+": 1 windows") && strings.Contains(out, "(attached)")
	})

	fake.Advance(50 * time.Minute)
	warned := r.ID + " ends in 10m"
	agenttest.Tick(t, fake, 10*time.Millisecond, 15*time.Second, "the ten-minute warning at the webhook", func() bool { return sink.has(warned) })
	agenttest.Eventually(t, 15*time.Second, "the warning in the attached client's status line", func() bool {
		return strings.Contains(attached(), "dibs: lease "+warned)
	})
	if b := n.BoardAs(lease.Caller{UID: u.UID, User: u.Name}); len(b.Notices) == 0 || !strings.Contains(strings.Join(b.Notices, "\n"), warned) {
		t.Errorf("the board's notices %v lack the warning", b.Notices)
	}

	// The last warning says how long is left to the second, as the node's
	// sweep reads the clock: the clock is put exactly a minute before the
	// end (however far the tick above moved it while a loaded machine
	// delivered) and held there, so the warning reads "1m" and not the
	// "59s" or "58s" of a clock that kept moving.
	fake.Advance(r.ExpiresAt.Sub(fake.Now()) - time.Minute)
	agenttest.Eventually(t, 20*time.Second, "the one-minute warning at the webhook", func() bool {
		return sink.has(r.ID + " ends in 1m")
	})

	// Someone else's process on the GPU: the holder hears of it.
	other := 4242
	if err := n.Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationPct: 50, Processes: []sim.LoadProcess{{PID: 777, User: "mallory", UID: &other, Command: "python steal.py", UsedMemoryMiB: 100}}}}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Tick(t, fake, 50*time.Millisecond, 15*time.Second, "the squatter at the webhook", func() bool {
		return sink.has("runs on your GPU 0 on node01")
	})

	// The session nobody was attached to shows them at its next attach,
	// newest first; the option holds all three.
	// The webhook and the session are told apart: the option may be set
	// a moment after the webhook heard of the squatter.
	var pending string
	poll.Wait(15*time.Second, func() bool {
		pending, _ = n.Tmux(u.UID, "show-options", "-t", "=mine:", "-qv", "@dibs-pending")
		return strings.Contains(pending, "steal.py") && strings.Contains(pending, "ends in 1m") && strings.Contains(pending, "ends in 10m")
	})
	for _, want := range []string{"steal.py", "ends in 1m", "ends in 10m"} {
		if !strings.Contains(pending, want) {
			t.Errorf("the detached session's waiting notices lack %q: %q", want, pending)
		}
	}
	later := attachPane(t, n, u, "mine")
	s := ""
	if !poll.Wait(15*time.Second, func() bool {
		s = later()
		return strings.Contains(s, "dibs: mallory's process 777 (python steal.py) runs on your GPU 0")
	}) {
		t.Fatalf("the waiting notices did not show at the next attach:\n%s", s)
	}

	// Once the lease is gone, its warnings leave the board; the rest stay.
	if _, err := me.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	b := n.BoardAs(lease.Caller{UID: u.UID, User: u.Name})
	all := strings.Join(b.Notices, "\n")
	if strings.Contains(all, r.ID+" ends in") || !strings.Contains(all, "steal.py") {
		t.Errorf("the board's notices after the release: %q; want the squatter's, not the warnings about %s", b.Notices, r.ID)
	}
}

// TestEventsAcrossTheCluster: what happened on each node is listed, in
// order, by any node.
func TestEventsAcrossTheCluster(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	a := nodes[0].As(heavy)
	r1, err := a.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Extend(ctx(t), api.ExtendRequest{ID: r2.ID, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx(t), api.ReleaseRequest{IDs: []string{r1.ID, r2.ID}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	agenttest.Eventually(t, 5*time.Second, "node02 to list node01's and its own events", func() bool {
		l, err := nodes[1].As(light).Events(ctx(t), api.EventsRequest{User: heavy.User})
		if err != nil {
			return false
		}
		got = got[:0]
		for _, e := range l.Events {
			got = append(got, e.Node+" "+string(e.Kind)+" "+e.Lease)
		}
		return len(got) == 5
	})
	want := []string{"node01 claim " + r1.ID, "node02 claim " + r2.ID, "node02 extend " + r2.ID, "node01 release " + r1.ID, "node02 release " + r2.ID}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events from node02:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAnAgentGoingAway: the scheduler records an agent that died, and the
// queue says a request whose origin is down waits for it.
func TestAnAgentGoingAway(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true, Users: testUsers})
	for _, n := range []string{"node01", "node02"} {
		if _, err := nodes[0].As(heavy).Claim(ctx(t), api.ClaimRequest{Node: n, Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := nodes[1].As(light).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see the request", func() bool { return len(nodes[0].Queue().Entries) == 1 })
	nodes[1].Crash()
	agenttest.Eventually(t, 15*time.Second, "node01 to record node02 leaving", func() bool {
		l, _ := nodes[0].As(light).Events(ctx(t), api.EventsRequest{})
		for _, e := range l.Events {
			if e.Kind == event.EventAgentLeave && e.Subject == "node02" && e.Node == "node01" {
				return true
			}
		}
		return false
	})
	q := nodes[0].Queue()
	if len(q.Entries) != 1 || q.Entries[0].ID != s.ID || !strings.Contains(q.Entries[0].Waiting, "its origin node02 is down") {
		t.Errorf("queue at node01: %+v, want %s waiting for its origin", q.Entries, s.ID)
	}
}
