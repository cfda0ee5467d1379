// Package sched runs the cluster's scheduler on the agent that is its
// scheduler (the lowest-named live member): each pass reads the cluster
// view, asks queue.Schedule what to start and reclaim, and carries it out
// over the peer protocol — a single-node start at once, a gang by reserving
// every rank and committing only when all hold. Every agent also runs its
// origin's pass (finish, requeue, stop ranks) from the same loop.
package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/queue"
)

// Deps are what the scheduler reads and drives.
type Deps struct {
	// View is the cluster now (this node's usage fresh).
	View  func() queue.ClusterView
	Peers *peer.Mux
	Clock clock.Clock
	// Reconcile is this node's origin pass, run before every scheduling
	// pass on every agent.
	Reconcile func(ctx context.Context, v queue.ClusterView)
	// Instance tells this run of the agent from its earlier ones (its boot
	// id): with the node's name it names this scheduler to the origins
	// that let it start their entries.
	Instance string
	Log      *slog.Logger
}

// Tick is the slow safety-net pass, for what only time changes (reclaim
// graces, lost ranks); arrivals and releases kick a pass at once.
const Tick = 2 * time.Second

// Scheduler is one agent's scheduling loop.
type Scheduler struct {
	self string
	cfg  queue.SchedConfig
	deps Deps
	kick chan struct{}

	mu       sync.Mutex
	inflight map[string]queue.InFlight
	// reclaiming is when (Clock.Mono) each lease's reclaim was sent.
	reclaiming map[string]time.Duration
	// holding is whether the last pass held for a live peer not yet
	// heard: the hold is logged once, not on every pass.
	holding bool

	wg sync.WaitGroup
}

// New makes the scheduler of the agent on node self.
func New(self string, cfg queue.SchedConfig, deps Deps) *Scheduler {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{self: self, cfg: cfg.WithDefaults(), deps: deps, kick: make(chan struct{}, 1),
		inflight: map[string]queue.InFlight{}, reclaiming: map[string]time.Duration{}}
}

// Kick asks for a pass soon; it never blocks.
func (s *Scheduler) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run loops until ctx ends, then waits for the starts it sent.
func (s *Scheduler) Run(ctx context.Context) {
	t := s.deps.Clock.NewTicker(Tick)
	defer t.Stop()
	defer s.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C():
		}
		s.Pass(ctx)
	}
}

// Pass runs the origin's pass, then — on the scheduler — one scheduling
// pass.
func (s *Scheduler) Pass(ctx context.Context) {
	v := s.deps.View()
	if s.deps.Reconcile != nil {
		s.deps.Reconcile(ctx, v)
	}
	if v.Scheduler() != s.self {
		return
	}
	s.schedule(ctx, v)
}

// schedule carries out one pass of the rules over the cluster's queue.
//
// Until this agent has heard the state of every live peer (it has just
// started, or a peer is just back), the pass holds: no start, no retell,
// no reclaim. A peer not yet heard may run an entry this view shows
// waiting, or hold GPUs and usage the view cannot see; the origin's pass
// holds its verdicts for the same reason (origin.Reconcile).
func (s *Scheduler) schedule(ctx context.Context, v queue.ClusterView) {
	if !s.heard(v) {
		return
	}
	// now dates the plan (entries' waits, leases' ends); mono times this
	// scheduler's own holds, which a step of the wall clock must not end.
	now, mono := s.deps.Clock.Now(), s.deps.Clock.Mono()
	progress := v.Progress()
	entries := map[string]queue.QueueEntry{}
	for _, e := range v.Entries() {
		entries[e.ID] = e
	}
	nodes := v.SchedNodes()
	queue.Hold(nodes, s.settle(progress, entries, mono), now)
	waiting, retell := v.Waiting(progress)
	for _, e := range retell {
		// Started, but its origin has not heard (or the message was lost):
		// tell it again; never start it twice.
		s.goTracked(ctx, func(ctx context.Context) { s.notifyStarted(ctx, e) })
	}
	if len(waiting) == 0 {
		return
	}
	cfg := s.cfg
	cfg.Terse = true // nobody reads this pass's reasons: `dibs queue` makes its own
	plan := queue.Schedule(waiting, nodes, v.Usage(), now, cfg)
	for _, st := range plan.Start {
		key := st.Entry.Key()
		if !s.hold(queue.InFlight{Key: key, Mono: mono, Ranks: st.Ranks, User: st.Entry.User, UID: st.Entry.UID}) {
			continue
		}
		s.goTracked(ctx, func(ctx context.Context) {
			if err := s.start(ctx, st); err != nil {
				level := slog.LevelWarn
				if refusal.CodeOf(err) == refusal.CodeConflict {
					level = slog.LevelDebug // another scheduler starts it, or it started
				}
				s.deps.Log.Log(ctx, level, "start queued entry", "entry", st.Entry.ID, "err", err)
				if refusal.CodeOf(err) == refusal.CodeNoAnswer && !errors.As(err, new(*placeError)) {
					// The node may have started it and only its answer was
					// lost: keep the hold, so this attempt is not planned
					// elsewhere until its lease shows, its origin moves on,
					// or InFlightTimeout passes. An origin that did not
					// answer Place was sent nothing to start: the next
					// pass asks it again (a restarting origin is back in
					// moments, not after InFlightTimeout).
					return
				}
				s.release(key)
				s.refused(ctx, st, err)
			}
		})
	}
	for _, r := range plan.Reclaim {
		if s.reclaim(r.Lease.ID, mono) || !r.Lease.PreemptedAt.IsZero() {
			continue
		}
		s.deps.Log.Info("reclaiming", "lease", r.Lease.ID, "user", r.Lease.User, "why", r.Reason, "for", r.For)
		s.goTracked(ctx, func(ctx context.Context) {
			_, err := peer.Call(ctx, s.deps.Peers, r.Lease.Node, peer.Preempt, peer.System,
				peer.PreemptRequest{Lease: r.Lease.ID, Token: r.Lease.Token, Reason: r.Reason, Signal: r.Signal()})
			if err != nil {
				s.deps.Log.Warn("reclaim", "lease", r.Lease.ID, "err", err)
			}
		})
	}
}

