package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Submit queues a request at this agent, its source of truth. It gets every
// check a direct request gets, now, so nothing that can never start waits
// in the queue (or blocks it).
//
// It reads the cluster once: the one view its checks use (the features
// every live node speaks, peer.Require; what could ever fit,
// queue.CheckFeasible) is the one its answer's position is computed on,
// with this node's entries read again after the origin has written the
// new one (answerOf).
func (b *Bound) Submit(ctx context.Context, req api.SubmitRequest) (api.Submitted, error) {
	if err := b.write(); err != nil {
		return api.Submitted{}, err
	}
	if b.c.UID < 0 {
		return api.Submitted{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "you have no account here, so cannot queue"}
	}
	if _, err := b.actor("the node it starts on"); err != nil {
		return api.Submitted{}, err // a queued run starts by its holder's name
	}
	claim, err := claimOf(req.Claim)
	if err != nil {
		return api.Submitted{}, err
	}
	s := b.s
	e, err := queue.NewEntry(s.cfg.Node, b.c, claim, queue.Ask{
		Nodes: req.Nodes, GPUsPerNode: req.GPUsPerNode, Node: req.Claim.Node, Model: req.Model,
		Requeue: req.Requeue, MaxRestarts: req.MaxRestarts, NoRequeue: req.NoRequeue,
		Torchrun: req.Torchrun, PerGPU: req.PerGPU,
	})
	if err != nil {
		return api.Submitted{}, err
	}
	v := s.View()
	if e.MIG != "" {
		if err := peer.Require(v, peer.QueuedMIG); err != nil {
			return api.Submitted{}, err
		}
	}
	if !e.NodeChoice.IsZero() {
		if err := peer.Require(v, peer.NodeLists); err != nil {
			return api.Submitted{}, err
		}
	}
	if e.CPUsPerGPU > 0 {
		if err := peer.Require(v, peer.ChosenCores); err != nil {
			return api.Submitted{}, err
		}
	}
	if e.Node != "" {
		if err := words.ValidNodeName(e.Node); err != nil {
			return api.Submitted{}, refusal.Wrap(refusal.CodeInvalid, err)
		}
	}
	if e.Job != nil {
		if err := s.canRun(b.c); err != nil {
			return api.Submitted{}, err
		}
	}
	if err := e.Check(s.cfg.Policy); err != nil {
		return api.Submitted{}, err
	}
	if err := b.sweep(ctx, v, &e, req); err != nil {
		return api.Submitted{}, err
	}
	if err := queue.CheckFeasible(e, v.SchedNodes(), e.Model, s.cfg.Sched.Pools); err != nil {
		return api.Submitted{}, err
	}
	e, err = s.deps.Origin.Submit(e)
	if err != nil {
		return api.Submitted{}, err
	}
	s.deps.Kick()
	return b.answerOf(v, e.ID), nil
}

// answerOf is the answer to the submit of entry id: where it stands in
// the queue as `dibs queue` shows it (Bound.queueOf), and how many rows
// that has. v is the view the submit was checked on, read before the
// origin wrote the entry; this node's part of it is brought up to date
// with the origin's entries now (the new one, an array's first tasks,
// which Origin.Submit made with it, or, for a retry, the entry the first
// try made), and its time with the clock. The other nodes' parts are as
// the submit's checks read them.
func (b *Bound) answerOf(v queue.ClusterView, id string) api.Submitted {
	v.Local().Queue = b.s.deps.Origin.Entries()
	v.Now = b.s.deps.Clock.Now()
	q := b.queueOf(v)
	out := api.Submitted{ID: id, Waiting: len(q.Entries)}
	for _, x := range q.Entries {
		if x.ID == id {
			out.Position = x.Position
		}
	}
	return out
}

// canRun refuses a run for a caller this agent cannot start sessions as.
func (s *Service) canRun(c lease.Caller) error {
	if c.UID < 0 {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s, so no session can run as them", c.User, s.cfg.Node)}
	}
	return s.canWrite(c.UID)
}

