// Package agent is the dibs daemon, composed: one per node. It opens the
// store, builds the parts — the node's single writer (agent/node), the
// queue's origin (agent/origin), the scheduler (agent/sched), the service
// they serve through (agent/core) and the protocol between agents
// (agent/peer) — connects them to the gossip cluster, and opens the front
// doors (agent/sockapi, agent/sshd). It holds no rules and no state of its
// own; New builds, Start runs, Stop ends.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/agent/metrics"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/agent/proxy"
	"github.com/dibs-gpu/dibs/agent/sched"
	"github.com/dibs-gpu/dibs/agent/sockapi"
	"github.com/dibs-gpu/dibs/agent/sshd"
	"github.com/dibs-gpu/dibs/base/lograte"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
	"github.com/dibs-gpu/dibs/store"
)

// DevVersion is what an agent built without a stamped version reports.
const DevVersion = "dev"

// SSHSettings configure the SSH front door.
type SSHSettings = sshd.Settings

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
	Sched queue.SchedConfig
	// PreemptSignal tells a borrowed or idle lease's session to checkpoint
	// (default SIGUSR1); the lease ends Policy.PreemptGrace later.
	PreemptSignal syscall.Signal
	// StatusDir is where queued runs record their exit status (default:
	// "exit" beside the socket, e.g. /run/dibs/exit).
	StatusDir string
	// Limits bound what one user may hold open on the socket.
	Limits sockapi.Limits
	// Version is what the agent reports (`dibs status`, doctor).
	Version string
	// MetricsListen, when set, serves Prometheus metrics at
	// http://MetricsListen/metrics (HOST:PORT; port 0 picks one).
	MetricsListen string
	// Tags are the node's pools ("h100", "nvlink"): claims, runs and
	// bookings may ask for them (--pool, --tag). They travel with the
	// node's snapshot (nodeprobe.Host.Tags).
	Tags []string
	// NoCPUBinding starts every session unbound, whatever its GPUs' local
	// cores (config `[leases] bind_cpus = false`): for a node whose
	// topology the probe gets wrong, or whose jobs pin themselves.
	NoCPUBinding bool
	Log          *slog.Logger
	// EventKeep is how long the node keeps its events (default 14 days).
	EventKeep time.Duration
	// WebhookBackoff is the wait before each retry of a webhook post
	// (default 2s, 10s, 30s, 2m).
	WebhookBackoff []time.Duration
	// LedgerKeep is how long ended leases are kept one by one (default
	// lease.DefaultLedgerKeep, 90 days); older ones are folded into a row
	// per person and day.
	LedgerKeep time.Duration
	// EventsPerUserHour caps the events a person's own actions add to the
	// log per hour (default events.DefaultPerUserHour).
	EventsPerUserHour int
	// LedgerPerUserDay is how many ended leases of one person are kept one
	// by one per day (default lease.DefaultLedgerPerUserDay).
	LedgerPerUserDay int
	// ServiceRules are the service supervisor's numbers (zero fields:
	// service.DefaultRules); tests shorten them.
	ServiceRules service.Rules
	// WebhookAllow, when not empty, is the admin's list of the only
	// destinations webhooks may reach.
	WebhookAllow events.Allowlist
	// Proxy, when set, runs the services proxy (config [services] proxy):
	// one port per service on this node, forwarding to its replicas.
	Proxy *ProxySettings
}

// ProxySettings configure the services proxy (agent/proxy). It listens
// on the address the agent gossips on (every address alone).
type ProxySettings struct {
	// Ports is the range: the backend port, then the services' ports.
	Ports service.PortRange
	// Zero bounds take the proxy's defaults.
	MaxConns, MaxPerService  int
	DialTimeout, IdleTimeout time.Duration
}

