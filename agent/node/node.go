// Package node is the single writer of one node's GPUs: the lease table, its
// store, the sessions started under leases, and the steps the clock calls
// for. Only this package grants, renews or ends this node's leases. Writers
// queue on one mutex and fsync before they acknowledge; readers never wait
// for a disk: they read the State last published, an immutable value.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// Sessions is the part of launch.Launcher the node uses. All methods may be
// called from any goroutine and may block for a tmux round trip.
type Sessions interface {
	Start(ctx context.Context, s launch.Spec) (launch.Session, error)
	Exists(ctx context.Context, u launch.User, name string) (bool, error)
	List(ctx context.Context, u launch.User) ([]string, error)
	Message(ctx context.Context, u launch.User, name, text string) error
	Signal(ctx context.Context, u launch.User, name string, sig syscall.Signal) error
	Kill(ctx context.Context, u launch.User, name string) error
	Watch(ctx context.Context, u launch.User, name string, interval time.Duration) <-chan struct{}
	AttachCommand(u launch.User, name string) []string
	// ExitStatus reads (and removes) the exit status a run recorded.
	ExitStatus(u launch.User, name string) (code int, ok bool, err error)
}

// Config is what the node is told.
type Config struct {
	Name          string
	Policy        lease.Policy
	ProbeInterval time.Duration
	// SessionPoll is how often a running session is checked for its end.
	SessionPoll time.Duration
	// PreemptSignal tells a reclaimed lease's session to checkpoint.
	PreemptSignal syscall.Signal
	// CanRunAs reports whether this agent may start sessions as uid (it is
	// root, or it is that user); nil allows all.
	CanRunAs func(uid int) error
	// Tags are the node's pools, stamped on every snapshot so they travel
	// with the host facts.
	Tags []string
	// KeptRunsFile is where the commands kept for `dibs export sbatch` of
	// finished runs are saved (Node.KeptRun); empty keeps them in memory.
	KeptRunsFile string
	// LedgerPerUserDay is how many ended leases of one person are kept one
	// by one in a UTC day (default lease.DefaultLedgerPerUserDay); past
	// it their plain leases are folded into one row as they end.
	LedgerPerUserDay int
	// ServiceRules are the supervisor's numbers (start-up allowance,
	// failed checks, backoff, crash loop); zero fields take
	// service.DefaultRules.
	ServiceRules service.Rules
	// Fence is how a service's replica stops itself when this node's
	// agent is gone or cut off from the cluster past the grace (issue 33,
	// fence.go); zero fences nothing.
	Fence Fence
	// FiguresFile is where the running leases' figures are written down
	// (every FiguresSaveEvery, and as the agent stops); empty keeps them
	// in memory only. SampleWindow is how far back each GPU's samples
	// reach (default runrecord.DefaultWindow).
	FiguresFile  string
	SampleWindow time.Duration
	// BootFile keeps the kernel boot id the agent last ran under, so a
	// start under another one is known for a reboot (reboot.go); empty
	// keeps none, and a reboot is told only by each lease's own boot.
	BootFile string
	// NoCPUBinding starts sessions unbound (agent.Config.NoCPUBinding).
	NoCPUBinding bool
	Log          *slog.Logger
}

// Deps are the parts the node drives.
type Deps struct {
	Store    lease.Store
	Probe    nodeprobe.Probe
	Sessions Sessions
	Accounts *account.Directory
	Clock    clock.Clock
	// Changed wakes boards and watchers after every published change.
	Changed *notify.Signal
	// LeasesChanged is called (without locks held) after a lease changed,
	// so the cluster hears at once and the scheduler looks again.
	LeasesChanged func()
	// Events records what happened (agent/events); nil records nothing.
	// It is called with wmu held and must not block.
	Events func(event.Event)
	// HoldService reports whether a service's replica must not be
	// (re)started here now: the cluster is not heard yet, this node is
	// cut off from it (fenced), or the service runs on another node since
	// this one was lost. Nil holds nothing.
	HoldService func(lease.Lease) bool
	// HealthChecked is told how long each check of a service's replica
	// took (the connect, the HTTP answer, the --health-cmd), passed or
	// failed, for dibs_service_health_seconds; called from the replica's
	// supervisor, it must not block. Nil tells nothing.
	HealthChecked func(l lease.Lease, d time.Duration)
}

