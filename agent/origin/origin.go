// Package origin keeps the queue entries submitted at this node: their
// source of truth. Every other agent knows them from gossip, so the
// scheduler can run anywhere and its death loses nothing; only the origin
// writes them, marks them running, finishes or requeues them.
package origin

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Deps are what the origin drives and reads.
type Deps struct {
	Store   queue.Store
	Clock   clock.Clock
	Changed *notify.Signal
	// QueueChanged is called (without locks held) after the entries
	// changed: the cluster hears at once, the scheduler looks again.
	QueueChanged func()
	Log          *slog.Logger
	// Events records what happened to the entries (agent/events); nil
	// records nothing. It must not block.
	Events func(event.Event)
	// RetryDelay is how long a run requeued for its restart'th time waits
	// before it may start again (queue.RequeueDelay with the queue's
	// settings and injected jitter); nil retries at once.
	RetryDelay func(restart int) time.Duration
	// MaxPerUser is how many entries one person may have here, waiting
	// or running (queue.SchedConfig.MaxQueuedPerUser; 0: its default).
	MaxPerUser int
	// DepStatus says where an entry stands (this node's, or another's,
	// asked of its origin), for a run here that waits for it (--after);
	// nil: only this node's own entries, from its in-memory record.
	DepStatus func(ctx context.Context, id string) (queue.EntryStatus, error)
}

// Origin is this node's queue entries. Writers queue on one mutex (the disk
// write happens under it); readers take the published list without a lock.
//
// The mutex is taken in one place per change, a small method that holds it
// by defer whatever it returns by (admit, withdraw, place, markRunning,
// drop, settle, keepAfter, endAfter, fill; Open and Status read under it):
// the store, the entries and the published list move together inside it.
// The events it records stay under it (recording never blocks), so their
// order is the store's, as in agent/node. Whatever a change sets off
// outside the origin — telling the cluster and the scheduler
// (Deps.QueueChanged), stopping ranks, asking other origins — its exported
// caller does after the lock is released.
type Origin struct {
	node string
	deps Deps

	mu      sync.Mutex
	entries map[string]queue.QueueEntry
	seq     uint64
	// placed is, per attempt key, until when (on the monotonic clock) its
	// placer alone may start it.
	placed map[string]time.Duration
	// short is, per running gang attempt, since when (monotonic) some of
	// its ranks have been missing (RunVerdict.Missing); only Reconcile's
	// goroutine touches it.
	short map[string]time.Duration
	// ended remembers how recent entries ended (Status).
	ended outcomes

	published atomic.Pointer[[]queue.QueueEntry]
}

// New makes the origin of node's entries; Open loads them.
func New(node string, deps Deps) *Origin {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Changed == nil {
		deps.Changed = &notify.Signal{}
	}
	if deps.QueueChanged == nil {
		deps.QueueChanged = func() {}
	}
	if deps.Events == nil {
		deps.Events = func(event.Event) {}
	}
	if deps.MaxPerUser <= 0 {
		deps.MaxPerUser = queue.DefaultMaxQueuedPerUser
	}
	o := &Origin{node: node, deps: deps, entries: map[string]queue.QueueEntry{}, placed: map[string]time.Duration{}, short: map[string]time.Duration{}}
	o.publishLocked()
	return o
}

// Open loads the entries the store kept.
func (o *Origin) Open() error {
	entries, seq, err := o.deps.Store.Entries()
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range entries {
		o.entries[e.ID] = e
		if e.Placer != "" && !e.Running {
			// Its placer may be starting it still: nobody else may
			// until a start could have shown.
			o.placed[e.Key()] = o.deps.Clock.Mono() + queue.InFlightTimeout
		}
	}
	o.seq = seq
	o.repairArraysLocked()
	o.publishLocked()
	return nil
}

// Entries are this node's entries, ordered by id, as last published.
func (o *Origin) Entries() []queue.QueueEntry { return *o.published.Load() }

// Get returns one of this node's entries.
func (o *Origin) Get(id string) (queue.QueueEntry, bool) {
	for _, e := range o.Entries() {
		if e.ID == id {
			return e, true
		}
	}
	return queue.QueueEntry{}, false
}

