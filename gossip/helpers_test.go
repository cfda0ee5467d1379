package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// testKey is the cluster key of test clusters.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// testAgent is a Delegate whose state the test sets.
type testAgent struct {
	name string

	mu      sync.Mutex
	state   NodeState
	handler func(ctx context.Context, from string, req Request) Response

	changes  atomic.Int64
	onChange atomic.Pointer[func()]
}

func (a *testAgent) LocalState() NodeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

func (a *testAgent) HandleRequest(ctx context.Context, from string, req Request) Response {
	a.mu.Lock()
	h := a.handler
	a.mu.Unlock()
	if h == nil {
		return Response{ErrCode: refusal.CodeInvalid, ErrMsg: "no handler"}
	}
	return h(ctx, from, req)
}

func (a *testAgent) ClusterChanged() {
	a.changes.Add(1)
	if f := a.onChange.Load(); f != nil {
		(*f)()
	}
}

// setLeases replaces the agent's leases with one lease per GPU in gpus and
// bumps the version.
func (a *testAgent) setLeases(user, note string, gpus ...int) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state.Version++
	a.state.Leases = nil
	for _, g := range gpus {
		a.state.Leases = append(a.state.Leases, testLease(a.name, uint64(a.state.Version*100)+uint64(g), user, note, g))
	}
	return a.state.Version
}

func (a *testAgent) setSnapshot(s nodeprobe.Snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state.Version++
	a.state.Snapshot = s
}

func testLease(node string, token uint64, user, note string, gpus ...int) lease.Lease {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return lease.Lease{
		ID: lease.LeaseID(node, token), Node: node, GPUs: gpus, User: user, UID: 1000 + int(token%1000),
		Token: token, Kind: lease.KindInteractive, Note: note,
		StartedAt: now, ExpiresAt: now.Add(4 * time.Hour), Session: "dibs-" + lease.LeaseID(node, token),
	}
}

// testSnapshot is a simulated 8-GPU node under load.
func testSnapshot(t testing.TB, host string) nodeprobe.Snapshot {
	t.Helper()
	s, err := sim.New(sim.Options{Spec: "8xH100-80GB", HostName: host})
	if err != nil {
		t.Fatal(err)
	}
	uid := 1000
	load := sim.Load{GPUs: map[int]sim.GPULoad{}}
	for i := range 8 {
		load.GPUs[i] = sim.GPULoad{UtilizationPct: 50 + i*5, Processes: []sim.LoadProcess{
			{PID: 4000 + i, User: "someone", UID: &uid, Command: "python train.py --config configs/large.yaml", UsedMemoryMiB: 30000 + uint64(i)},
		}}
	}
	if err := s.SetLoad(load); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// tnode is one agent of a test cluster.
type tnode struct {
	*Cluster
	agent *testAgent
	cfg   Config
}

// testConfig is the configuration of a test node: loopback, a free port,
// the defaults otherwise.
func testConfig(t testing.TB, name string) Config {
	return Config{
		NodeName:    name,
		BindAddr:    "127.0.0.1",
		ClusterName: "test",
		Key:         testKey,
		Logf:        testLogf(t, name),
	}
}

// testLogf logs through t while the test runs (and not after).
func testLogf(t testing.TB, name string) func(string, ...any) {
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	return func(format string, args ...any) {
		if !done.Load() && testing.Verbose() {
			t.Logf("%s: %s", name, fmt.Sprintf(format, args...))
		}
	}
}

// startNode starts an agent and shuts it down when the test ends.
func startNode(t testing.TB, cfg Config) *tnode {
	t.Helper()
	n, err := tryStartNode(t, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeName, err)
	}
	return n
}

func tryStartNode(t testing.TB, cfg Config) (*tnode, error) {
	t.Helper()
	a := &testAgent{name: cfg.NodeName}
	a.state.Leases = []lease.Lease{}
	a.handler = func(ctx context.Context, from string, req Request) Response {
		body, _ := json.Marshal(map[string]any{"node": cfg.NodeName, "from": from, "op": req.Op, "body": req.Body})
		return Response{Body: body}
	}
	c, err := New(cfg, a)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return &tnode{Cluster: c, agent: a, cfg: cfg}, nil
}

// startCluster starts n agents, each joining the first, and waits until
// every agent sees every other alive.
func startCluster(t testing.TB, n int, tune func(*Config)) []*tnode {
	t.Helper()
	nodes := make([]*tnode, 0, n)
	var first string
	for i := range n {
		cfg := testConfig(t, fmt.Sprintf("node%02d", i))
		if first != "" {
			cfg.Join = []string{first}
		}
		if tune != nil {
			tune(&cfg)
		}
		nd := startNode(t, cfg)
		if first == "" {
			first = nd.LocalAddr()
		}
		nodes = append(nodes, nd)
	}
	waitConverged(t, nodes, 60*time.Second)
	return nodes
}

// waitConverged waits until every node sees every other as alive.
func waitConverged(t testing.TB, nodes []*tnode, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, func() (bool, string) {
		for _, a := range nodes {
			for _, b := range nodes {
				p, ok := a.Peer(b.cfg.NodeName)
				if !ok || p.State != StateAlive {
					inML := false
					if ml := a.list(); ml != nil {
						for _, m := range ml.Members() {
							inML = inML || m.Name == b.cfg.NodeName
						}
					}
					return false, fmt.Sprintf("%s sees %s as %q (memberlist lists it: %v; peer %+v)", a.cfg.NodeName, b.cfg.NodeName, p.State, inML, p)
				}
			}
		}
		return true, ""
	})
}

// waitFor polls cond until it holds or timeout passes, and then fails
// with what cond last said was missing.
func waitFor(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var why string
	if !poll.Wait(timeout, func() bool {
		var ok bool
		ok, why = cond()
		return ok
	}) {
		t.Fatalf("after %v: %s", timeout, why)
	}
}

// randomNote is n bytes of text that deflate cannot shrink much.
func randomNote(r *rand.Rand, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-"
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}
