package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func TestStatePublishedIsVisibleEverywhere(t *testing.T) {
	nodes := startCluster(t, 4, func(c *Config) { c.TelemetryInterval = 200 * time.Millisecond })
	src := nodes[2]
	snap := testSnapshot(t, src.cfg.NodeName)
	src.agent.setSnapshot(snap)
	v := src.agent.setLeases("alice", "training run", 0, 1)
	src.Publish(true)
	src.Publish(false)

	waitFor(t, 5*time.Second, func() (bool, string) {
		for _, n := range nodes {
			p, ok := n.Peer(src.cfg.NodeName)
			if !ok || !p.HasState || p.NodeState.Version < v || len(p.NodeState.Leases) != 2 || len(p.NodeState.Snapshot.GPUs) != 8 {
				return false, fmt.Sprintf("%s sees %+v", n.cfg.NodeName, p.NodeState)
			}
		}
		return true, ""
	})
	got, _ := nodes[0].Peer(src.cfg.NodeName)
	if got.NodeState.BootID != src.BootID() || got.NodeState.Node != src.cfg.NodeName {
		t.Errorf("boot = %q node = %q, want %q %q", got.NodeState.BootID, got.NodeState.Node, src.BootID(), src.cfg.NodeName)
	}
	if l := got.NodeState.Leases[1]; l.User != "alice" || l.Note != "training run" || l.GPUs[0] != 1 {
		t.Errorf("lease = %+v", l)
	}
	if g := got.NodeState.Snapshot.GPUs[3]; g.UUID != snap.GPUs[3].UUID || len(g.Processes) != 1 {
		t.Errorf("gpu 3 = %+v, want %+v", g, snap.GPUs[3])
	}
	if got.UpdatedAt.IsZero() || got.Addr == "" {
		t.Errorf("peer = %+v: want an address and an update time", got)
	}
	view := nodes[1].View()
	if len(view) != 4 {
		t.Fatalf("view has %d peers, want 4", len(view))
	}
	for i := 1; i < len(view); i++ {
		if view[i-1].Name >= view[i].Name {
			t.Errorf("view not sorted: %s before %s", view[i-1].Name, view[i].Name)
		}
	}
}

func TestUrgentChangeArrivesFast(t *testing.T) {
	nodes := startCluster(t, 8, nil)
	for trial := range 5 {
		src := nodes[trial%len(nodes)]
		v := src.agent.setLeases("bob", "", trial%8)
		start := time.Now()
		src.Publish(true)
		waitFor(t, 2*time.Second, func() (bool, string) {
			for _, n := range nodes {
				if p, _ := n.Peer(src.cfg.NodeName); p.NodeState.Version < v {
					return false, fmt.Sprintf("%s has version %d of %s, want %d", n.cfg.NodeName, p.NodeState.Version, src.cfg.NodeName, v)
				}
			}
			return true, ""
		})
		t.Logf("trial %d: everywhere after %v", trial, time.Since(start))
	}
}