// ByID indexes the published entries.
func (o *Origin) ByID() map[string]queue.QueueEntry {
	out := map[string]queue.QueueEntry{}
	for _, e := range o.Entries() {
		out[e.ID] = e
	}
	return out
}

func (o *Origin) publishLocked() {
	list := make([]queue.QueueEntry, 0, len(o.entries))
	for _, e := range o.entries {
		list = append(list, e)
	}
	slices.SortFunc(list, func(a, b queue.QueueEntry) int { return cmp.Compare(a.ID, b.ID) })
	o.published.Store(&list)
	o.deps.Changed.Notify()
}

// Submit gives a checked entry its id and submit time, persists it and
// publishes it.
//
// A submission retried with the same request id (its answer was lost)
// gets the entry the first one made.
func (o *Origin) Submit(e queue.QueueEntry) (queue.QueueEntry, error) {
	e, fresh, err := o.admit(e)
	if err != nil || !fresh {
		return e, err
	}
	o.deps.Log.Info("queued", "entry", e.ID, "user", e.User, "nodes", e.Nodes, "gpus_per_node", e.GPUsPerNode)
	o.deps.QueueChanged()
	return e, nil
}

// admit is Submit under the lock: the entry made durable and published,
// its submission recorded. fresh is false for a retried request id, which
// gets the entry its first try made.
func (o *Origin) admit(e queue.QueueEntry) (_ queue.QueueEntry, fresh bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.RequestID != "" {
		for _, x := range o.entries {
			if x.UID == e.UID && x.RequestID == e.RequestID {
				return x, false, nil
			}
		}
	}
	if n := o.countLocked(e.User); n+weight(e) > o.deps.MaxPerUser {
		if e.Array != nil {
			return queue.QueueEntry{}, false, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf(
				"you have %d requests queued or running from %s and this array adds %d (each task counts as one); at most %d: use fewer tasks, or wait for some to finish", n, o.node, weight(e), o.deps.MaxPerUser)}
		}
		return queue.QueueEntry{}, false, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf(
			"you have %d requests queued or running from %s, the most one person may: cancel some (`dibs queue` shows them), or wait for them to finish", n, o.node)}
	}
	seq := o.seq + 1
	e.Origin = o.node
	e.ID = queue.QueueID(o.node, seq)
	e.SubmittedAt = o.deps.Clock.Now().Round(0)
	if err := e.Validate(); err != nil {
		return queue.QueueEntry{}, false, err
	}
	if err := o.deps.Store.PutEntry(e, seq); err != nil {
		return queue.QueueEntry{}, false, err
	}
	o.seq = seq
	o.entries[e.ID] = e
	if e.Array != nil && len(e.After) == 0 {
		o.fillLocked(e.ID, true)
	}
	o.publishLocked()
	o.deps.Events(event.EntryEvent(event.EventSubmit, e, "", o.deps.Clock.Now()))
	return e, true, nil
}

// countLocked is how many of this node's entries user has.
func (o *Origin) countLocked(user string) int {
	n := 0
	for _, x := range o.entries {
		switch {
		case x.User != user:
		case x.Array != nil:
			n += x.Array.Unmade() // its made tasks count for themselves
		default:
			n++
		}
	}
	return n
}

// Cancel withdraws an entry, for its submitter or an admin, whether it
// waits or runs (as scancel does): a running one's leases are then ranks
// of an attempt that is over, which the next Reconcile stops (SIGTERM, and
// the end after the preemption grace) — it is never requeued.
func (o *Origin) Cancel(c lease.Caller, id string) error {
	if err := o.withdraw(c, id); err != nil {
		return err
	}
	o.deps.Log.Info("cancelled", "entry", id, "by", c.User)
	o.deps.QueueChanged()
	return nil
}