// State is the node as readers see it. It is published whole after every
// change and never modified, so readers take it without a lock.
type State struct {
	Version uint64
	Snap    nodeprobe.Snapshot
	Leases  []lease.Lease
	// Bookings are the node's bookings not started yet (never in Leases).
	Bookings   []lease.Lease
	Judged     map[int]lease.Judgement
	QuietSince map[int]time.Time
	// Ended are recently ended queued runs (lease.EndedRunKeep).
	Ended     []lease.EndedRun
	LastToken uint64
}

// Node is one node's single writer.
type Node struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	// wmu serialises every change to the table and the store; the disk
	// write happens under it, never under anything a reader takes.
	wmu     sync.Mutex
	table   *lease.Table
	snap    nodeprobe.Snapshot
	idle    *lease.IdleTracker
	judged  map[int]lease.Judgement
	ended   []lease.EndedRun
	version uint64

	// justEnded are the leases ended within lease.EndGrace, whose holders'
	// processes may still be exiting: not squatters yet.
	justEnded []lease.LedgerEntry

	state   atomic.Pointer[State]
	notices notices

	watchMu  sync.Mutex
	watching map[string]context.CancelFunc

	usage Usage
	// ledgerDay counts each person's ended leases today (under wmu).
	ledgerDay map[string]*ledgerCount
	// kept are the commands runs were started with, for export sbatch.
	kept keptRuns
	// reboot is what Open found of the node's last boot.
	reboot Reboot
	// rec is the record of the GPUs: samples and running figures (under
	// wmu).
	rec *record
	// crashed: Close writes nothing more down (Crashed).
	crashed atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New builds a node over an opened store; Open loads it.
func New(cfg Config, deps Deps) *Node {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionPoll <= 0 {
		cfg.SessionPoll = 500 * time.Millisecond
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.PreemptSignal == 0 {
		cfg.PreemptSignal = syscall.SIGUSR1
	}
	if cfg.LedgerPerUserDay <= 0 {
		cfg.LedgerPerUserDay = lease.DefaultLedgerPerUserDay
	}
	if deps.Changed == nil {
		deps.Changed = &notify.Signal{}
	}
	if deps.LeasesChanged == nil {
		deps.LeasesChanged = func() {}
	}
	if deps.Events == nil {
		deps.Events = func(event.Event) {}
	}
	n := &Node{cfg: cfg, deps: deps, log: cfg.Log, idle: lease.NewIdleTracker(), watching: map[string]context.CancelFunc{},
		ledgerDay: map[string]*ledgerCount{}}
	n.usage = Usage{store: deps.Store, clock: deps.Clock, log: cfg.Log, leases: func() []lease.Lease { return n.State().Leases }}
	n.kept.path = cfg.KeptRunsFile
	if err := n.kept.load(); err != nil {
		// Only `dibs export sbatch` of finished runs misses them.
		n.log.Warn("the runs kept for export sbatch are lost", "err", err)
	}
	var err error
	if n.rec, err = newRecord(cfg.FiguresFile, cfg.SampleWindow, cfg.ProbeInterval); err != nil {
		// Only the running leases' figures so far are lost.
		n.log.Warn("the running leases' figures are lost", "err", err)
	}
	return n
}

// Usage is this node's usage figures.
func (n *Node) Usage() *Usage { return &n.usage }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Policy is the node's lease policy.
func (n *Node) Policy() lease.Policy { return n.cfg.Policy }

// now is one reading of both clocks.
func (n *Node) now() lease.Instant {
	c := n.deps.Clock
	return lease.Instant{Wall: c.Now(), Mono: c.Mono(), Boot: c.Boot()}
}

// Open loads the table from the store, takes a first snapshot, and ends
// the leases whose sessions died in a reboot of the node (reboot.go). It asks
// no user's tmux server anything: the sessions of the leases it loaded are
// re-adopted by Run, once the agent serves (a user's server may not answer,
// and nobody's claims wait on it). ctx bounds the first probe; the node's
// own work runs until Close.
func (n *Node) Open(ctx context.Context) error {
	leases, last, err := n.deps.Store.Load()
	if err != nil {
		return err
	}
	now := n.now()
	// The queued runs that ended lately, so their origins learn how they
	// ended even across this agent's restart, and the services' copies
	// stopped for good, so a copy elsewhere still hears of its stop.
	recent, err := n.deps.Store.Ledger(now.Wall.Add(-max(lease.EndedRunKeep, lease.ServiceStopKeep)))
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	snap, err := n.deps.Probe.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("first probe: %w", err)
	}
	snap.Host.Name, snap.Host.Tags = n.cfg.Name, n.cfg.Tags
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.table = lease.NewTable(n.cfg.Name, leases, last, now)
	n.ended = endedRuns(recent, now.Wall)
	n.justEnded = lease.WithinEndGrace(recent, now.Wall)
	n.snap = snap
	n.idle.Observe(snap, n.cfg.Policy)
	n.observeLocked()
	n.publishLocked(now.Wall)
	n.endRebootedLocked(leases, now)
	return nil
}