func TestLargeLeaseStateTakesReliablePath(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	src := nodes[0]
	r := rand.New(rand.NewPCG(1, 2))
	src.agent.mu.Lock()
	src.agent.state.Version = 7
	for g := range 8 {
		src.agent.state.Leases = append(src.agent.state.Leases, testLease(src.cfg.NodeName, uint64(10+g), strings.Repeat("u", 32), randomNote(r, words.MaxNoteLen), g))
	}
	want := src.agent.state.Leases
	src.agent.mu.Unlock()
	src.Publish(true)
	waitFor(t, 3*time.Second, func() (bool, string) {
		for _, n := range nodes[1:] {
			p, _ := n.Peer(src.cfg.NodeName)
			if len(p.NodeState.Leases) != 8 || p.NodeState.Leases[7].Note != want[7].Note {
				return false, fmt.Sprintf("%s has %d leases", n.cfg.NodeName, len(p.NodeState.Leases))
			}
		}
		return true, ""
	})
	src.pubMu.Lock()
	wire, gossipCopy := src.local[secLeases].wire, src.local[secLeases].gossip
	src.pubMu.Unlock()
	if len(wire) <= src.packetBudget {
		t.Fatalf("full lease section is %d bytes, under the %d-byte packet budget: the test no longer covers the TCP path", len(wire), src.packetBudget)
	}
	if gossipCopy == nil || len(gossipCopy) > src.packetBudget {
		t.Fatalf("gossip copy is %d bytes, budget %d", len(gossipCopy), src.packetBudget)
	}
	m, err := decodeState(gossipCopy)
	if err != nil || !m.Partial || len(m.Leases.Leases) != 8 {
		t.Fatalf("gossip copy = %+v, %v: want a partial copy with every lease", m, err)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	resp, err := nodes[0].Request(context.Background(), "node02", Request{Op: "claim", Body: json.RawMessage(`{"gpus":[1]}`)})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got["node"] != "node02" || got["from"] != "node00" || got["op"] != "claim" {
		t.Errorf("handler saw %v", got)
	}
	if b, _ := json.Marshal(got["body"]); string(b) != `{"gpus":[1]}` {
		t.Errorf("body = %s", b)
	}

	// A refusal is a response.
	nodes[1].agent.mu.Lock()
	nodes[1].agent.handler = func(ctx context.Context, from string, req Request) Response {
		return Response{ErrCode: refusal.CodeConflict, ErrMsg: "GPU 1 is alice's"}
	}
	nodes[1].agent.mu.Unlock()
	resp, err = nodes[2].Request(context.Background(), "node01", Request{Op: "claim"})
	if err != nil || resp.ErrCode != refusal.CodeConflict || resp.ErrMsg != "GPU 1 is alice's" {
		t.Errorf("refusal = %+v, %v", resp, err)
	}

	// A request to this node goes straight to the handler.
	resp, err = nodes[0].Request(context.Background(), "node00", Request{Op: "release"})
	if err != nil || !strings.Contains(string(resp.Body), `"from":"node00"`) {
		t.Errorf("local request = %s, %v", resp.Body, err)
	}
	if s := nodes[0].Stats(); s.RemoteRequests != 1 || s.RemoteRequestErrs != 0 {
		t.Errorf("stats = %+v", s)
	}
	if s := nodes[2].Stats(); s.RequestsServed != 1 {
		t.Errorf("node02 served %d requests, want 1", s.RequestsServed)
	}
}

func TestRequestTimesOut(t *testing.T) {
	nodes := startCluster(t, 2, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	nodes[1].agent.mu.Lock()
	nodes[1].agent.handler = func(ctx context.Context, from string, req Request) Response {
		<-release // a handler that ignores its deadline
		return Response{}
	}
	nodes[1].agent.mu.Unlock()
	start := time.Now()
	_, err := nodes[0].Request(context.Background(), "node01", Request{Op: "slow"})
	if !errors.Is(err, ErrNoResponse) {
		t.Fatalf("err = %v, want ErrNoResponse", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timed out after %v, want about 300ms", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := nodes[0].Request(ctx, "node01", Request{Op: "slow"}); !errors.Is(err, ErrNoResponse) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrNoResponse and DeadlineExceeded", err)
	}
}

// A request the other agent carried out, whose answer this side stops
// waiting for because its own gossip shuts down (the agent restarts), may
// have been carried out: ErrNoResponse, never a bare ErrClosed, which the
// agent reports as a refusal. The long nemesis run found a cancel relayed
// through node01 carried out by the origin while node01 restarted, and
// told to the client as "cannot reach node03" (not done).
func TestRequestCutByShutdownMayHaveBeenCarriedOut(t *testing.T) {
	nodes := startCluster(t, 2, func(c *Config) { c.RequestTimeout = 10 * time.Second })
	carried := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	nodes[1].agent.mu.Lock()
	nodes[1].agent.handler = func(ctx context.Context, from string, req Request) Response {
		close(carried) // done; the answer is still to come
		<-release
		return Response{}
	}
	nodes[1].agent.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		_, err := nodes[0].Request(context.Background(), "node01", Request{Op: "cancel"})
		errc <- err
	}()
	select {
	case <-carried:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached node01")
	}
	if err := nodes[0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrNoResponse) || !errors.Is(err, ErrClosed) {
			t.Errorf("err = %v, want ErrNoResponse (it may have been carried out) and ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Request still waits after its Cluster shut down")
	}
	// Shut down before sending: not sent, so not carried out.
	if _, err := nodes[0].Request(context.Background(), "node01", Request{Op: "cancel"}); !errors.Is(err, ErrClosed) || errors.Is(err, ErrNoResponse) {
		t.Errorf("after shutdown err = %v, want ErrClosed alone", err)
	}
}

func TestRequestUnknownNode(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	start := time.Now()
	_, err := nodes[0].Request(context.Background(), "nosuchnode", Request{Op: "claim"})
	if !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("err = %v, want ErrUnknownNode", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("took %v", d)
	}
	t.Logf("error: %v", err)
}

func TestKilledNode(t *testing.T) {
	nodes := startCluster(t, 4, nil)
	victim := nodes[3]
	v := victim.agent.setLeases("carol", "eval", 2, 3)
	victim.Publish(true)
	waitFor(t, 3*time.Second, func() (bool, string) {
		p, _ := nodes[0].Peer("node03")
		return p.NodeState.Version >= v, "node00 has not seen node03's leases"
	})
	if err := victim.Shutdown(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// A request to it fails within a few seconds, never hangs.
	_, err := nodes[0].Request(context.Background(), "node03", Request{Op: "release"})
	if err == nil || time.Since(killed) > 4*time.Second {
		t.Fatalf("request to a killed node: err %v after %v", err, time.Since(killed))
	}
	t.Logf("request to killed node: %v (after %v)", err, time.Since(killed).Round(time.Millisecond))

	// Every agent shows it suspect before dead, not only the one whose
	// probe failed first.
	sawSuspect := map[string]bool{}
	waitFor(t, 10*time.Second, func() (bool, string) {
		dead := true
		for _, n := range nodes[:3] {
			p, _ := n.Peer("node03")
			if p.State == StateSuspect {
				sawSuspect[n.cfg.NodeName] = true
			}
			if p.State != StateDead {
				dead = false
			}
		}
		return dead, "node03 is not dead everywhere"
	})
	t.Logf("dead everywhere after %v (suspect seen by %v)", time.Since(killed).Round(time.Millisecond), sawSuspect)
	if len(sawSuspect) != 3 {
		t.Errorf("suspect seen by %v, want every one of the three agents", sawSuspect)
	}
	for _, n := range nodes[:3] {
		p, _ := n.Peer("node03")
		if !p.HasState || len(p.NodeState.Leases) != 2 || p.NodeState.Leases[0].User != "carol" {
			t.Errorf("%s lost node03's last state: %+v", n.cfg.NodeName, p)
		}
	}
	_, err = nodes[1].Request(context.Background(), "node03", Request{Op: "release"})
	if !errors.Is(err, ErrNodeDown) {
		t.Errorf("request to a dead node: %v, want ErrNodeDown", err)
	}
}

func TestLeaveShowsLeft(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	if err := nodes[2].Leave(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		for _, n := range nodes[:2] {
			if p, _ := n.Peer("node02"); p.State != StateLeft {
				return false, fmt.Sprintf("%s sees node02 %s", n.cfg.NodeName, p.State)
			}
		}
		return true, ""
	})
	if _, err := nodes[0].Request(context.Background(), "node02", Request{Op: "x"}); !errors.Is(err, ErrNodeDown) {
		t.Errorf("request to a node that left: %v, want ErrNodeDown", err)
	}
}

// A restart (SIGTERM) steps out without leaving: the others see the node
// away (dead, shown as restarting above gossip), never left, and its boot
// after the restart comes back with no warning in its log.
func TestRestartStepsOutWithoutLeavingAndComesBackQuietly(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	old := nodes[2]
	if err := old.Restart(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := old.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		for _, n := range nodes[:2] {
			if p, _ := n.Peer("node02"); p.State != StateDead {
				return false, fmt.Sprintf("%s sees node02 %s, want dead (away, not left)", n.cfg.NodeName, p.State)
			}
		}
		return true, ""
	})
	cfg := old.cfg
	cfg.BindPort = portOf(t, old.LocalAddr())
	var mu sync.Mutex
	var warnings []string
	cfg.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, fmt.Sprintf(format, args...))
	}
	back := startNode(t, cfg)
	waitFor(t, 10*time.Second, func() (bool, string) {
		for _, n := range nodes[:2] {
			if p, _ := n.Peer("node02"); p.State != StateAlive || p.NodeState.BootID != back.BootID() {
				return false, fmt.Sprintf("%s sees node02 %s boot %s", n.cfg.NodeName, p.State, p.NodeState.BootID)
			}
		}
		return true, ""
	})
	// An absence: gossip settles for a few rounds after the rejoin
	// (push/pull carries the old boot's verdict, which memberlist
	// refutes), and none of them may log a warning.
	poll.Wait(2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(warnings) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) > 0 {
		t.Errorf("a clean restart logged:\n%s", strings.Join(warnings, "\n"))
	}
}

