// Package agenttest starts real dibs agents for tests: a real bbolt file, a
// real unix socket, real tmux sessions (in a private tmux directory, away
// from the developer's own server) and simulated GPUs — the one thing a test
// machine lacks. Any package's tests may use it.
package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/sockapi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Options describe one agent to start. Zero values give a 4-GPU node with the
// default policy.
type Options struct {
	Name    string
	Sim     string
	SimLoad string
	Policy  lease.Policy
	// Sched is the queue's policy.
	Sched queue.SchedConfig
	// DataDir reuses a data dir (to restart an agent); empty makes a new one.
	DataDir string
	// TmuxTmpDir shares one private tmux directory between agents; empty
	// makes one for this agent.
	TmuxTmpDir    string
	ProbeInterval time.Duration
	SessionPoll   time.Duration
	Cluster       *agent.ClusterSettings
	SSH           *agent.SSHSettings
	// Clock replaces the system clock.
	Clock clock.Clock
	// Users replaces the system account database (fake teammates).
	Users account.Users
	// Store replaces the bbolt store in DataDir (a storetest fake whose
	// disk fails on demand). To restart a node after a crash, put the
	// store its Crash returned here first.
	Store queue.Store
	// Limits bound the socket.
	Limits sockapi.Limits
	// Quiet drops the agent's log lines instead of sending them to t.Log.
	Quiet bool
	// MetricsListen serves /metrics there (e.g. 127.0.0.1:0); empty: off.
	MetricsListen string
	// Version is what the agent reports (default agent.DevVersion), and
	// TmuxPath the tmux its launcher runs (default "tmux" in PATH): for
	// tests that plant a version skew or a node without tmux.
	Version  string
	TmuxPath string
	// TmuxCallTimeout bounds each tmux call the agent makes as a user
	// (launch.Options.CallTimeout; default launch's).
	TmuxCallTimeout time.Duration
	// Tags are the node's pools.
	Tags []string
	// LedgerPerUserDay is the agent's cap on a person's ledger rows a day
	// (zero: the default).
	LedgerPerUserDay int
	// ServiceRules are the service supervisor's numbers (zero: defaults).
	ServiceRules service.Rules
	// Proxy runs the services proxy (config [services] proxy); nil: off.
	Proxy *agent.ProxySettings
	// SimOnClock stamps the simulated GPUs' snapshots (and so their
	// scripted utilization curves) with Clock instead of the system's, so
	// a test drives a known curve step by step.
	SimOnClock bool
}

// Node is a running agent and what a test needs to talk to it.
type Node struct {
	Agent    *agent.Agent
	Opts     Options
	Socket   string
	Client   *api.Client
	Sessions *launch.Launcher
	Probe    *sim.Sim

	tb      testing.TB
	stopped bool
	mu      sync.Mutex
}

// TmuxDir makes a private, world-writable TMUX_TMPDIR for a test and kills
// every tmux server in it at cleanup.
func TmuxDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dibs-tmux-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		socks, _ := filepath.Glob(filepath.Join(dir, "tmux-*", "*"))
		for _, s := range socks {
			exec.Command("tmux", "-S", s, "kill-server").Run()
		}
		os.RemoveAll(dir)
	})
	return dir
}