// Deps are the parts the agent drives; tests and the demo swap them.
type Deps struct {
	Probe nodeprobe.Probe
	// Sessions starts and watches tmux sessions; nil means a launch.Launcher.
	Sessions Sessions
	// Users resolves accounts; nil means the system account database.
	Users account.Users
	// Clock is the time; nil means the system clock.
	Clock clock.Clock
	// Store keeps leases; nil means the bbolt store in DataDir.
	Store queue.Store
	// TryNVML opens NVML and closes it again, so the doctor can say why a
	// node fell back to nvidia-smi; nil skips that (the agent itself never
	// links NVML: the command that builds it does).
	TryNVML func(ctx context.Context) error
	// Rand draws a number in [0, 1) for jitter (the spacing of a requeued
	// run's retries); nil means math/rand/v2.
	Rand func() float64
}

// Sessions is what the agent needs of launch.Launcher.
type Sessions interface {
	node.Sessions
	TerminalCommand(u launch.User, term string, argv []string) (*exec.Cmd, error)
	// ReadUserFile and ReadLog read what users keep in their homes, as
	// them: authorized_keys for the SSH front door, runs' output for
	// `dibs logs`.
	ReadUserFile(ctx context.Context, u launch.User, rel string, max int64) ([]byte, error)
	ReadLog(ctx context.Context, u launch.User, session, part string, off int64, n int) (launch.LogChunk, error)
}

// Agent is one node's daemon.
type Agent struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	store    queue.Store
	changed  *notify.Signal
	accounts *account.Directory
	node     *node.Node
	origin   *origin.Origin
	sched    *sched.Scheduler
	peers    *peer.Mux
	events   *events.Log
	webhooks *events.Webhooks
	fanout   *events.Fanout
	svc      *core.Service
	// cluster is set once serve has joined: memberlist serves peers'
	// requests (which reach leasesChanged) from the moment it starts, so it
	// is read and written atomically.
	cluster atomic.Pointer[clusterLink]
	sock    *sockapi.Server
	ssh     *sshd.Server
	// metrics is nil unless Config.MetricsListen is set.
	metrics *metrics.Metrics
	// health is metrics once built (after the node opens and its
	// supervisors start), for their HealthChecked hook.
	health     atomic.Pointer[metrics.Metrics]
	metricsSrv *metrics.Server
	// proxy is nil unless Config.Proxy is set.
	proxy  *proxy.Proxy
	doctor *doctorParts

	ctx       context.Context
	cancel    context.CancelFunc
	schedOK   chan struct{}
	watchDone chan struct{}
	stopped   bool
	// leaveCh is closed by `dibs leave` (LeaveRequested).
	leaveCh   chan struct{}
	leaveOnce sync.Once
	// ledgerDone closes when keepLedger has returned.
	ledgerDone chan struct{}
	// beatDone closes when the fence's heartbeat has stopped (fence.go).
	beatDone chan struct{}
	// seen are the other members this agent has seen (fence.go).
	seen seenMembers
	// moveLog holds back a move's warning, repeated at every scheduling
	// pass while no node fits it, to one a minute per service copy.
	moveLog *lograte.Limiter
}

// New checks the configuration and builds an agent; Start runs it.
func New(cfg Config, deps Deps) (*Agent, error) {
	if err := words.ValidNodeName(cfg.NodeName); err != nil {
		return nil, err
	}
	if deps.Probe == nil {
		return nil, errors.New("agent needs a GPU probe")
	}
	if cfg.DataDir == "" && deps.Store == nil {
		return nil, errors.New("agent needs a data dir")
	}
	if cfg.Policy.IsZero() {
		cfg.Policy = lease.DefaultPolicy()
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("lease policy: %w", err)
	}
	if err := lease.CheckTags(cfg.Tags); err != nil {
		return nil, fmt.Errorf("node tags: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = DevVersion
	}
	cfg.Sched.PreemptGrace = cfg.Policy.PreemptGrace
	if cfg.Sched.Pools == nil {
		cfg.Sched.Pools = cfg.Policy.Pools
	}
	cfg.Sched = cfg.Sched.WithDefaults()
	if deps.Clock == nil {
		deps.Clock = clock.Real()
	}
	if deps.Rand == nil {
		deps.Rand = rand.Float64
	}
	if deps.Sessions == nil {
		dir := cfg.StatusDir
		if dir == "" && cfg.Socket != "" {
			dir = filepath.Join(filepath.Dir(cfg.Socket), "exit")
		}
		deps.Sessions = launch.New(launch.Options{StatusDir: dir, Logf: logf(cfg.Log)})
	}
	return &Agent{cfg: cfg, deps: deps, log: cfg.Log, leaveCh: make(chan struct{})}, nil
}

// logf adapts a logger for the parts that take printf-style lines.
func logf(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Warn(fmt.Sprintf(format, args...)) }
}