// Cancel withdraws a queued request: by its submitter (or an admin), at its
// origin.
func (b *Bound) Cancel(ctx context.Context, id string) error {
	if err := b.write(); err != nil {
		return err
	}
	origin, ok := queue.OriginOfQueueID(id)
	if !ok {
		return refusal.Invalidf("%q is not a queue id: ids look like node01-q3 (`dibs queue` shows them)", id)
	}
	if origin != b.s.cfg.Node {
		who, err := b.actor(origin)
		if err != nil {
			return err
		}
		_, err = peer.Call(ctx, b.s.deps.Peers, origin, peer.Cancel, who, peer.CancelRequest{ID: id})
		return err
	}
	if err := b.s.deps.Origin.Cancel(b.c, id); err != nil {
		return err
	}
	b.s.deps.Kick()
	return nil
}

// EntryStatus is what became of one of this node's queued requests: the
// state a client follows after it queued a run (`dibs run --queue`).
// Another node's entry is asked of its origin.
func (b *Bound) EntryStatus(ctx context.Context, id string) (api.EntryStatus, error) {
	origin, ok := queue.OriginOfQueueID(id)
	if !ok {
		return api.EntryStatus{}, refusal.Invalidf("%q is not a queue id: ids look like node01-q3 (`dibs queue` shows them)", id)
	}
	if origin != b.s.cfg.Node {
		return api.EntryStatus{}, refusal.Invalidf("%s was queued at %s, which keeps its state: run this on %s (`dibs queue` shows it from anywhere)", id, origin, origin)
	}
	return b.s.deps.Origin.Status(id, b.s.deps.Clock.Now()), nil
}

// Queue is `dibs queue`: the waiting requests in scheduling order, then the
// running ones.
func (b *Bound) Queue(context.Context) (api.Queue, error) {
	return b.queueOf(b.s.View()), nil
}

// queueOf is the queue as view v shows it to b's caller.
func (b *Bound) queueOf(v queue.ClusterView) api.Queue {
	s := b.s
	var waiting, orphaned, backoff, running, held []queue.QueueEntry
	for _, e := range v.Entries() {
		switch o, ok := v.Node(e.Origin); {
		case e.Held():
			// An array (its tasks are scheduled) or a run waiting for
			// others: foldArrays shows it.
			held = append(held, e)
		case e.Running:
			running = append(running, e)
		case e.Backoff(v.Now):
			// Requeued after a failure: it waits out its pause first.
			backoff = append(backoff, e)
		case !ok || !o.Alive():
			// Nothing starts while its origin, its source of truth, is
			// away (queue.ClusterView.Waiting): say so, not an estimate.
			orphaned = append(orphaned, e)
		default:
			waiting = append(waiting, e)
		}
	}
	cfg := s.cfg.Sched
	cfg.Explain = true // every node's reason, for `dibs queue -v` and --json
	plan := queue.Schedule(waiting, v.SchedNodes(), v.Usage(), v.Now, cfg)
	q := api.Queue{Scheduler: v.Scheduler(), Entries: []api.QueuedEntry{}}
	for _, r := range plan.Order {
		qv := queuedView(b.c, r.Entry, r.Priority, r.Position, r.EstStart, r.Waiting)
		if r.Reason.Code != "" {
			qv.Reason = &r.Reason
		}
		qv.NodeReasons = r.Nodes
		q.Entries = append(q.Entries, qv)
	}
	slices.SortFunc(backoff, func(x, y queue.QueueEntry) int { return x.RetryAt.Compare(y.RetryAt) })
	for _, e := range backoff {
		why := fmt.Sprintf("restart %d of %d, spaced after a failure: %s", e.Restarts, e.MaxRestarts, e.RetryWhy)
		qv := queuedView(b.c, e, 0, len(q.Entries)+1, e.RetryAt, why)
		qv.RetryAt = e.RetryAt
		qv.Reason = &queue.Reason{Code: queue.WaitRetry, Words: why}
		q.Entries = append(q.Entries, qv)
	}
	slices.SortFunc(orphaned, func(x, y queue.QueueEntry) int { return x.SubmittedAt.Compare(y.SubmittedAt) })
	for _, e := range orphaned {
		why := fmt.Sprintf("its origin %s is down: it waits until %s is back", e.Origin, e.Origin)
		qv := queuedView(b.c, e, 0, len(q.Entries)+1, time.Time{}, why)
		qv.Reason = &queue.Reason{Code: queue.WaitOrigin, Node: e.Origin, Words: why}
		q.Entries = append(q.Entries, qv)
	}
	slices.SortFunc(running, func(x, y queue.QueueEntry) int { return strings.Compare(x.ID, y.ID) })
	for _, e := range running {
		qv := queuedView(b.c, e, 0, 0, time.Time{}, "")
		qv.Running = true
		q.Entries = append(q.Entries, qv)
	}
	q.Entries = foldArrays(b.c, q.Entries, held)
	return q
}