// withdraw is Cancel under the lock: an array or one of its tasks
// (cancelArrayLocked), else one entry, deleted durably, remembered as
// cancelled and recorded.
func (o *Origin) withdraw(c lease.Caller, id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if handled, err := o.cancelArrayLocked(c, id); handled {
		return err
	}
	e, ok := o.entries[id]
	switch {
	case !ok:
		return &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no queued request %s: `dibs queue` shows them", id)}
	case e.UID != c.UID && !c.Admin:
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s is %s's request; only they (or an admin) can cancel it", id, e.User)}
	}
	if err := o.deps.Store.DeleteEntry(id); err != nil {
		return err
	}
	delete(o.entries, id)
	delete(o.placed, e.Key())
	o.ended.note(queue.EntryStatus{ID: id, State: queue.EntryCancelled, Restarts: e.Restarts, MaxRestarts: e.MaxRestarts})
	o.publishLocked()
	why := ""
	if e.Running {
		why = "its running leases are stopped (SIGTERM) and end after the grace"
	}
	ev := event.EntryEvent(event.EventCancel, e, why, o.deps.Clock.Now())
	if c.UID != e.UID && words.ValidUserName(c.User) {
		ev.By, ev.Admin = c.User, c.Admin
		ev.Text += " by " + c.User
	}
	o.deps.Events(ev)
	return nil
}

// Place lets placer (a scheduler: node/instance) start the attempt key,
// unless another placer was let start it less than queue.InFlightTimeout
// ago — that one's start may still land — or it runs already. The same
// placer may ask again (its first start failed). The placer is made durable
// before the answer, so a restart of this agent does not let a second
// scheduler in. The entry's job comes back whole (nil for a queued claim):
// the origin alone keeps its command, directory and environment, and the
// placer carries them to the nodes that start it.
func (o *Origin) Place(key, placer string) (*job.Job, error) {
	job, err := o.place(key, placer)
	if err != nil || job == nil {
		return nil, err
	}
	j := *job
	j.Command = slices.Clone(job.Command)
	j.Env = maps.Clone(job.Env)
	return &j, nil
}

func (o *Origin) place(key, placer string) (*job.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var e queue.QueueEntry
	found := false
	for _, x := range o.entries {
		if x.Key() == key {
			e, found = x, true
		}
	}
	now := o.deps.Clock.Mono()
	switch {
	case !found:
		return nil, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no queued attempt %s here", key)}
	case e.Running:
		return nil, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s runs already", key)}
	case e.Held():
		// An array (its tasks start, not it) or a run whose dependencies
		// have not ended: an older scheduler does not know either.
		return nil, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s is an array or waits for other runs: it does not start itself", key)}
	case e.Placer != "" && e.Placer != placer && now < o.placed[key]:
		return nil, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s is being started by %s", key, e.Placer)}
	}
	if e.Placer != placer {
		e.Placer = placer
		if err := o.deps.Store.PutEntry(e, o.seq); err != nil {
			return nil, err
		}
		o.entries[e.ID] = e
		o.publishLocked()
	}
	o.placed[key] = now + queue.InFlightTimeout
	return e.Job, nil
}

// MarkStarted records that an attempt of an entry runs. It reports the
// entry when this call marked it (false when unknown, another attempt, or
// already marked).
func (o *Origin) MarkStarted(key string) (queue.QueueEntry, bool) {
	e, marked, err := o.markRunning(key)
	if err != nil {
		o.deps.Log.Error("mark running", "entry", e.ID, "err", err)
		return queue.QueueEntry{}, false
	}
	if !marked {
		return queue.QueueEntry{}, false
	}
	o.deps.QueueChanged()
	return e, true
}

// markRunning is MarkStarted under the lock. On a store error e names the
// entry it could not mark.
func (o *Origin) markRunning(key string) (e queue.QueueEntry, marked bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	found := false
	for _, x := range o.entries {
		if x.Key() == key {
			e, found = x, true
		}
	}
	if !found || e.Running {
		return queue.QueueEntry{}, false, nil
	}
	e.Running = true
	if err := o.deps.Store.PutEntry(e, o.seq); err != nil {
		return e, false, err
	}
	o.entries[e.ID] = e
	delete(o.placed, key)
	if _, _, task := job.ArrayTaskOf(e.ID); task {
		// One notice for the array's start, not one per task.
		o.taskStartedLocked(e)
	} else {
		o.deps.Events(event.EntryEvent(event.EventStart, e, "", o.deps.Clock.Now()))
	}
	o.publishLocked()
	return e, true, nil
}