// Node is this agent's node name.
func (a *Agent) Node() string { return a.cfg.NodeName }

// Socket is where the local API listens.
func (a *Agent) Socket() string { return a.cfg.Socket }

// Service is the agent's operations, for in-process front ends (the demo,
// tests).
func (a *Agent) Service() *core.Service { return a.svc }

// For binds the service to a uid, as the socket does for its callers.
func (a *Agent) For(uid int) *core.Bound { return a.svc.ForUID(uid) }

// GossipAddr is the HOST:PORT this agent gossips on, empty when it runs
// alone. Other agents join it there.
func (a *Agent) GossipAddr() string {
	cl := a.cluster.Load()
	if cl == nil {
		return ""
	}
	return cl.addr()
}

// MetricsAddr is where /metrics is served (HOST:PORT), empty when off.
func (a *Agent) MetricsAddr() string {
	if a.metricsSrv == nil {
		return ""
	}
	return a.metricsSrv.Addr()
}

// SSHAddr is where the SSH front door listens, empty when it is off.
func (a *Agent) SSHAddr() string {
	if a.ssh == nil {
		return ""
	}
	return a.ssh.Addr()
}

// canWrite refuses changes for a uid this agent cannot act for.
func canWrite(uid int) error {
	if euid := os.Geteuid(); euid != 0 && euid != uid {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("this agent runs as uid %d, not as root, and serves only that user: ask whoever installs dibs to run it as root", euid)}
	}
	return nil
}

// Start opens the store (refusing a locked or damaged one), rebuilds the
// lease table, re-adopts running sessions, takes a first snapshot, joins the
// cluster, then serves. It returns once everything is up; Stop ends it.
func (a *Agent) Start(ctx context.Context) error {
	if a.deps.Store == nil {
		st, err := store.Open(a.cfg.DataDir)
		if err != nil {
			return err
		}
		for _, w := range st.Warnings() {
			a.log.Warn("lease store: " + w)
		}
		a.deps.Store = st
	}
	a.store = a.deps.Store
	if err := a.build(ctx); err != nil {
		a.store.Close()
		return err
	}
	if err := a.serve(); err != nil {
		a.shutdown(exitCrash)
		return err
	}
	st := a.node.State()
	a.log.Info("dibs agent started", "version", a.cfg.Version, "node", a.cfg.NodeName, "gpus", len(st.Snap.GPUs),
		"backend", string(st.Snap.Host.Backend), "leases", len(st.Leases), "socket", a.cfg.Socket)
	return nil
}

