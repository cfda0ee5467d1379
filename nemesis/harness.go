package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// Options describe a run.
type Options struct {
	// Nodes and GPUs (per node) size the cluster: 3 × 8 by default.
	Nodes, GPUs int
	// Clients is how many clients act at once (default 8).
	Clients int
	// Duration is how long clients and nemesis run at least; the run goes
	// on past it until MinOps operations were done.
	Duration time.Duration
	MinOps   int
	// Faults are the kinds the nemesis picks from (default all), one at a
	// time, in rounds of every kind; each is held 1–9 s (by kind), healed,
	// its convergence measured, then followed by a calm of 0.5–2 s.
	Faults []FaultKind
	// Services is how many services the service client keeps running
	// (`dibs serve`, stopped now and then and started anew; default 3;
	// negative: none).
	Services int
	// Seed makes the choices of clients and nemesis repeatable (the
	// agents' own timing is not). Zero picks one and logs it.
	Seed uint64
	// Progress, when set, is told every few seconds how the run goes.
	Progress func(string)
}

// AllFaults are every fault the nemesis knows.
func AllFaults() []FaultKind {
	return []FaultKind{FaultKill, FaultRestart, FaultPause, FaultPartition, FaultLoss, FaultDelay, FaultDuplicate,
		FaultClockStep, FaultFsync, FaultDiskFull, FaultSlowDisk, FaultReboot, FaultPowerCut}
}

// ConvergeWithin is how soon after a heal every board must show the
// owners' truth.
const ConvergeWithin = 5 * time.Second

// member is one node of the cluster under test.
type member struct {
	name   string
	port   int
	node   *agenttest.Node
	clock  *nodeClock
	client *api.Client

	mu    sync.Mutex // guards store and boot against a kill
	store *recordedStore
	boot  int
	// tmux is the node's own TMUX_TMPDIR: its tmux servers are the
	// node's processes, which a reboot or a power cut ends.
	tmux string
	// kernelBoots counts the node's reboots, for its boot ids.
	kernelBoots int
}

type harness struct {
	tb      testing.TB
	opts    Options
	rec     *recorder
	net     *network
	rng     *rand.Rand
	members []*member
	opsDone atomic.Int64
	sched   queue.SchedConfig
	// svc is the service client (nil without services); partitions
	// counts the partitions struck, every other one held past the grace.
	svc        *svcClient
	partitions int
}