// Refuse drops a waiting entry whose attempt a node refused for good (no
// account there, a command it cannot run), remembering why (Status). ok is
// false when the attempt is not this entry's waiting one.
func (o *Origin) Refuse(key, why string) (queue.QueueEntry, bool) {
	e, dropped, err := o.drop(key, why)
	if err != nil {
		o.deps.Log.Error("drop a refused entry", "entry", e.ID, "err", err)
		return queue.QueueEntry{}, false
	}
	if !dropped {
		return queue.QueueEntry{}, false
	}
	o.deps.Log.Info("dropped a queued entry a node refused", "entry", e.ID)
	o.deps.QueueChanged()
	return e, true
}

// drop is Refuse under the lock. On a store error e names the entry it
// could not drop.
func (o *Origin) drop(key, why string) (e queue.QueueEntry, dropped bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	found := false
	for _, x := range o.entries {
		if x.Key() == key && !x.Running {
			e, found = x, true
		}
	}
	if !found {
		return queue.QueueEntry{}, false, nil
	}
	err := o.taskEndedLocked(e, queue.EntryFailed)
	if err == nil {
		err = o.deps.Store.DeleteEntry(e.ID)
	}
	if err != nil {
		return e, false, err
	}
	delete(o.entries, e.ID)
	delete(o.placed, e.Key())
	o.ended.note(queue.EntryStatus{ID: e.ID, State: queue.EntryFailed, Reason: queue.ClipRetryWhy(why), Restarts: e.Restarts, MaxRestarts: e.MaxRestarts})
	o.fillArraysLocked(false)
	o.publishLocked()
	return e, true, nil
}

// Finish ends an attempt: the entry goes back in the queue for another one
// when it was preempted for someone else (unless submitted with
// --no-requeue), or when it failed and asked for that (requeued), else it
// is gone. ok is
// false when the attempt was not this entry's running one (someone else
// finished it first).
//
// A requeued entry waits before its next attempt (Deps.RetryDelay), and
// carries why, so `dibs queue` can say why it waits and until when; a run
// preempted for someone else goes back at once.
func (o *Origin) Finish(e queue.QueueEntry, failed, preempted bool, why string) (next queue.QueueEntry, requeued, ok bool) {
	next, requeued, ok, err := o.settle(e, failed, preempted, why)
	if err != nil {
		o.deps.Log.Error("finish queued entry", "entry", e.ID, "err", err)
		return queue.QueueEntry{}, false, false
	}
	if ok {
		o.deps.QueueChanged()
	}
	return next, requeued, ok
}

// settle is Finish under the lock.
func (o *Origin) settle(e queue.QueueEntry, failed, preempted bool, why string) (next queue.QueueEntry, requeued, ok bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, found := o.entries[e.ID]
	if !found || cur.Key() != e.Key() || !cur.Running {
		return queue.QueueEntry{}, false, false, nil
	}
	if preempted {
		next, requeued = cur.AfterPreempt()
	}
	if !requeued {
		next, requeued = cur.AfterRun(failed)
		if requeued && o.deps.RetryDelay != nil {
			if d := o.deps.RetryDelay(next.Restarts); d > 0 {
				next.RetryAt = o.deps.Clock.Now().Add(d).Round(0)
			}
			next.RetryWhy = queue.ClipRetryWhy(why)
		}
	}
	var err error
	if requeued {
		err = o.deps.Store.PutEntry(next, o.seq)
	} else {
		state := queue.EntryFinished
		if failed {
			state = queue.EntryFailed
		}
		// A task's end is in its array before the task is gone.
		if err = o.taskEndedLocked(cur, state); err == nil {
			err = o.deps.Store.DeleteEntry(e.ID)
		}
	}
	if err != nil {
		return queue.QueueEntry{}, false, false, err
	}
	if requeued {
		o.entries[e.ID] = next
		delete(o.placed, e.Key())
	} else {
		delete(o.entries, e.ID)
		delete(o.placed, e.Key())
		st := queue.EntryStatus{ID: e.ID, State: queue.EntryFinished, Restarts: cur.Restarts, MaxRestarts: cur.MaxRestarts}
		if failed {
			st.State, st.Reason = queue.EntryFailed, queue.ClipRetryWhy(why)
		}
		o.ended.note(st)
		o.fillArraysLocked(false)
	}
	o.publishLocked()
	return next, requeued, true, nil
}

// Stopper stops one rank of a gang (a lease on some node).
type Stopper func(ctx context.Context, l lease.Lease) error