// build makes and opens the parts.
func (a *Agent) build(ctx context.Context) error {
	c := a.deps.Clock
	a.changed = &notify.Signal{}
	a.accounts = account.NewDirectory(a.cfg.NodeName, a.deps.Users, a.cfg.Policy.AdminGroup, c.Now)
	a.peers = peer.NewMux(a.cfg.NodeName)
	if a.cfg.Cluster != nil && a.cfg.Cluster.Protocol != 0 {
		if err := a.peers.SpeakAtMost(a.cfg.Cluster.Protocol); err != nil {
			return err
		}
	}
	a.buildEvents()
	a.node = node.New(node.Config{
		Name: a.cfg.NodeName, Policy: a.cfg.Policy, ProbeInterval: a.cfg.ProbeInterval, SessionPoll: a.cfg.SessionPoll,
		PreemptSignal: a.cfg.PreemptSignal, CanRunAs: canWrite, Tags: a.cfg.Tags, NoCPUBinding: a.cfg.NoCPUBinding, Log: a.log.With("part", "node"),
		LedgerPerUserDay: a.cfg.LedgerPerUserDay, KeptRunsFile: keptRunsFile(a.cfg.DataDir), FiguresFile: figuresFile(a.cfg.DataDir),
		ServiceRules: a.cfg.ServiceRules, Fence: a.fence(),
		BootFile: bootFile(a.cfg.DataDir),
	}, node.Deps{Store: a.store, Probe: a.deps.Probe, Sessions: a.deps.Sessions, Accounts: a.accounts, Clock: c,
		Changed: a.changed, LeasesChanged: a.leasesChanged, Events: a.events.Record, HoldService: a.holdService,
		HealthChecked: a.healthChecked})
	sc := a.cfg.Sched // defaulted once, in New
	a.moveLog = lograte.New(time.Minute, 64, c.Now)
	a.origin = origin.New(a.cfg.NodeName, origin.Deps{Store: a.store, Clock: c, Changed: a.changed,
		QueueChanged: a.queueChanged, Log: a.log.With("part", "queue"), Events: a.events.Record,
		RetryDelay: func(restart int) time.Duration {
			return queue.RequeueDelay(restart, sc.RequeueBackoff, sc.MaxRequeueBackoff, a.deps.Rand())
		},
		MaxPerUser: a.cfg.Sched.MaxQueuedPerUser,
		DepStatus: func(ctx context.Context, id string) (queue.EntryStatus, error) {
			return a.svc.EntryState(ctx, id) // a.svc is built below, before any pass
		}})
	var proxyPorts service.PortRange
	if a.cfg.Proxy != nil {
		proxyPorts = a.cfg.Proxy.Ports
	}
	a.svc = core.New(core.Config{
		Node: a.cfg.NodeName, Policy: a.cfg.Policy, Sched: a.cfg.Sched, Version: a.cfg.Version,
		DataDir: a.cfg.DataDir, Socket: a.cfg.Socket, ProxyPorts: proxyPorts,
	}, core.Deps{Node: a.node, Origin: a.origin, Peers: a.peers, Accounts: a.accounts, Clock: c, Changed: a.changed,
		Kick: a.kick, Leave: a.requestLeave, Attach: a.deps.Sessions.AttachCommand, CanWrite: canWrite, Log: a.log,
		Events: a.events, Webhooks: a.webhooks, Tell: a.teller(), ReadLog: a.deps.Sessions.ReadLog})
	a.fanout = events.NewFanout(nodes(a.svc), send(a.svc), a.log.With("part", "notices"))
	a.sched = sched.New(a.cfg.NodeName, a.cfg.Sched, sched.Deps{
		View: a.svc.View, Peers: a.peers, Clock: c, Log: a.log.With("part", "scheduler"), Instance: randomID(),
		Reconcile: func(ctx context.Context, v queue.ClusterView) {
			a.origin.Reconcile(ctx, v, sc.LostAfter, sc.ReservationTTL, a.stopRank, a.svc.TellUser)
			a.moveServices(ctx, v, sc.LostAfter)
			a.endMovedServices(ctx, v)
		},
	})
	a.doctor = a.newDoctor()
	if err := a.openEvents(); err != nil {
		return err
	}
	if err := a.origin.Open(); err != nil {
		return err
	}
	if err := a.node.Open(ctx); err != nil {
		return err
	}
	if a.cfg.MetricsListen != "" {
		// Built before anything runs, so every hook sees it (or none).
		a.metrics = metrics.New(a.svc, c.Now)
		a.health.Store(a.metrics)
	}
	return nil
}

// healthChecked feeds dibs_service_health_seconds, once metrics are on.
func (a *Agent) healthChecked(l lease.Lease, d time.Duration) {
	if m := a.health.Load(); m != nil && l.Service != nil {
		m.ObserveHealthCheck(a.cfg.NodeName, l.Service.Name, l.User, d)
	}
}