// Run starts the cluster, lets clients and nemesis loose on it for
// o.Duration, heals everything, waits for it to settle, and returns what
// happened. Every agent it starts is stopped when tb's test ends.
func Run(tb testing.TB, o Options) *History {
	tb.Helper()
	h := startCluster(tb, o)
	o = h.opts

	stop := make(chan struct{})
	var clients sync.WaitGroup
	for i := range o.Clients {
		c := &client{id: i, h: h, rng: rand.New(rand.NewPCG(o.Seed, uint64(i)+100))}
		clients.Add(1)
		go func() { defer clients.Done(); c.run(stop) }()
	}
	var obs *observer
	stopSvc, stopObs := make(chan struct{}), make(chan struct{})
	var svcs sync.WaitGroup
	if o.Services > 0 {
		h.svc = newSvcClient(h)
		obs = newObserver(h.svc)
		svcs.Add(2)
		go func() { defer svcs.Done(); obs.run(stopObs) }()
		go func() { defer svcs.Done(); h.svc.run(stopSvc) }()
	}
	deadline := time.Now().Add(o.Duration)
	lastProgress := time.Now()
	// Faults come in rounds: every kind once, in a random order, and the
	// first round is finished even past the deadline, so even a short run
	// injects each.
	var round []FaultKind
	rounds := 0
	for time.Now().Before(deadline) || h.opsDone.Load() < int64(o.MinOps) || (rounds == 1 && len(round) > 0) {
		if len(round) == 0 {
			rounds++
			round = slices.Clone(o.Faults)
			h.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		h.fault(round[0])
		round = round[1:]
		if o.Progress != nil && time.Since(lastProgress) > 10*time.Second {
			lastProgress = time.Now()
			o.Progress(fmt.Sprintf("%s: %d operations, %d faults", time.Since(h.rec.start).Round(time.Second), h.opsDone.Load(), len(h.rec.history().Faults)))
		}
	}
	close(stop)
	close(stopSvc)
	clients.Wait()
	if obs != nil {
		// Every service still running must answer within its bound of
		// the last heal: the observer watches that long at most. Before
		// settle's last reads, which must stay the history's last word
		// (a queued run that ended after them would look undone).
		h.svc.settle(obs, serviceBound(h.rec.h.Sched, svcRules, CheckOptions{}))
		close(stopObs)
	}
	svcs.Wait()
	h.rec.mu.Lock()
	h.rec.h.SvcEnd = h.rec.now()
	h.rec.mu.Unlock()
	h.settle()
	return h.rec.history()
}

// start makes the cluster: every agent knows every other's address, so
// whichever restarts finds the rest.
func (h *harness) start() {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(h.rng.Uint32())
	}
	policy := lease.DefaultPolicy()
	policy.EndAction = lease.ActionEnd
	policy.WarnBefore = time.Second
	var opts []agenttest.Options
	for i := range h.opts.Nodes {
		m := &member{name: fmt.Sprintf("node%02d", i+1), port: agenttest.FreePort(h.tb), clock: newNodeClock(clock.Real()), tmux: agenttest.TmuxDir(h.tb)}
		h.members = append(h.members, m)
		h.net.name(fmt.Sprintf("127.0.0.1:%d", m.port), m.name)
		h.rec.h.GPUs[m.name] = h.opts.GPUs
	}
	for _, m := range h.members {
		var join []string
		for _, o := range h.members {
			if o != m {
				join = append(join, fmt.Sprintf("127.0.0.1:%d", o.port))
			}
		}
		m.store = &recordedStore{Store: storetest.New(storetest.Options{Sleep: time.Sleep}), node: m.name, rec: h.rec, mono: m.clock.sys.Mono}
		opts = append(opts, agenttest.Options{
			Name: m.name, Sim: fmt.Sprintf("%dxH100-80GB", h.opts.GPUs), Policy: policy, Sched: h.sched,
			TmuxTmpDir: m.tmux, Clock: m.clock, Store: m.store, Quiet: true, ServiceRules: svcRules,
			Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", BindPort: m.port, Join: join, Name: "nemesis", Key: key, Fast: true, Faults: h.net.For(m.name)},
		})
	}
	nodes := agenttest.StartTogether(h.tb, opts...)
	for i, m := range h.members {
		m.node = nodes[i]
		m.client = api.NewClient(nodes[i].Socket)
	}
	agenttest.WaitConverged(h.tb, nodes, 20*time.Second)
}

// restart stops m's agent as SIGTERM does (a restart: it steps out of the
// cluster without leaving; its store is closed cleanly) and returns what
// starts it again on what its store holds.
func (h *harness) restart(m *member) func() {
	m.node.Stop()
	durable := m.crashStore() // closed cleanly: everything written is there
	return func() { h.reopen(m, durable) }
}

// kill crashes m's agent (only what its store made durable survives) and
// returns the restart.
func (h *harness) kill(m *member) func() {
	durable := m.crashStore()
	m.node.Crash()
	return func() { h.reopen(m, durable) }
}

// crashStore ends m's store as a crash would and returns the store of what
// it made durable.
func (m *member) crashStore() *storetest.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.store.Crash()
}

// reopen starts m's agent again, its next boot, on durable.
func (h *harness) reopen(m *member, durable *storetest.Store) {
	h.nextBoot(m, durable)
	m.node.Restart()
}

// nextBoot gives m the store of its next boot, recorded.
func (h *harness) nextBoot(m *member, durable *storetest.Store) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.boot++
	m.store = &recordedStore{Store: durable, node: m.name, boot: m.boot, rec: h.rec, mono: m.clock.sys.Mono}
	m.node.Opts.Store = m.store
}