// heard reports whether v has every live peer's state, logging (once per
// hold, at debug) the peers the pass waits for.
func (s *Scheduler) heard(v queue.ClusterView) bool {
	heard := v.Heard()
	if s.holdBegins(!heard) {
		var waiting []string
		for _, n := range v.Nodes {
			if n.State == queue.NodeAlive && !n.HasState {
				waiting = append(waiting, n.Name)
			}
		}
		s.deps.Log.Debug("scheduler holds until every live peer's state is heard", "waiting_for", strings.Join(waiting, ","))
	}
	return heard
}

// holdBegins records whether this pass holds, and reports whether a hold
// begins with it (the last pass did not hold).
func (s *Scheduler) holdBegins(hold bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	begins := hold && !s.holding
	s.holding = hold
	return begins
}

// settle forgets the starts in flight that have settled (their leases
// show, their origin moved on, or InFlightTimeout passed) and the
// reclaims past it, and returns the starts still in flight, whose GPUs
// the pass must not plan again. mono is the monotonic clock now.
func (s *Scheduler) settle(p queue.Progress, entries map[string]queue.QueueEntry, mono time.Duration) []queue.InFlight {
	s.mu.Lock()
	defer s.mu.Unlock()
	var held []queue.InFlight
	for k, f := range s.inflight {
		if f.Settled(p, entries, mono) {
			delete(s.inflight, k)
			continue
		}
		held = append(held, f)
	}
	for id, at := range s.reclaiming {
		if mono-at > queue.InFlightTimeout {
			delete(s.reclaiming, id)
		}
	}
	return held
}

// hold marks a start in flight; false when it already is (another pass
// sent it), so it is never sent twice.
func (s *Scheduler) hold(f queue.InFlight) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.inflight[f.Key]; busy {
		return false
	}
	s.inflight[f.Key] = f
	return true
}

// release forgets a start that was refused, so a later pass may plan it.
func (s *Scheduler) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
}

// reclaim notes that lease id is being reclaimed now (mono, the monotonic
// clock) and reports whether it already was.
func (s *Scheduler) reclaim(id string, mono time.Duration) (busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, busy = s.reclaiming[id]
	s.reclaiming[id] = mono
	return busy
}

// goTracked runs f on its own goroutine with a deadline, tracked so Run
// waits for it.
func (s *Scheduler) goTracked(ctx context.Context, f func(context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		f(ctx)
	}()
}