// stopRank stops one rank of a gang, wherever it runs.
func (a *Agent) stopRank(ctx context.Context, l lease.Lease) error {
	_, err := peer.Call(ctx, a.peers, l.Node, peer.Preempt, peer.System,
		peer.PreemptRequest{Lease: l.ID, Token: l.Token, Reason: lease.PreemptGang, Signal: int(syscall.SIGTERM)})
	return err
}

// serve joins the cluster, opens the front doors and starts the loops.
func (a *Agent) serve() error {
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if a.cfg.Cluster != nil {
		cl, err := a.joinCluster(*a.cfg.Cluster)
		if err != nil {
			return err
		}
		a.cluster.Store(cl)
		a.svc.SetCluster(cl)
		a.peers.SetTransport(cl)
		if len(a.cfg.Cluster.Join) > 0 {
			// A restarted agent answers with the cluster, not alone:
			// when every peer restarted with it, the first one up
			// would otherwise show none of the others' work.
			cl.awaitPeers(awaitPeers)
		}
	}
	if err := a.startProxy(); err != nil {
		return err
	}
	if a.metrics != nil {
		srv, err := metrics.Listen(a.cfg.MetricsListen, a.metrics, a.log.With("part", "metrics"))
		if err != nil {
			return err
		}
		a.metricsSrv = srv
		a.log.Info("serving metrics", "addr", "http://"+srv.Addr()+"/metrics")
	}
	if a.cfg.SSH != nil {
		s := *a.cfg.SSH
		if s.HostKeyPath == "" {
			s.HostKeyPath = filepath.Join(a.cfg.DataDir, "ssh_host_ed25519_key")
		}
		srv, err := sshd.Listen(s, sshd.Deps{Service: a.svc, Accounts: a.accounts, Clock: a.deps.Clock, Node: a.cfg.NodeName,
			Terminal: a.deps.Sessions.TerminalCommand, ReadUserFile: a.deps.Sessions.ReadUserFile, Log: a.log.With("part", "ssh")})
		if err != nil {
			return err
		}
		a.ssh = srv
	}
	// The socket last: a client that reaches it finds every front door of
	// the agent open (a test or a script that waits for the socket and
	// then dials the SSH port found it still closed).
	if a.cfg.Socket != "" {
		var obs sockapi.Observer
		if a.metrics != nil {
			obs = a.metrics
		}
		sock, err := sockapi.Listen(a.cfg.Socket, a.svc, a.cfg.Limits, obs, a.log.With("part", "socket"))
		if err != nil {
			return err
		}
		a.sock = sock
	}
	a.startHeartbeat()
	a.node.Run()
	a.doctor.start(a.ctx)
	a.ledgerDone = make(chan struct{})
	go a.keepLedger(a.ctx)
	a.runEvents()
	a.schedOK = make(chan struct{})
	go func() {
		defer close(a.schedOK)
		a.sched.Run(a.ctx)
	}()
	return nil
}

// startProxy opens the services proxy when the config turns it on: its
// backend port first (an agent that cannot open it does not start, with
// the reason), then the services' ports as the view names them.
func (a *Agent) startProxy() error {
	ps := a.cfg.Proxy
	if ps == nil {
		return nil
	}
	host := ""
	if a.cfg.Cluster != nil {
		host = a.cfg.Cluster.BindAddr
	}
	p, err := proxy.New(proxy.Config{Node: a.cfg.NodeName, Ports: ps.Ports, Host: host,
		MaxConns: ps.MaxConns, MaxPerService: ps.MaxPerService, DialTimeout: ps.DialTimeout, IdleTimeout: ps.IdleTimeout,
		Log: a.log.With("part", "proxy")},
		proxy.Deps{View: a.svc.View, DialLocal: a.node.ServiceDialer().Dial, Changed: a.changed})
	if err != nil {
		return err
	}
	a.proxy = p
	if a.metrics != nil {
		a.metrics.SetProxy(p.Counts)
	}
	p.Run()
	a.log.Info("serving the services proxy", "backend", p.BackendAddr(), "ports", ps.Ports.String())
	return nil
}