// PublicDir makes a temp dir every user can enter (tests that run clients as
// another user need to reach the socket).
func PublicDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dibs-test-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	tb.Cleanup(func() {
		// A root agent's exit-status directories (beside its socket) hold
		// a tmpfs per user: unmount them, or nothing under them goes.
		exits, _ := filepath.Glob(filepath.Join(dir, "*", "exit"))
		for _, e := range append(exits, filepath.Join(dir, "exit")) {
			launch.ReleaseStatusDir(e)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// Start starts an agent and stops it at cleanup.
func Start(tb testing.TB, o Options) *Node {
	tb.Helper()
	n := &Node{tb: tb}
	n.start(o)
	tb.Cleanup(func() { n.Stop() })
	return n
}

func (n *Node) start(o Options) {
	n.tb.Helper()
	p := n.prepare(o)
	if err := p.a.Start(context.Background()); err != nil {
		n.tb.Fatalf("start agent %s: %v", p.o.Name, err)
	}
	n.started(p)
}

// prepared is an agent built and not yet started.
type prepared struct {
	a        *agent.Agent
	o        Options
	sock     string
	sessions *launch.Launcher
	probe    *sim.Sim
}

// prepare builds the agent of o (on the test's goroutine: it may fail the
// test).
func (n *Node) prepare(o Options) prepared {
	tb := n.tb
	tb.Helper()
	if o.Name == "" {
		o.Name = "node01"
	}
	if o.Sim == "" {
		o.Sim = "4xH100-80GB"
	}
	if o.DataDir == "" {
		o.DataDir = filepath.Join(PublicDir(tb), "data")
	}
	if o.TmuxTmpDir == "" {
		o.TmuxTmpDir = TmuxDir(tb)
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 100 * time.Millisecond
	}
	if o.SessionPoll == 0 {
		o.SessionPoll = 100 * time.Millisecond
	}
	log := Logger(tb, o.Name, o.Quiet)
	simOpts := sim.Options{Spec: o.Sim, LoadFile: o.SimLoad, HostName: o.Name}
	if o.SimOnClock && o.Clock != nil {
		simOpts.Now = o.Clock.Now
	}
	probe, err := sim.New(simOpts)
	if err != nil {
		tb.Fatalf("sim %q: %v", o.Sim, err)
	}
	sockDir := filepath.Join(filepath.Dir(o.DataDir), "run-"+o.Name)
	statusDir := filepath.Join(sockDir, "exit")
	if err := os.MkdirAll(sockDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	sessions := launch.New(launch.Options{TmuxPath: o.TmuxPath, TmuxTmpDir: o.TmuxTmpDir, StatusDir: statusDir, CallTimeout: o.TmuxCallTimeout, Logf: func(f string, args ...any) { log.Warn(fmt.Sprintf(f, args...)) }})
	sock := filepath.Join(sockDir, "dibs.sock")
	a, err := agent.New(agent.Config{
		NodeName:      o.Name,
		DataDir:       o.DataDir,
		Socket:        sock,
		ProbeInterval: o.ProbeInterval,
		SessionPoll:   o.SessionPoll,
		Policy:        o.Policy,
		Sched:         o.Sched,
		Cluster:       o.Cluster,
		SSH:           o.SSH,
		Limits:        o.Limits,
		MetricsListen: o.MetricsListen,
		Version:       o.Version,
		Log:           log,
		Tags:          o.Tags,

		LedgerPerUserDay: o.LedgerPerUserDay,
		ServiceRules:     o.ServiceRules,
		Proxy:            o.Proxy,
	}, agent.Deps{Probe: probe, Sessions: sessions, Clock: o.Clock, Users: o.Users, Store: o.Store})
	if err != nil {
		tb.Fatalf("new agent %s: %v", o.Name, err)
	}
	return prepared{a: a, o: o, sock: sock, sessions: sessions, probe: probe}
}

func (n *Node) started(p prepared) {
	n.mu.Lock()
	n.Agent, n.Opts, n.Socket, n.Sessions, n.Probe, n.stopped = p.a, p.o, p.sock, p.sessions, p.probe, false
	n.Client = api.NewClient(p.sock)
	n.mu.Unlock()
}

// StartTogether starts agents at the same moment — their Start calls (and
// so their joins) run at once, as a cluster booted together does — and
// stops them at cleanup.
func StartTogether(tb testing.TB, opts ...Options) []*Node {
	tb.Helper()
	nodes := make([]*Node, len(opts))
	preps := make([]prepared, len(opts))
	for i, o := range opts {
		nodes[i] = &Node{tb: tb}
		preps[i] = nodes[i].prepare(o)
	}
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i := range preps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = preps[i].a.Start(context.Background())
		}()
	}
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			tb.Fatalf("start agent %s: %v", preps[i].o.Name, errs[i])
		}
		n.started(preps[i])
		tb.Cleanup(func() { n.Stop() })
	}
	return nodes
}

// Leave takes the node out of the cluster for good and stops its agent
// (`dibs leave`); idempotent with Stop and Crash.
func (n *Node) Leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.stopped = true
	if err := n.Agent.Leave(); err != nil {
		n.tb.Logf("leave %s: %v", n.Opts.Name, err)
	}
}

// Stop stops the agent as SIGTERM does, a restart: the others keep its
// work for the grace (idempotent). Its tmux sessions keep running.
func (n *Node) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.stopped = true
	if err := n.Agent.Stop(); err != nil {
		n.tb.Logf("stop %s: %v", n.Opts.Name, err)
	}
}