func TestWrongKeyStaysOut(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	cfg := testConfig(t, "intruder")
	cfg.Key = []byte("another key of thirty-two bytes!")
	cfg.Join = []string{nodes[0].LocalAddr()}
	cfg.RejoinInterval = 200 * time.Millisecond
	in := startNode(t, cfg)
	in.agent.setLeases("mallory", "", 0)
	in.Publish(true)

	// Wait until the intruder has tried to join a few times and been
	// refused each time.
	waitFor(t, 10*time.Second, func() (bool, string) {
		s, is := nodes[0].Stats(), in.Stats()
		return s.DecryptFailures > 0 && is.Rejoins >= 2, fmt.Sprintf("node00 stats %+v, intruder re-joined %d times", s, is.Rejoins)
	})
	if v := in.View(); len(v) != 1 {
		t.Errorf("intruder sees %d nodes: %+v", len(v), v)
	}
	for _, n := range nodes {
		if p, ok := n.Peer("intruder"); ok {
			t.Errorf("%s sees the intruder: %+v", n.cfg.NodeName, p)
		}
	}
}

func TestOtherClusterStaysOut(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	cfg := testConfig(t, "neighbour")
	cfg.ClusterName = "other"
	cfg.Join = []string{nodes[0].LocalAddr()}
	cfg.RejoinInterval = 200 * time.Millisecond
	other := startNode(t, cfg)
	waitFor(t, 5*time.Second, func() (bool, string) {
		s := nodes[0].Stats()
		return s.LabelMismatches > 0 && s.DecryptFailures > 0, fmt.Sprintf("node00 stats %+v", s)
	})
	if v := other.View(); len(v) != 1 {
		t.Errorf("other cluster's agent sees %d nodes", len(v))
	}
	if _, ok := nodes[1].Peer("neighbour"); ok {
		t.Errorf("node01 sees the other cluster's agent")
	}
}

