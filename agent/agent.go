// Package agent is the dibs daemon: one per node. It wires the probe loop, the
// lease table and its store, the session launcher, the local API on a unix
// socket, the gossip cluster and the SSH front door, and it is the only place
// that owns goroutines for all of them. The rules it applies live in lease;
// this package does the I/O around them.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/lease/store"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Version is the dibs version the agent reports.
const Version = "0.1.0"

// Config is everything the agent is told by flags and the config file.
type Config struct {
	NodeName string
	// DataDir holds the bbolt store.
	DataDir string
	// Socket is the unix socket of the local API; empty serves none (tests
	// that talk to the agent in-process).
	Socket        string
	ProbeInterval time.Duration
	Policy        lease.Policy
	// SessionPoll is how often a running session is checked for its end.
	SessionPoll time.Duration
	// Cluster, when set, joins a gossip cluster.
	Cluster *ClusterSettings
	// SSH, when set, serves the board over SSH.
	SSH *SSHSettings
	// Sched is the queue's policy: fair-share, quotas, reclaim.
	Sched lease.SchedConfig
	// PreemptSignal tells a borrowed or idle lease's session to checkpoint
	// (default SIGUSR1); the lease ends Policy.PreemptGrace later.
	PreemptSignal syscall.Signal
	Logf          func(format string, args ...any)
}

// Deps are the parts the agent drives; tests and the demo swap them.
type Deps struct {
	Probe nodeprobe.Probe
	// Sessions starts and watches tmux sessions; nil means a launch.Launcher.
	Sessions Sessions
	// Users resolves accounts; nil means the system account database.
	Users Users
	// Now is the clock; nil means time.Now. It must carry a monotonic reading
	// in production so a wall-clock jump cannot end a lease early.
	Now func() time.Time
}

// Sessions is the part of launch.Launcher the agent uses. All methods may be
// called from any goroutine and may block for a tmux round trip.
type Sessions interface {
	Start(ctx context.Context, s launch.Spec) (launch.Session, error)
	Exists(ctx context.Context, u launch.User, name string) (bool, error)
	Message(ctx context.Context, u launch.User, name, text string) error
	Signal(ctx context.Context, u launch.User, name string, sig syscall.Signal) error
	Kill(ctx context.Context, u launch.User, name string) error
	Watch(ctx context.Context, u launch.User, name string, interval time.Duration) <-chan struct{}
	AttachCommand(u launch.User, name string) []string
}

// Users resolves the accounts behind uids; the SSH front door also needs names.
type Users interface {
	LookupUID(uid int) (launch.User, error)
	LookupUser(name string) (launch.User, error)
	// InGroup reports whether the account is a member of the named group.
	InGroup(u launch.User, group string) bool
}

// Agent is one node's daemon.
type Agent struct {
	cfg   Config
	deps  Deps
	logf  func(string, ...any)
	now   func() time.Time
	store *store.Bolt
	users *userCache

	startedAt time.Time
	bootID    string

	mu      sync.Mutex
	table   *lease.Table
	snap    nodeprobe.Snapshot
	idle    *lease.IdleTracker
	judged  map[int]lease.Judgement
	version uint64
	changed chan struct{}
	notices map[int][]notice
	// watching holds a cancel for each lease whose session is watched.
	watching map[string]context.CancelFunc
	// queue holds the requests submitted here (their source of truth).
	queue    map[string]lease.QueueEntry
	queueSeq uint64
	// ended remembers how queued runs' leases ended, for their origins.
	ended []endedLease
	// schedKick wakes the scheduler; inflight are starts it has sent and
	// not yet seen in the cluster's state.
	schedKick chan struct{}
	inflight  map[string]inflightStart
	// usage caches this node's decayed usage (it reads the ledger).
	usageMu    sync.Mutex
	usageAt    time.Time
	usage      atomic.Pointer[lease.Usage]
	usageDirty atomic.Bool

	cluster clusterLink

	ln      net.Listener
	httpSrv *http.Server
	ssh     *sshServer

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopping atomic.Bool
}