// Restart stops the agent and starts a new one on the same data dir.
func (n *Node) Restart() {
	n.tb.Helper()
	n.Stop()
	n.start(n.Opts)
}

// Tmux runs tmux against uid's server in this agent's private tmux dir.
func (n *Node) Tmux(uid int, args ...string) (string, error) {
	sock := launch.SocketPath(n.Opts.TmuxTmpDir, uid)
	out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	poll.Until(tb, within, what, cond)
}

// RequireTmux skips a test on a machine without tmux (fails it under CI,
// whose .ci/run installs tmux: prereq.Missing).
func RequireTmux(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		prereq.Missing(tb, "tmux is not installed: these tests start real tmux sessions (apt-get install tmux)")
	}
}

// ClusterOptions describe a cluster of agents on loopback.
type ClusterOptions struct {
	// Specs gives each node's simulated GPUs; its length is the cluster size.
	Specs []string
	// Key is the cluster key; nil makes one.
	Key  []byte
	Name string
	// Policy and Sched apply to every node.
	Policy lease.Policy
	Sched  queue.SchedConfig
	// Users are made-up accounts every node knows.
	Users Users
	Quiet bool
	// MetricsListen serves every node's /metrics (e.g. 127.0.0.1:0).
	MetricsListen string
	// Tags gives each node's pools, by index (nodes past its end have none).
	Tags [][]string
	// Protocols pins each node's agent protocol, by index (0, or nodes
	// past its end: this release's own): a node at peer.MinVersion speaks
	// as the previous release (agent.ClusterSettings.Protocol).
	Protocols []int
	// RequestTimeout is how long an agent waits for another's answer
	// (agent.ClusterSettings.RequestTimeout; zero: gossip's 3 s).
	RequestTimeout time.Duration
	// Stores gives each node's store, by index (nil, or nodes past its
	// end: a bbolt file in its data dir).
	Stores []queue.Store
	// TmuxPaths gives each node's tmux, by index (empty, or nodes past
	// its end: tmux in PATH).
	TmuxPaths []string
	// OwnTmux gives each node a tmux directory of its own, as separate
	// machines have: a service's session svc-NAME on one node is then not
	// the one of the same name on another.
	OwnTmux bool
	// ServiceRules are every node's supervisor's numbers (zero: defaults).
	ServiceRules service.Rules
	// Proxy runs every node's services proxy with these settings; each
	// node then gossips and proxies on a loopback address of its own
	// (node01 on 127.0.0.1, node02 on 127.0.0.2, …), as separate machines
	// have one each, so their proxies' ports do not collide.
	Proxy *agent.ProxySettings
}