func TestDuplicateNameRefused(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	v := nodes[1].agent.setLeases("alice", "", 0)
	nodes[1].Publish(true)
	waitFor(t, 3*time.Second, func() (bool, string) {
		p, _ := nodes[2].Peer("node01")
		return p.NodeState.Version >= v, "node02 has not seen node01's leases"
	})

	cfg := testConfig(t, "node01")
	cfg.Join = []string{nodes[0].LocalAddr()}
	_, err := tryStartNode(t, cfg)
	if !errors.Is(err, ErrDuplicateName) {
		t.Fatalf("second node01: err = %v, want ErrDuplicateName", err)
	}
	t.Logf("error: %v", err)

	// The first node01 is untouched everywhere.
	for _, n := range []*tnode{nodes[0], nodes[2]} {
		p, _ := n.Peer("node01")
		if p.State != StateAlive || p.NodeState.BootID != nodes[1].BootID() || p.Addr != nodes[1].LocalAddr() || len(p.NodeState.Leases) != 1 {
			t.Errorf("%s sees node01 as %+v", n.cfg.NodeName, p)
		}
	}
	if err := nodes[1].Err(); err != nil {
		t.Errorf("the first node01 stopped: %v", err)
	}
}

func TestRestartedNodeRejoinsWithNewBoot(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	old := nodes[2]
	old.agent.setLeases("dave", "", 5)
	old.Publish(true)
	oldBoot := old.BootID()
	_ = old.Shutdown()

	// It comes back at once on the same address with a new boot, before
	// the others have noticed it died.
	cfg := old.cfg
	cfg.BindPort = portOf(t, old.LocalAddr())
	back := startNode(t, cfg)
	if back.BootID() == oldBoot {
		t.Fatal("same boot id after a restart")
	}
	v := back.agent.setLeases("erin", "after reboot", 6)
	back.Publish(true)
	waitFor(t, 10*time.Second, func() (bool, string) {
		for _, n := range nodes[:2] {
			p, _ := n.Peer("node02")
			if p.State != StateAlive || p.NodeState.BootID != back.BootID() || p.NodeState.Version < v {
				return false, fmt.Sprintf("%s sees node02 %s boot %s version %d", n.cfg.NodeName, p.State, p.NodeState.BootID, p.NodeState.Version)
			}
		}
		return true, ""
	})
	p, _ := nodes[1].Peer("node02")
	if len(p.NodeState.Leases) != 1 || p.NodeState.Leases[0].User != "erin" {
		t.Errorf("node01 sees node02's leases %+v", p.NodeState.Leases)
	}
}