// ProxyPorts are the services' ports this agent's proxy listens on now
// (none when the proxy is off).
func (a *Agent) ProxyPorts() []int {
	if a.proxy == nil {
		return nil
	}
	return a.proxy.Ports()
}

// leasesChanged tells the cluster at once and asks the scheduler to look.
func (a *Agent) leasesChanged() {
	if cl := a.cluster.Load(); cl != nil {
		cl.publish(true)
	}
	a.kick()
}

// queueChanged follows a change to the entries submitted here: the cluster
// hears, the scheduler looks, and the metrics see starts.
func (a *Agent) queueChanged() {
	a.leasesChanged()
	if a.metrics != nil {
		a.metrics.QueueChanged(a.origin.Entries())
	}
}

func (a *Agent) kick() {
	if a.sched != nil {
		a.sched.Kick()
	}
}

// Stop ends the agent as a restart does (SIGTERM: `systemctl restart` and
// `stop`, an upgrade): it steps out of the cluster so the others see at
// once that it is away, but does not leave, so they keep its leases, ranks
// and gangs for the grace (queue.lost_after) and show it as restarting; the
// front doors close, the loops stop, the store closes. Sessions keep
// running; a restarted agent re-adopts them.
func (a *Agent) Stop() error { return a.shutdown(exitRestart) }

// Leave ends the agent and takes its node out of the cluster for good (the
// package's removal, an admin retiring the node: `dibs leave`): the others
// show it as left and count its ranks lost at once, without waiting out the
// grace. Sessions keep running, but nothing of the cluster waits for them.
func (a *Agent) Leave() error { return a.shutdown(exitLeave) }

// Crash stops the agent without a word to the cluster, as a killed process
// would: the other agents must notice it through failure detection. Tests
// and fault drills use it.
func (a *Agent) Crash() error { return a.shutdown(exitCrash) }

// LeaveRequested is closed when someone asked this agent to leave the
// cluster for good (`dibs leave`): whoever runs it then calls Leave.
func (a *Agent) LeaveRequested() <-chan struct{} { return a.leaveCh }

func (a *Agent) requestLeave() { a.leaveOnce.Do(func() { close(a.leaveCh) }) }

// exitHow is how an agent ends: what it tells the cluster.
type exitHow int

const (
	exitCrash   exitHow = iota // nothing
	exitRestart                // away for a moment (memberlist's leave)
	exitLeave                  // gone for good (dibs's leave notice too)
)

func (a *Agent) shutdown(how exitHow) error {
	if a.stopped || a.node == nil {
		return nil
	}
	a.stopped = true
	a.stopEvents(how)
	if cl := a.cluster.Load(); cl != nil {
		cl.shutdown(how)
	}
	if a.ssh != nil {
		a.ssh.Close()
	}
	if a.sock != nil {
		a.sock.Close()
	}
	if a.metricsSrv != nil {
		a.metricsSrv.Close()
	}
	if a.proxy != nil {
		a.proxy.Close()
	}
	if a.cancel != nil {
		a.cancel()
	}
	if a.schedOK != nil {
		<-a.schedOK
	}
	if a.ledgerDone != nil {
		<-a.ledgerDone
	}
	if a.beatDone != nil {
		<-a.beatDone
	}
	a.doctor.stop()
	if how == exitCrash {
		a.node.Crashed()
	}
	a.node.Close()
	a.closeEvents()
	err := a.store.Close()
	a.deps.Probe.Close()
	return err
}

// Peers is the agent's end of the protocol between agents, for tests that
// speak to other nodes as a peer holding the cluster key would.
func (a *Agent) Peers() *peer.Mux { return a.peers }

// bootFile is where the node keeps the kernel boot id its agent last ran
// under, to tell a reboot from a restart.
func bootFile(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "boot-id")
}

// keptRunsFile is where a node saves the commands of the runs it started,
// for `dibs export sbatch` after they end: beside the store, or nowhere
// when the agent has no data dir (a store given in tests).
// figuresFile is where the running leases' figures are written down.
func figuresFile(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "running-figures.json")
}

func keptRunsFile(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "kept-runs.json")
}