// Notifier tells a user something on their board and in their sessions.
// Reconcile no longer calls it: what it decides is recorded as events,
// whose notices reach the person everywhere (agent/events).
type Notifier func(uid int, text string)

// Reconcile is the origin's pass over its running entries, from what the
// cluster shows: a gang with a failed or lost rank has its other ranks
// stopped; an attempt whose leases are all gone finishes or requeues;
// ranks of attempts that are over (a node that came back after its gang was
// given up) are stopped.
//
// A gang some of whose ranks never started (a commit lost, a reservation
// that expired uncommitted) is failed once that has lasted missingAfter
// (the reservations' lifetime): its other ranks are stopped, so no gang
// runs partly for longer than a reservation lives.
//
// A node away (restarting, or silent) keeps its ranks for grace
// (queue.ClusterView.JudgeRunning). Until this agent has heard the state of
// every live peer (just started, or a peer just back), it holds every
// verdict: a peer not yet heard holds ranks it cannot see.
func (o *Origin) Reconcile(ctx context.Context, v queue.ClusterView, grace, missingAfter time.Duration, stop Stopper, _ Notifier) {
	o.fillArrays()
	if !v.Heard() {
		return
	}
	running := map[string]bool{}
	for _, e := range o.Entries() {
		if !e.Running {
			continue
		}
		running[e.Key()] = true
		verdict := v.JudgeRunning(e, grace)
		verdict = o.judgeMissing(e, verdict, missingAfter)
		switch verdict.Action {
		case queue.RunStopRanks:
			for _, l := range verdict.Stop {
				o.deps.Log.Info("stopping a gang rank", "entry", e.ID, "why", verdict.Why, "rank", l.Rank, "lease", l.ID, "node", l.Node)
				if err := stop(ctx, l); err != nil {
					o.deps.Log.Warn("stop gang rank", "lease", l.ID, "node", l.Node, "err", err)
				}
			}
		case queue.RunDone:
			next, requeued, ok := o.Finish(e, verdict.Failed, verdict.Preempted, verdict.Why)
			switch {
			case !ok:
			case requeued:
				o.deps.Log.Info("requeued", "entry", e.ID, "why", verdict.Why, "restart", next.Restarts, "of", next.MaxRestarts, "retry_at", next.RetryAt)
				o.deps.Events(event.EntryEvent(event.EventRequeue, next, verdict.Why, o.deps.Clock.Now()))
			case verdict.Failed:
				o.deps.Log.Info("failed", "entry", e.ID, "why", verdict.Why)
				o.deps.Events(event.EntryEvent(event.EventFail, e, verdict.Why, o.deps.Clock.Now()))
			default:
				o.deps.Events(event.EntryEvent(event.EventFinish, e, v.RunExit(e), o.deps.Clock.Now()))
			}
		}
	}
	for key := range o.short {
		if !running[key] {
			delete(o.short, key)
		}
	}
	o.resolveAfter(ctx)
	for _, l := range v.Orphans(o.node, o.ByID()) {
		o.deps.Log.Info("stopping a rank of an attempt that is over", "lease", l.ID, "node", l.Node, "entry", l.Entry)
		if err := stop(ctx, l); err != nil {
			o.deps.Log.Warn("stop orphaned rank", "lease", l.ID, "node", l.Node, "err", err)
		}
	}
}

// judgeMissing turns a gang's missing ranks into a failure once they have
// been missing for missingAfter on this node's monotonic clock.
func (o *Origin) judgeMissing(e queue.QueueEntry, v queue.RunVerdict, missingAfter time.Duration) queue.RunVerdict {
	key := e.Key()
	if v.Missing == 0 {
		delete(o.short, key)
		return v
	}
	now := o.deps.Clock.Mono()
	since, seen := o.short[key]
	if !seen {
		o.short[key] = now
		return v
	}
	if now-since < missingAfter {
		return v
	}
	out := queue.RunVerdict{Action: queue.RunStopRanks, Failed: true,
		Why: fmt.Sprintf("%d of its %d ranks never started", v.Missing, e.Nodes)}
	for _, l := range v.Live {
		if l.PreemptedAt.IsZero() {
			out.Stop = append(out.Stop, l)
		}
	}
	if len(out.Stop) == 0 {
		return v
	}
	return out
}