// queuedView is one entry as c sees it: its command only for its holder
// and admins.
func queuedView(c lease.Caller, e queue.QueueEntry, prio float64, pos int, est time.Time, why string) api.QueuedEntry {
	e = e.ShownTo(c)
	v := api.QueuedEntry{
		ID: e.ID, Position: pos, User: e.User, Nodes: e.Nodes, GPUsPerNode: e.GPUsPerNode, Node: e.Node,
		Kind: string(e.Kind), Duration: words.FormatDuration(e.Duration), Note: e.Note, Priority: prio,
		SubmittedAt: e.SubmittedAt, EstStart: est, Waiting: why, Restarts: e.Restarts,
		Model: e.Model, Tags: e.Tags, MemMiB: e.MemMiB, MIG: e.MIG, NodeChoice: e.NodeChoice,
	}
	if e.Job != nil {
		v.Command = e.Job.Command
	}
	return v
}

// Usage is `dibs usage`: GPU-hours per user over the window, from every
// node's ledger, and each user's fair-share factor now.
func (b *Bound) Usage(ctx context.Context, window string) (api.UsageReport, error) {
	s := b.s
	w := 7 * 24 * time.Hour
	if window != "" {
		d, err := words.ParseDuration(window)
		if err != nil {
			return api.UsageReport{}, err
		}
		w = d
	}
	v := s.View()
	since := v.Now.Add(-w)
	rep := api.UsageReport{Since: since.Round(0), Users: []api.UserUsage{}}
	raw := map[string]float64{}
	mine, err := s.deps.Node.Usage().UsageSince(since)
	if err != nil {
		return rep, err
	}
	for u, x := range mine {
		raw[u] += x
	}
	idle, err := s.deps.Node.Usage().IdleSince(since)
	if err != nil {
		return rep, err
	}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Self {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := peer.Call(cctx, s.deps.Peers, n.Name, peer.Usage, peer.As(b.c.User), peer.UsageRequest{Since: since})
		cancel()
		if err != nil {
			rep.Missing = append(rep.Missing, n.Name)
			continue
		}
		for u, x := range r.GPUSeconds {
			raw[u] += x
		}
		for u, x := range r.IdleGPUSeconds {
			idle[u] += x
		}
	}
	decayed := v.Usage()
	running := map[string]int{}
	// What quotas count: a MIG instance or a budget its share of the GPU.
	held := map[string]float64{}
	for _, l := range v.Leases() {
		if l.ReservedUntil.IsZero() {
			running[l.User] += len(l.GPUs)
			held[l.User] += l.Weight()
		}
	}
	users := map[string]bool{}
	for _, m := range []map[string]float64{raw, decayed} {
		for u := range m {
			users[u] = true
		}
	}
	for u := range running {
		users[u] = true
	}
	for u := range users {
		share := 1.0
		if x, ok := s.cfg.Sched.Shares[u]; ok {
			share = x
		}
		rep.Users = append(rep.Users, api.UserUsage{
			User: u, GPUHours: raw[u] / 3600, Decayed: decayed[u] / 3600, Share: share,
			FairShare: queue.FairShareFactor(u, decayed, s.cfg.Sched), RunningGPU: running[u], Running: held[u], Quota: s.cfg.Sched.Quotas[u],
			IdleGPUHours: min(idle[u], raw[u]) / 3600,
		})
	}
	slices.SortFunc(rep.Users, func(x, y api.UserUsage) int {
		if c := cmp.Compare(y.GPUHours, x.GPUHours); c != 0 {
			return c
		}
		return strings.Compare(x.User, y.User)
	})
	return rep, nil
}