type notice struct {
	at   time.Time
	text string
}

// New checks the configuration and builds an agent; Start runs it.
func New(cfg Config, deps Deps) (*Agent, error) {
	if err := ValidNodeName(cfg.NodeName); err != nil {
		return nil, err
	}
	if deps.Probe == nil {
		return nil, errors.New("agent needs a GPU probe")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("agent needs a data dir")
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.SessionPoll <= 0 {
		cfg.SessionPoll = 500 * time.Millisecond
	}
	if cfg.Policy == (lease.Policy{}) {
		cfg.Policy = lease.DefaultPolicy()
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("lease policy: %w", err)
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.PreemptSignal == 0 {
		cfg.PreemptSignal = syscall.SIGUSR1
	}
	cfg.Sched.PreemptGrace = cfg.Policy.PreemptGrace
	cfg.Sched = cfg.Sched.WithDefaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Users == nil {
		deps.Users = SystemUsers{}
	}
	if deps.Sessions == nil {
		deps.Sessions = launch.New(launch.Options{Logf: cfg.Logf})
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("boot id: %w", err)
	}
	a := &Agent{
		cfg:       cfg,
		deps:      deps,
		logf:      cfg.Logf,
		now:       deps.Now,
		users:     newUserCache(deps.Users, deps.Now),
		bootID:    hex.EncodeToString(b[:]),
		idle:      lease.NewIdleTracker(),
		changed:   make(chan struct{}),
		notices:   make(map[int][]notice),
		watching:  make(map[string]context.CancelFunc),
		queue:     make(map[string]lease.QueueEntry),
		inflight:  make(map[string]inflightStart),
		cluster:   noCluster{},
		schedKick: make(chan struct{}, 1),
	}
	return a, nil
}

// Node is this agent's node name.
func (a *Agent) Node() string { return a.cfg.NodeName }

// Socket is where the local API listens.
func (a *Agent) Socket() string { return a.cfg.Socket }

// Start opens the store (refusing a locked or damaged one), rebuilds the lease
// table, re-adopts running sessions, takes a first snapshot, then serves.
// It returns once everything is up; Stop ends it.
func (a *Agent) Start(ctx context.Context) error {
	st, err := store.Open(a.cfg.DataDir)
	if err != nil {
		return err
	}
	a.store = st
	leases, last, err := st.Load()
	if err != nil {
		st.Close()
		return err
	}
	entries, seq, err := st.Entries()
	if err != nil {
		st.Close()
		return err
	}
	for _, e := range entries {
		a.queue[e.ID] = e
	}
	a.queueSeq = seq
	now := a.now()
	a.startedAt = now
	a.table = lease.NewTable(a.cfg.NodeName, leases, last, now)
	snap, err := a.deps.Probe.Snapshot(ctx)
	if err != nil {
		st.Close()
		return fmt.Errorf("first probe: %w", err)
	}
	snap.Host.Name = a.cfg.NodeName
	a.snap = snap
	a.idle.Observe(snap, a.cfg.Policy)
	a.judged = lease.Judge(snap, a.table.List(), a.idle, now, a.cfg.Policy)

	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.readopt(ctx)

	if a.cfg.Socket != "" {
		if err := a.listen(); err != nil {
			a.cancel()
			st.Close()
			return err
		}
	}
	if a.cfg.Cluster != nil {
		cl, err := a.startCluster(*a.cfg.Cluster)
		if err != nil {
			a.stopListening()
			a.cancel()
			st.Close()
			return err
		}
		a.cluster = cl
	}
	if a.cfg.SSH != nil {
		if err := a.startSSH(*a.cfg.SSH); err != nil {
			a.cluster.shutdown(false)
			a.stopListening()
			a.cancel()
			st.Close()
			return err
		}
	}
	a.wg.Add(2)
	go a.loop()
	go a.schedLoop()
	a.logf("dibs agent %s on %s: %d GPUs (%s), %d leases, socket %s", Version, a.cfg.NodeName, len(snap.GPUs), snap.Host.Backend, a.table.Len(), a.cfg.Socket)
	return nil
}

// Stop ends the agent: a graceful cluster leave, the socket closed, the store
// closed. Sessions keep running; a restarted agent re-adopts them.
func (a *Agent) Stop() error { return a.stop(true) }

func (a *Agent) stop(graceful bool) error {
	if a.cancel == nil || !a.stopping.CompareAndSwap(false, true) {
		return nil
	}
	a.cluster.shutdown(graceful)
	if a.ssh != nil {
		a.ssh.close()
	}
	a.stopListening()
	a.cancel()
	a.wg.Wait()
	a.mu.Lock()
	for id, cancel := range a.watching {
		cancel()
		delete(a.watching, id)
	}
	a.mu.Unlock()
	err := a.store.Close()
	a.deps.Probe.Close()
	return err
}

// Crash stops the agent without a graceful cluster leave, as a killed
// process would: the other agents must notice it through failure detection.
// Tests and fault drills use it.
func (a *Agent) Crash() error {
	if a.cancel == nil {
		return nil
	}
	return a.stop(false)
}

// bumpLocked records a change: board watchers wake and the state version
// moves. Callers hold a.mu.
func (a *Agent) bumpLocked() {
	a.version++
	close(a.changed)
	a.changed = make(chan struct{})
}

// changes returns a channel closed at the next change.
func (a *Agent) changes() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// leaseChanged is called after any lease change, without a.mu held: local
// watchers wake and the cluster hears of it at once.
func (a *Agent) leaseChanged() {
	a.cluster.publish(true)
	a.kickScheduler()
}

// noticeLocked queues a message for a user's board and `dibs ls`.
func (a *Agent) noticeLocked(uid int, text string) {
	n := append(a.notices[uid], notice{at: a.now(), text: text})
	if len(n) > 10 {
		n = n[len(n)-10:]
	}
	a.notices[uid] = n
}

// loop probes at the configured interval and applies the clock's steps.
func (a *Agent) loop() {
	defer a.wg.Done()
	t := time.NewTicker(a.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		a.probeOnce()
		a.tick()
	}
}

// probeOnce takes a snapshot and wakes the board only when something a
// person would see changed.
func (a *Agent) probeOnce() {
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	snap, err := a.deps.Probe.Snapshot(ctx)
	cancel()
	if err != nil {
		a.logf("probe: %v", err)
		return
	}
	snap.Host.Name = a.cfg.NodeName
	a.mu.Lock()
	a.idle.Observe(snap, a.cfg.Policy)
	visible := telemetryChanged(a.snap, snap)
	a.snap = snap
	judged := lease.Judge(snap, a.table.List(), a.idle, a.now(), a.cfg.Policy)
	if !sameJudgements(a.judged, judged) {
		visible = true
	}
	a.judged = judged
	if visible {
		a.bumpLocked()
	}
	a.mu.Unlock()
	if visible {
		a.cluster.publish(false)
	}
}

// telemetryChanged reports a difference a board would show.
func telemetryChanged(old, cur nodeprobe.Snapshot) bool {
	if len(old.GPUs) != len(cur.GPUs) {
		return true
	}
	for i := range cur.GPUs {
		o, c := &old.GPUs[i], &cur.GPUs[i]
		if o.MemoryUsedMiB != c.MemoryUsedMiB || !eqInt(o.UtilizationPct, c.UtilizationPct) ||
			!eqInt(o.TemperatureC, c.TemperatureC) || len(o.Processes) != len(c.Processes) {
			return true
		}
		for j := range c.Processes {
			if o.Processes[j] != c.Processes[j] {
				return true
			}
		}
	}
	return false
}

func eqInt(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameJudgements(a, b map[int]lease.Judgement) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || len(x.Flags) != len(y.Flags) {
			return false
		}
		for i := range x.Flags {
			if x.Flags[i] != y.Flags[i] {
				return false
			}
		}
	}
	return true
}