// reboot reboots m cleanly (its agent stopped as SIGTERM stops it, its
// store closed whole) or, when cut, cuts its power (the agent dies at
// once, its store keeps only what it synced); either way every process of
// the node ends, and the returned heal brings it back under a new kernel
// boot id.
//
// What a cut loses, honestly modelled: storetest makes a write durable —
// synced, as bbolt fsyncs each commit before it returns — at the instant
// the write returns nil, and never holds anything written and not yet
// synced; so what survives a cut is exactly what Crash keeps (every write
// that returned, none in flight). A kill here is thus as harsh on the
// store as a power cut (a real kill -9 keeps the page cache, so it keeps
// more); what a cut takes beyond a kill is everything outside the store:
// every session and its processes, and the boot the leases were written
// under. The files the agent writes beside its store (the boot id, the
// runs kept for export) are on the real disk here: the FUSE power-cut
// test is what drops their unsynced writes.
func (h *harness) reboot(m *member, cut bool) func() {
	var heal func()
	if cut {
		heal = h.kill(m)
	} else {
		heal = h.restart(m)
	}
	powerOff(m.tmux)
	return func() {
		// A session the dying agent was still starting may have come up
		// after the power went: it did not outlive the reboot either.
		powerOff(m.tmux)
		m.kernelBoots++
		m.clock.Reboot(fmt.Sprintf("nemesis-%s-boot-%d", m.name, m.kernelBoots))
		heal()
	}
}

// powerOff ends every tmux server under dir, and so every session and
// every process in them, as a node's power going out does.
func powerOff(dir string) {
	socks, _ := filepath.Glob(filepath.Join(dir, "tmux-*", "*"))
	for _, s := range socks {
		exec.Command("tmux", "-S", s, "kill-server").Run()
	}
}

// settle heals everything, waits until the boards agree, and lets the
// queue drain, so the history ends in a known state.
func (h *harness) settle() {
	h.net.heal()
	for _, m := range h.members {
		m.clock.Resume()
		m.clock.Step(0)
		h.net.isolate(m.name, false)
	}
	h.converge("settle")
	// A last read of every node by its own agent: the final word.
	for _, m := range h.members {
		op := Op{Client: -1, Kind: OpRead, Via: m.name, Node: m.name, Call: h.rec.now()}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := m.client.Board(ctx)
		cancel()
		op.Return = h.rec.now()
		if err != nil {
			op.Outcome, op.Return, op.Err = Unknown, Never, err.Error()
		} else {
			op.Holders = holders(b, m.name)
		}
		h.rec.op(op)
	}
	// And every origin's own queue: entries the checker must find.
	final := map[string][]string{}
	for _, m := range h.members {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		q, err := m.client.Queue(ctx)
		cancel()
		if err != nil {
			continue
		}
		ids := []string{}
		for _, e := range q.Entries {
			if strings.HasPrefix(e.ID, m.name+"-q") {
				ids = append(ids, e.ID)
			}
		}
		final[m.name] = ids
	}
	h.rec.mu.Lock()
	h.rec.h.FinalEntries = final
	h.rec.mu.Unlock()
}

// startCluster starts the agents of a run (o's zero fields take their
// defaults) and waits until each sees every other.
func startCluster(tb testing.TB, o Options) *harness {
	tb.Helper()
	agenttest.RequireTmux(tb)

	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.GPUs == 0 {
		o.GPUs = 8
	}
	if o.Clients == 0 {
		o.Clients = 8
	}
	if o.Services == 0 {
		o.Services = 3
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults()
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	tb.Logf("nemesis: seed %d (rerun with -nemesis.seed %d)", o.Seed, o.Seed)
	h := &harness{tb: tb, opts: o, rec: newRecorder(), net: newNetwork(o.Seed), rng: rand.New(rand.NewPCG(o.Seed, 1))}
	h.sched = queue.SchedConfig{ReservationTTL: 5 * time.Second, LostAfter: 5 * time.Second, PreemptGrace: lease.DefaultPolicy().PreemptGrace}
	h.rec.h.Sched = h.sched.WithDefaults()
	h.rec.h.SvcRules, h.rec.h.SvcRound = svcRules, svcRound
	h.rec.h.GPUs = map[string]int{}
	h.start()
	return h
}