// start starts one planned entry: at once on one node; for a gang, reserve
// every rank, then commit all of them together. The entry's origin must let
// this scheduler start it first.
func (s *Scheduler) start(ctx context.Context, st queue.Start) error {
	e := st.Entry
	who := peer.As(e.User)
	placed, err := peer.Call(ctx, s.deps.Peers, e.Origin, peer.Place, peer.System, peer.PlaceRequest{Key: e.Key(), Placer: s.placer()})
	if err != nil {
		return &placeError{err: err}
	}
	if placed.Job != nil {
		// Gossip carries only the job's public part; the origin's answer
		// is the job whole, carried on to the nodes that start it.
		e.Job = placed.Job
	}
	if len(st.Ranks) == 1 && e.Nodes <= 1 {
		r, err := peer.Call(ctx, s.deps.Peers, st.Ranks[0].Node, peer.Start, who,
			peer.StartRequest{Entry: e, Phase: peer.PhaseStart, GPUs: st.Ranks[0].GPUs, Borrowed: st.Borrowed})
		if err != nil {
			return err
		}
		s.deps.Log.Info("started", "entry", e.ID, "user", e.User, "node", st.Ranks[0].Node, "lease", r.Lease.ID)
		s.notifyStarted(ctx, e)
		return nil
	}
	gang := queue.GangID(e)
	replies, errs := s.eachRank(ctx, st, func(i int, rk queue.RankPlacement) (peer.StartReply, error) {
		return peer.Call(ctx, s.deps.Peers, rk.Node, peer.Start, who,
			peer.StartRequest{Entry: e, Phase: peer.PhaseReserve, GPUs: rk.GPUs, Borrowed: st.Borrowed, Gang: gang, Rank: i})
	})
	for i, err := range errs {
		if err == nil {
			continue
		}
		// All or nothing: give back what was reserved.
		for j, r := range replies {
			if errs[j] == nil && r.Lease.ID != "" {
				if _, err := peer.Call(ctx, s.deps.Peers, st.Ranks[j].Node, peer.Release, who, peer.ReleaseRequest{IDs: []string{r.Lease.ID}}); err != nil {
					s.deps.Log.Warn("give back a reservation (it expires by itself)", "lease", r.Lease.ID, "node", st.Ranks[j].Node, "err", err)
				}
			}
		}
		return &rankError{node: st.Ranks[i].Node, err: err}
	}
	hosts := make([]string, len(replies))
	for i, r := range replies {
		hosts[i] = r.Host
	}
	env := queue.RendezvousEnv(e, hosts, replies[0].Port)
	_, errs = s.eachRank(ctx, st, func(i int, rk queue.RankPlacement) (peer.StartReply, error) {
		return peer.Call(ctx, s.deps.Peers, rk.Node, peer.Start, who,
			peer.StartRequest{Entry: e, Phase: peer.PhaseCommit, GPUs: rk.GPUs, Gang: gang, Rank: i, Env: queue.RankEnv(env, i)})
	})
	for i, err := range errs {
		if err != nil {
			// The origin sees the rank missing and stops the rest.
			s.deps.Log.Warn("commit a gang rank", "entry", e.ID, "rank", i, "node", st.Ranks[i].Node, "err", err)
		}
	}
	s.deps.Log.Info("started gang", "entry", e.ID, "user", e.User, "nodes", e.Nodes, "gpus_per_node", e.GPUsPerNode, "hosts", strings.Join(hosts, ","))
	s.notifyStarted(ctx, e)
	return nil
}

// placer names this scheduler to origins.
func (s *Scheduler) placer() string {
	if s.deps.Instance == "" {
		return s.self
	}
	return s.self + "/" + s.deps.Instance
}

// eachRank calls f for every rank at once and waits for all.
func (s *Scheduler) eachRank(ctx context.Context, st queue.Start, f func(int, queue.RankPlacement) (peer.StartReply, error)) ([]peer.StartReply, []error) {
	replies := make([]peer.StartReply, len(st.Ranks))
	errs := make([]error, len(st.Ranks))
	var wg sync.WaitGroup
	for i, rk := range st.Ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = f(i, rk)
		}()
	}
	wg.Wait()
	return replies, errs
}

// refused tells the origin when a start failed for good: the node refused
// the user or the job (forbidden, invalid), which no retry can change, so
// the entry must not wait at the head of the queue forever.
func (s *Scheduler) refused(ctx context.Context, st queue.Start, err error) {
	code := refusal.CodeOf(err)
	if code != refusal.CodeForbidden && code != refusal.CodeInvalid {
		return
	}
	node := st.Ranks[0].Node
	var re *rankError
	if errors.As(err, &re) {
		node = re.node
	}
	if _, err := peer.Call(ctx, s.deps.Peers, st.Entry.Origin, peer.Refused, peer.System,
		peer.RefusedRequest{Key: st.Entry.Key(), Node: node, Reason: termsafe.String(words.OneLine(err.Error()))}); err != nil {
		s.deps.Log.Warn("tell the origin a start was refused", "entry", st.Entry.ID, "err", err)
	}
}

// placeError is the origin's refusal (or silence) when asked to let this
// scheduler start an attempt: no node was asked to start anything, so a
// lost answer holds nothing in flight.
type placeError struct{ err error }

func (e *placeError) Error() string {
	return fmt.Sprintf("the origin did not let this scheduler start it: %v", e.err)
}
func (e *placeError) Unwrap() error { return e.err }

// rankError is a gang rank's refusal, naming its node.
type rankError struct {
	node string
	err  error
}

func (e *rankError) Error() string { return fmt.Sprintf("reserve rank on %s: %v", e.node, e.err) }
func (e *rankError) Unwrap() error { return e.err }

// notifyStarted tells the entry's origin that it runs.
func (s *Scheduler) notifyStarted(ctx context.Context, e queue.QueueEntry) {
	if _, err := peer.Call(ctx, s.deps.Peers, e.Origin, peer.Started, peer.System, peer.StartedRequest{Key: e.Key()}); err != nil {
		s.deps.Log.Warn("tell the origin an entry started", "entry", e.ID, "origin", e.Origin, "err", err)
	}
}