// Cluster starts len(o.Specs) agents named node01, node02, … gossiping on
// 127.0.0.1 with one key, each joining the first, and waits until every
// agent sees every node alive with its GPUs.
func Cluster(tb testing.TB, o ClusterOptions) []*Node {
	tb.Helper()
	if o.Key == nil {
		o.Key = make([]byte, 32)
		for i := range o.Key {
			o.Key[i] = byte(i*7 + 3)
		}
	}
	if o.Name == "" {
		o.Name = "test"
	}
	tmux := TmuxDir(tb)
	var nodes []*Node
	seed := ""
	for i, spec := range o.Specs {
		bind := "127.0.0.1"
		if o.Proxy != nil {
			bind = fmt.Sprintf("127.0.0.%d", i+1)
		}
		cs := &agent.ClusterSettings{BindAddr: bind, Name: o.Name, Key: o.Key, Fast: true, RequestTimeout: o.RequestTimeout}
		if i < len(o.Protocols) {
			cs.Protocol = o.Protocols[i]
		}
		if seed != "" {
			cs.Join = []string{seed}
		}
		var users account.Users
		if o.Users != nil {
			users = o.Users
		}
		var tags []string
		if i < len(o.Tags) {
			tags = o.Tags[i]
		}
		tmuxPath := ""
		if i < len(o.TmuxPaths) {
			tmuxPath = o.TmuxPaths[i]
		}
		var store queue.Store
		if i < len(o.Stores) {
			store = o.Stores[i]
		}
		if o.OwnTmux && i > 0 {
			tmux = TmuxDir(tb)
		}
		n := Start(tb, Options{Name: fmt.Sprintf("node%02d", i+1), Sim: spec, Policy: o.Policy, Sched: o.Sched, Cluster: cs, TmuxTmpDir: tmux, Quiet: o.Quiet, Users: users, MetricsListen: o.MetricsListen, Tags: tags, TmuxPath: tmuxPath, Store: store,
			ServiceRules: o.ServiceRules, Proxy: o.Proxy})
		if seed == "" {
			seed = n.Agent.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	// Agents started one after another on a loaded 2-core machine under
	// -race (go test runs packages, and t.Parallel tests, side by side)
	// can take many probe rounds to see each other alive at once.
	WaitConverged(tb, nodes, 45*time.Second)
	return nodes
}

// WaitConverged waits until every node's board shows every node of nodes
// alive with its GPUs.
func WaitConverged(tb testing.TB, nodes []*Node, within time.Duration) {
	tb.Helper()
	Eventually(tb, within, "every agent to see every node alive", func() bool {
		for _, n := range nodes {
			b, _ := n.Agent.For(os.Getuid()).Board(context.Background())
			alive := map[string]bool{}
			for _, bn := range b.Nodes {
				if bn.State == api.NodeAlive && len(bn.GPUs) > 0 {
					alive[bn.Name] = true
				}
			}
			for _, m := range nodes {
				if !alive[m.Opts.Name] {
					return false
				}
			}
		}
		return true
	})
}

// Crash stops the agent the way a crash or a power cut would: no graceful
// leave, so the others must detect it.
func (n *Node) Crash() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.stopped = true
	n.Agent.Crash()
}

// Logger sends an agent's log lines to tb.Log, prefixed with its name, or
// drops them when quiet. Lines that arrive after the test ended are dropped
// too (agents log while they stop).
func Logger(tb testing.TB, name string, quiet bool) *slog.Logger {
	if quiet {
		return slog.New(slog.DiscardHandler)
	}
	w := &tbWriter{tb: tb, prefix: "[" + name + "] "}
	tb.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

type tbWriter struct {
	tb     testing.TB
	prefix string
	mu     sync.Mutex
	done   bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// As is the node's service bound to c as given, as the demo's teammates
// use it: for tests that act for made-up users (see Users).
func (n *Node) As(c lease.Caller) *core.Bound { return n.Agent.Service().ForCaller(c) }

// Me is the node's service bound to the test's own uid, as the socket
// would bind it.
func (n *Node) Me() *core.Bound { return n.Agent.For(os.Getuid()) }

// Board is the node's board as the test's own user sees it.
func (n *Node) Board() api.Board {
	b, _ := n.Me().Board(context.Background())
	return b
}

// Queue is `dibs queue` at this node.
func (n *Node) Queue() api.Queue {
	q, _ := n.Me().Queue(context.Background())
	return q
}

// Users are made-up accounts, name to uid, that every agent of a test knows
// (so a claim a made-up user makes at one node is honoured at another, as
// for real people); everyone else is looked up in the system's database.
type Users map[string]int

func (u Users) user(name string, uid int) launch.User {
	return launch.User{Name: name, UID: uid, GID: uid, Groups: []int{uid}, Home: "/nonexistent", Shell: "/bin/sh"}
}

// LookupUID implements account.Users.
func (u Users) LookupUID(uid int) (launch.User, error) {
	for name, id := range u {
		if id == uid {
			return u.user(name, id), nil
		}
	}
	return account.System{}.LookupUID(uid)
}

// LookupUser implements account.Users.
func (u Users) LookupUser(name string) (launch.User, error) {
	if id, ok := u[name]; ok {
		return u.user(name, id), nil
	}
	return account.System{}.LookupUser(name)
}

// InGroup implements account.Users.
func (u Users) InGroup(usr launch.User, group string) bool {
	return account.System{}.InGroup(usr, group)
}

// BoardAs is the node's board as c sees it.
func (n *Node) BoardAs(c lease.Caller) api.Board {
	b, _ := n.As(c).Board(context.Background())
	return b
}

// Tick moves a fake clock forward by step until cond holds, giving the
// agent's loops a moment to run between steps; it fails after within of
// real time. Tests of what the clock drives (warnings, ends, graces) run on
// it in milliseconds instead of sleeping through minutes.
func Tick(tb testing.TB, fake *clock.Fake, step, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		fake.Advance(step)
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("timed out after %s (fake clock at %s) waiting for %s", within, fake.Now().Format(time.TimeOnly), what)
}