func TestRejoinLoopFindsRestartedPeer(t *testing.T) {
	// node00 is configured to join hub; hub joins no one. When hub dies and
	// comes back (new boot, same address, still joining no one), only
	// node00's re-join loop can bring the two together again.
	hubCfg := testConfig(t, "hub")
	hub := startNode(t, hubCfg)
	cfg := testConfig(t, "node00")
	cfg.Join = []string{hub.LocalAddr()}
	cfg.RejoinInterval = 500 * time.Millisecond
	n0 := startNode(t, cfg)
	waitConverged(t, []*tnode{hub, n0}, 10*time.Second)

	hubCfg.BindPort = portOf(t, hub.LocalAddr())
	_ = hub.Shutdown()
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, _ := n0.Peer("hub")
		return p.State == StateDead, "hub not dead yet: " + p.State
	})
	back := startNode(t, hubCfg)
	v := back.agent.setLeases("hank", "", 0)
	back.Publish(true)
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, _ := n0.Peer("hub")
		return p.State == StateAlive && p.NodeState.BootID == back.BootID() && p.NodeState.Version >= v,
			fmt.Sprintf("node00 sees hub %s boot %s", p.State, p.NodeState.BootID)
	})
	if s := n0.Stats(); s.Rejoins == 0 {
		t.Errorf("no re-join counted")
	}
}

func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPushPullRepairsMissedState(t *testing.T) {
	nodes := startCluster(t, 3, func(c *Config) { c.PushPullInterval = 500 * time.Millisecond })
	deaf := nodes[2]
	deaf.testDropState.Store(true) // it misses every direct send and gossip copy
	v := nodes[0].agent.setLeases("frank", "", 1)
	nodes[0].Publish(true)
	waitFor(t, 3*time.Second, func() (bool, string) {
		p, _ := nodes[1].Peer("node00")
		return p.NodeState.Version >= v, "node01 has not seen it"
	})
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, _ := deaf.Peer("node00")
		return p.NodeState.Version >= v && len(p.NodeState.Leases) == 1, "push/pull has not repaired node02"
	})
	if s := deaf.Stats(); s.Dropped == 0 {
		t.Errorf("node02 dropped nothing: the test did not exercise the repair path")
	}
}

func TestRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no key", func(c *Config) { c.Key = nil }, "no cluster key"},
		{"short key", func(c *Config) { c.Key = []byte("short") }, "want 32"},
		{"key and insecure", func(c *Config) { c.Insecure = true }, "both"},
		{"bad name", func(c *Config) { c.NodeName = "no spaces" }, "node name"},
		{"bad join", func(c *Config) { c.Join = []string{"host:notaport"} }, "join address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "node")
			tt.mod(&cfg)
			_, err := New(cfg, &testAgent{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBindFailure(t *testing.T) {
	n := startNode(t, testConfig(t, "first"))
	cfg := testConfig(t, "second")
	cfg.BindPort = portOf(t, n.LocalAddr())
	if _, err := New(cfg, &testAgent{}); err == nil || !strings.Contains(err.Error(), "bind") {
		t.Errorf("err = %v, want a bind error", err)
	}
}

func TestInsecureCluster(t *testing.T) {
	nodes := startCluster(t, 2, func(c *Config) { c.Key, c.Insecure = nil, true })
	v := nodes[0].agent.setLeases("gina", "", 0)
	nodes[0].Publish(true)
	waitFor(t, 3*time.Second, func() (bool, string) {
		p, _ := nodes[1].Peer("node00")
		return p.NodeState.Version >= v, "not propagated"
	})
}

// TestHeardAtStaysFreshWhileTelemetryIsUnchanged: a node whose numbers do
// not change sends no telemetry, so the snapshot another agent holds keeps
// its old TakenAt; HeardAt, which the failure detector's probes renew,
// still says the node was heard from a moment ago. `dibs status` shows it.
func TestHeardAtStaysFreshWhileTelemetryIsUnchanged(t *testing.T) {
	nodes := startCluster(t, 2, func(c *Config) {
		c.TelemetryInterval = 100 * time.Millisecond
		c.TelemetryRefresh = time.Hour
	})
	src, dst := nodes[1], nodes[0]
	snap := testSnapshot(t, src.cfg.NodeName)
	snap.TakenAt = time.Now().Add(-time.Hour) // read long ago, unchanged since
	v := src.agent.setLeases("alice", "", 0)
	src.agent.setSnapshot(snap)
	src.Publish(true)
	waitFor(t, 5*time.Second, func() (bool, string) {
		p, _ := dst.Peer(src.cfg.NodeName)
		return p.NodeState.Version > v && len(p.NodeState.Snapshot.GPUs) == 8, fmt.Sprintf("version %d", p.NodeState.Version)
	})
	first, _ := dst.Peer(src.cfg.NodeName)
	waitFor(t, 10*time.Second, func() (bool, string) {
		p, _ := dst.Peer(src.cfg.NodeName)
		return p.HeardAt.Sub(first.HeardAt) >= time.Second, fmt.Sprintf("heard at %v, first %v", p.HeardAt, first.HeardAt)
	})
	p, _ := dst.Peer(src.cfg.NodeName)
	if p.NodeState.Version != first.NodeState.Version || !p.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("state changed (version %d→%d): the test wants HeardAt renewed by probes alone", first.NodeState.Version, p.NodeState.Version)
	}
	if age := time.Since(p.HeardAt); age > 2*time.Second {
		t.Errorf("heard from %v ago, want within a probe round", age)
	}
	if age := time.Since(p.NodeState.Snapshot.TakenAt); age < time.Hour {
		t.Errorf("telemetry taken %v ago, want the hour-old reading kept (unchanged, so not re-sent)", age)
	}
}

// TestSuspectSeenByEveryAgent: in a cluster large enough that most agents do
// not probe a failed node before it is declared dead, every agent still
// shows it suspect first, because the first prober tells them.
func TestSuspectSeenByEveryAgent(t *testing.T) {
	nodes := startCluster(t, 8, nil)
	victim := nodes[7]
	if err := victim.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Each agent's view is read when it changes (ClusterChanged), not only
	// by the poll below (from the moment node07 stopped, so an earlier
	// flap counts for nothing): on a loaded machine a poller can sleep through
	// the second or so a node is suspect, and miss what the agent showed.
	var mu sync.Mutex
	saw := map[string]bool{}
	look := func(n *tnode) {
		if p, _ := n.Peer("node07"); p.State == StateSuspect {
			mu.Lock()
			saw[n.cfg.NodeName] = true
			mu.Unlock()
		}
	}
	for _, n := range nodes[:7] {
		f := func() { look(n) }
		n.agent.onChange.Store(&f)
	}
	t.Cleanup(func() {
		for _, n := range nodes[:7] {
			n.agent.onChange.Store(nil)
		}
	})
	waitFor(t, 30*time.Second, func() (bool, string) {
		dead := true
		for _, n := range nodes[:7] {
			look(n)
			p, _ := n.Peer("node07")
			dead = dead && p.State == StateDead
		}
		return dead, "node07 is not dead everywhere"
	})
	mu.Lock()
	defer mu.Unlock()
	if len(saw) != 7 {
		t.Errorf("suspect seen by %d of 7 agents before dead (%v)", len(saw), saw)
	}
}

// A queue too large for one section (issue 20's frozen node: thirty 60 KB
// commands) no longer stops the node's leases from being published: the
// flooding person's newest entries are left out until the section fits,
// and everyone else's entries still travel.
func TestOversizedQueueStillPublishesLeases(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	src := nodes[0]
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	entry := func(seq int, user string, cmd int) queue.QueueEntry {
		e := queue.QueueEntry{ID: queue.QueueID(src.cfg.NodeName, uint64(seq)), Origin: src.cfg.NodeName, User: user, UID: 1000,
			SubmittedAt: at.Add(time.Duration(seq) * time.Second), Nodes: 1, GPUsPerNode: 1, Duration: time.Hour, Kind: lease.KindBatch}
		if cmd > 0 {
			e.Job = &job.Job{Command: []string{"echo", strings.Repeat("x", cmd)}}
		}
		return e
	}
	src.agent.mu.Lock()
	src.agent.state.Version++
	src.agent.state.Queue = []queue.QueueEntry{entry(1, "carol", 0)}
	for i := range 30 {
		src.agent.state.Queue = append(src.agent.state.Queue, entry(2+i, "mallory", 60<<10))
	}
	src.agent.mu.Unlock()
	src.agent.setLeases("carol", "after the flood", 3)
	src.Publish(true)
	waitFor(t, 5*time.Second, func() (bool, string) {
		p, _ := nodes[1].Peer(src.cfg.NodeName)
		if len(p.NodeState.Leases) != 1 || p.NodeState.Leases[0].Note != "after the flood" {
			return false, fmt.Sprintf("node01 sees leases %v", p.NodeState.Leases)
		}
		return true, ""
	})
	p, _ := nodes[1].Peer(src.cfg.NodeName)
	var carol, mallory int
	var newest queue.QueueEntry
	for _, e := range p.NodeState.Queue {
		switch e.User {
		case "carol":
			carol++
		case "mallory":
			mallory++
			if e.SubmittedAt.After(newest.SubmittedAt) {
				newest = e
			}
		}
	}
	if carol != 1 || mallory == 0 || mallory >= 30 || newest.ID == queue.QueueID(src.cfg.NodeName, 31) {
		t.Errorf("node01 sees carol's %d and mallory's %d entries (newest %s); want carol's one and mallory's oldest that fit", carol, mallory, newest.ID)
	}
}