// Run probes and applies the clock's steps until Close, and re-adopts the
// sessions of the leases Open loaded, each on its own (sessions.go).
func (n *Node) Run() {
	n.wg.Add(1)
	go n.loop()
	n.readopt()
}

// Close stops the loops and the session watchers. Sessions keep running; a
// restarted agent re-adopts them. It does not close the store.
func (n *Node) Close() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.stopAll()
	n.wg.Wait()
	n.saveFigures(true)
}

// State is the node as last published.
func (n *Node) State() *State { return n.state.Load() }

// publishLocked makes the table, snapshot and judgements the new State.
// Callers hold wmu.
func (n *Node) publishLocked(now time.Time) {
	leases := n.table.List()
	n.judged = lease.JudgeWithEnded(n.snap, leases, n.justEnded, n.idle, now, n.cfg.Policy)
	n.version++
	n.state.Store(&State{
		Version: n.version, Snap: n.snap, Leases: leases, Bookings: n.table.Bookings(), Judged: n.judged,
		QuietSince: n.idle.QuietSinceAll(), Ended: slices.Clone(n.ended), LastToken: n.table.LastToken(),
	})
	n.deps.Changed.Notify()
}

// saveLocked makes a granted or changed lease durable, then applies it: the
// table and the published state move only after the disk has it. Callers
// hold wmu.
func (n *Node) saveLocked(l lease.Lease, now lease.Instant) error {
	stamped := n.table.Stamp(l, now)
	if err := n.deps.Store.Put(stamped); err != nil {
		return err
	}
	n.table.Put(l, now)
	n.publishLocked(now.Wall)
	return nil
}

// endLocked removes a lease durably and records it in the ledger (and, for
// a queued run, among the ended runs its origin reads). Callers hold wmu.
func (n *Node) endLocked(l lease.Lease, reason lease.EndReason, by string, now lease.Instant) error {
	if !n.table.Current(l.ID, l.Token) {
		return nil
	}
	// The table's copy knows a preemption that the caller's (a session
	// watcher's, from the start) may not: a queued run's origin reads it.
	cur := l
	if x, ok := n.table.Get(l.ID); ok {
		cur = x
	}
	ended := lease.Ended(l, now.Wall, string(reason), by)
	n.finishLocked(&ended)
	if err := n.storeEnd(ended, l.Session != ""); err != nil {
		n.log.Error("end lease", "lease", l.ID, "reason", reason, "err", err)
		return err
	}
	n.table.Remove(l.ID)
	ev := event.EndEvent(l, reason, by, now.Wall)
	if ended.Figures != nil && l.Session != "" {
		if line := ended.Figures.OneLine(); line != "" && len(ev.Text)+len(line) < 480 {
			ev.Text += " (" + line + ")"
		}
	}
	n.deps.Events(ev)
	if l.IsService() {
		st := event.ServiceEvent(event.EventSvcStopped, l, now.Wall, reason.Words())
		st.Reason = ev.Reason
		n.deps.Events(st)
	}
	n.justEnded = lease.WithinEndGrace(append(n.justEnded, ended), now.Wall)
	if l.Entry != "" {
		n.ended = lease.RememberEnded(n.ended, lease.EndedRun{Entry: l.Entry, Lease: l.ID, Gang: l.Gang, Reason: cur.RunEnd(reason), At: now.Wall.Round(0), Reserved: !l.ReservedUntil.IsZero()}, now.Wall)
	}
	if l.IsService() && reason != lease.EndMovedAway {
		// Every other copy of this replica (a lost node's, a cut-off
		// side's) hears of the stop and ends too (agent/svcmove.go).
		n.ended = lease.RememberEnded(n.ended, lease.ServiceStop(l, reason, now.Wall.Round(0)), now.Wall)
	}
	n.stopWatching(l.ID)
	n.publishLocked(now.Wall)
	return nil
}

// locked runs f as the single writer: every change to the table and the
// store happens inside one, and whatever f returns by, the lock is
// released. What the change sets off outside the node (telling the
// cluster, tmux, a person's notices) is done by the caller after f
// returns, never under the lock. The events f records stay under it, so
// their order is the table's.
func (n *Node) locked(f func() error) error {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return f()
}

// end ends a lease if its token is still current, then tells the cluster.
func (n *Node) end(l lease.Lease, reason lease.EndReason, by string) error {
	if err := n.locked(func() error { return n.endLocked(l, reason, by, n.now()) }); err != nil {
		return err
	}
	n.deps.LeasesChanged()
	return nil
}

// update persists a change to a lease if its token is still current and,
// for a step the clock called for (due set), if the clock still calls for
// it (lease.StillDue).
func (n *Node) update(l lease.Lease, due *lease.Due, f func(*lease.Lease)) bool {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	cur, ok := n.table.Get(l.ID)
	if !ok || cur.Token != l.Token || due != nil && !lease.StillDue(n.table, n.now(), n.cfg.Policy, *due) {
		return false
	}
	f(&cur)
	if err := n.saveLocked(cur, n.now()); err != nil {
		n.log.Error("save lease", "lease", l.ID, "err", err)
		return false
	}
	return true
}

// Current reports whether token is still lease id's.
func (n *Node) Current(id string, token uint64) bool {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.table.Current(id, token)
}

// loop probes at the configured interval and applies the clock's steps.
func (n *Node) loop() {
	defer n.wg.Done()
	t := n.deps.Clock.NewTicker(n.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C():
		}
		n.probeOnce()
		n.Tick()
		n.saveFigures(false)
	}
}

// probeOnce takes a snapshot and publishes only when something a person
// would see changed.
func (n *Node) probeOnce() {
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	snap, err := n.deps.Probe.Snapshot(ctx)
	cancel()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			n.log.Warn("probe", "err", err)
		}
		return
	}
	snap.Host.Name, snap.Host.Tags = n.cfg.Name, n.cfg.Tags
	n.wmu.Lock()
	defer n.wmu.Unlock()
	now := n.deps.Clock.Now()
	n.idle.Observe(snap, n.cfg.Policy)
	visible := telemetryChanged(n.snap, snap)
	n.snap = snap
	n.observeLocked()
	if judged := lease.JudgeWithEnded(snap, n.table.List(), n.justEnded, n.idle, now, n.cfg.Policy); visible || !sameJudgements(n.judged, judged) {
		n.publishLocked(now)
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
			!eqInt(o.TemperatureC, c.TemperatureC) || !slices.Equal(o.Processes, c.Processes) {
			return true
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
		if y, ok := b[k]; !ok || !slices.Equal(x.Flags, y.Flags) {
			return false
		}
	}
	return true
}

// endedRuns are the queued runs among a ledger's entries, as the node
// remembers them for their origins, and the stops of services' copies.
func endedRuns(ledger []lease.LedgerEntry, now time.Time) []lease.EndedRun {
	var out []lease.EndedRun
	for _, e := range ledger {
		if e.Entry != "" && now.Sub(e.End) <= lease.EndedRunKeep {
			out = lease.RememberEnded(out, lease.EndedRun{Entry: e.Entry, Lease: e.LeaseID, Gang: e.Gang, Reason: lease.EndReason(e.Reason), At: e.End, Reserved: e.Reserved}, now)
		}
		if stop, ok := lease.StopOfEnded(e); ok {
			out = lease.RememberEnded(out, stop, now)
		}
	}
	return out
}
