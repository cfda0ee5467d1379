package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// endedLease remembers, for a while, how a queued run's lease ended, so the
// entry's origin can tell a failed gang rank from a finished one.
type endedLease struct {
	Entry  string    `json:"entry"`
	Lease  string    `json:"lease"`
	Gang   string    `json:"gang,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Reserved: it ended as an uncommitted gang reservation, so nothing ran.
	Reserved bool `json:"reserved,omitempty"`
}

// endedKeep is how long ended queued leases are remembered.
const endedKeep = 10 * time.Minute

// failed reports whether a queued lease's end means its run failed.
func (e endedLease) failed() bool {
	if e.Reserved {
		return false
	}
	switch e.Reason {
	case "exit-0", "released", "expired":
		return false
	}
	return true
}

// statusDir is where a user's queued jobs write their exit status: a
// directory that user owns, made by the agent, never a link.
func (a *Agent) statusDir(u launch.User) (string, error) {
	dir := filepath.Join(os.TempDir(), "dibs-exit-"+strconv.Itoa(u.UID))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != u.UID {
		if os.Geteuid() != 0 || st.Uid != 0 {
			return "", fmt.Errorf("%s belongs to uid %d, not %d", dir, st.Uid, u.UID)
		}
		if err := os.Chown(dir, u.UID, u.GID); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// sessionEndReason reads how a queued run's command ended.
func (a *Agent) sessionEndReason(l lease.Lease, u launch.User) string {
	if l.Entry == "" {
		return "session-ended"
	}
	dir, err := a.statusDir(u)
	if err != nil {
		return "session-ended"
	}
	path := filepath.Join(dir, l.Session+".exit")
	b, err := os.ReadFile(path)
	os.Remove(path)
	if err != nil {
		return "session-ended"
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "session-ended"
	}
	return "exit-" + strconv.Itoa(code)
}

// Submit queues a request at this agent, its source of truth.
func (a *Agent) Submit(ctx context.Context, c lease.Caller, req api.SubmitRequest) (api.Submitted, error) {
	if c.UID < 0 {
		return api.Submitted{}, &lease.Error{Code: lease.CodeForbidden, Msg: "you have no account here, so cannot queue"}
	}
	claim, err := claimFromRequest(req.Claim)
	if err != nil {
		return api.Submitted{}, err
	}
	e := lease.QueueEntry{
		Origin: a.cfg.NodeName, User: c.User, UID: c.UID,
		Nodes: req.Nodes, GPUsPerNode: req.GPUsPerNode, Node: req.Claim.Node,
		Duration: claim.Duration, Kind: claim.Kind, Note: claim.Note,
		Requeue: req.Requeue, MaxRestarts: req.MaxRestarts, Model: req.Model,
	}
	if len(claim.GPUs) > 0 {
		return api.Submitted{}, lease.Invalidf("a queued request asks for a number of GPUs (-g N), not named ones")
	}
	if e.Nodes <= 1 && e.GPUsPerNode == 0 {
		e.GPUsPerNode = claim.Count
	}
	if req.Claim.Run != nil {
		if _, err := a.sessionUser(c); err != nil {
			return api.Submitted{}, err
		}
		e.Job = &lease.Job{Command: req.Claim.Run.Command, Dir: req.Claim.Run.Dir, Name: req.Claim.Run.Name, Torchrun: req.Torchrun}
	}
	if err := e.Check(a.cfg.Policy); err != nil {
		return api.Submitted{}, err
	}
	if err := lease.CheckFeasible(e, a.schedNodes(), e.Model); err != nil {
		return api.Submitted{}, err
	}
	a.mu.Lock()
	seq := a.queueSeq + 1
	e.ID = lease.QueueID(a.cfg.NodeName, seq)
	e.SubmittedAt = a.now().Round(0)
	if err := a.store.PutEntry(e, seq); err != nil {
		a.mu.Unlock()
		return api.Submitted{}, err
	}
	a.queueSeq = seq
	a.queue[e.ID] = e
	a.bumpLocked()
	a.mu.Unlock()
	a.logf("queue: %s submitted %s (%d×%d GPUs)", c, e.ID, e.Nodes, e.GPUsPerNode)
	a.leaseChanged()
	a.kickScheduler()
	q := a.Queue()
	out := api.Submitted{ID: e.ID, Waiting: len(q.Entries)}
	for _, x := range q.Entries {
		if x.ID == e.ID {
			out.Position = x.Position
		}
	}
	return out, nil
}

// Cancel withdraws a queued request: by its submitter (or an admin), at its
// origin.
func (a *Agent) Cancel(ctx context.Context, c lease.Caller, id string) error {
	origin, ok := lease.OriginOfQueueID(id)
	if !ok {
		return lease.Invalidf("%q is not a queue id: ids look like node01-q3 (`dibs queue` shows them)", id)
	}
	if origin != a.cfg.NodeName {
		var out struct{}
		return a.cluster.request(ctx, c, origin, opCancel, map[string]string{"id": id}, &out)
	}
	a.mu.Lock()
	e, ok := a.queue[id]
	if !ok {
		a.mu.Unlock()
		return &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no queued request %s: `dibs queue` shows them", id)}
	}
	if e.UID != c.UID && !c.Admin {
		a.mu.Unlock()
		return &lease.Error{Code: lease.CodeForbidden, Msg: fmt.Sprintf("%s is %s's request; only they (or an admin) can cancel it", id, e.User)}
	}
	if e.Running {
		a.mu.Unlock()
		return lease.Invalidf("%s is already running: release its leases instead (`dibs ls` shows them)", id)
	}
	if err := a.store.DeleteEntry(id); err != nil {
		a.mu.Unlock()
		return err
	}
	delete(a.queue, id)
	a.bumpLocked()
	a.mu.Unlock()
	a.logf("queue: %s cancelled %s", c, id)
	a.leaseChanged()
	a.kickScheduler()
	return nil
}

// allEntries is the cluster's queue: this node's entries and every other
// node's, as gossiped.
func (a *Agent) allEntries() []lease.QueueEntry {
	a.mu.Lock()
	out := make([]lease.QueueEntry, 0, len(a.queue))
	for _, e := range a.queue {
		out = append(out, e)
	}
	a.mu.Unlock()
	for _, r := range a.cluster.view() {
		if r.Name != a.cfg.NodeName && r.Extra != nil {
			out = append(out, r.Extra.Queue...)
		}
	}
	return out
}

// Queue is `dibs queue`: the waiting requests in scheduling order.
func (a *Agent) Queue() api.Queue {
	now := a.now()
	var waiting, running []lease.QueueEntry
	for _, e := range a.allEntries() {
		if e.Running {
			running = append(running, e)
		} else {
			waiting = append(waiting, e)
		}
	}
	plan := lease.Schedule(waiting, a.schedNodes(), a.clusterUsage(), now, a.cfg.Sched)
	q := api.Queue{Scheduler: a.schedulerName(), Entries: []api.QueuedEntry{}}
	for _, r := range plan.Order {
		q.Entries = append(q.Entries, queuedView(r.Entry, r.Priority, r.Position, r.EstStart, r.Waiting))
	}
	slices.SortFunc(running, func(x, y lease.QueueEntry) int { return strings.Compare(x.ID, y.ID) })
	for _, e := range running {
		v := queuedView(e, 0, 0, time.Time{}, "")
		v.Running = true
		q.Entries = append(q.Entries, v)
	}
	return q
}

func queuedView(e lease.QueueEntry, prio float64, pos int, est time.Time, why string) api.QueuedEntry {
	v := api.QueuedEntry{
		ID: e.ID, Position: pos, User: e.User, Nodes: e.Nodes, GPUsPerNode: e.GPUsPerNode, Node: e.Node,
		Kind: string(e.Kind), Duration: lease.FormatDuration(e.Duration), Note: e.Note, Priority: prio,
		SubmittedAt: e.SubmittedAt, EstStart: est, Waiting: why, Restarts: e.Restarts,
	}
	if e.Job != nil {
		v.Command = e.Job.Command
	}
	return v
}

// markStarted is the origin learning that an attempt of its entry runs.
func (a *Agent) markStarted(key string) {
	id, _, _ := strings.Cut(key, "#")
	a.mu.Lock()
	e, ok := a.queue[id]
	if !ok || e.Key() != key || e.Running {
		a.mu.Unlock()
		return
	}
	e.Running = true
	if err := a.store.PutEntry(e, a.queueSeq); err != nil {
		a.mu.Unlock()
		a.logf("queue: mark %s running: %v", id, err)
		return
	}
	a.queue[id] = e
	a.noticeLocked(e.UID, fmt.Sprintf("your queued request %s started", id))
	a.bumpLocked()
	a.mu.Unlock()
	a.leaseChanged()
	a.tellUser(e, fmt.Sprintf("dibs: your queued request %s started (`dibs ls` shows its GPUs)", id))
}

// tellUser puts a message in the user's tmux sessions on this node.
func (a *Agent) tellUser(e lease.QueueEntry, text string) {
	u, err := a.users.lookup(e.UID)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
	defer cancel()
	if l, ok := a.deps.Sessions.(interface {
		List(context.Context, launch.User) ([]string, error)
	}); ok {
		names, _ := l.List(ctx, u)
		for _, n := range names {
			a.deps.Sessions.Message(ctx, u, n, text)
		}
	}
}

// watchRunning runs at the origin: a running entry whose leases are all gone
// is finished — or, if it failed or was preempted and asked for it, goes back
// to the queue. A gang with a failed rank or a dead node has its other ranks
// stopped.
func (a *Agent) watchRunning() {
	a.mu.Lock()
	var running []lease.QueueEntry
	for _, e := range a.queue {
		if e.Running {
			running = append(running, e)
		}
	}
	a.mu.Unlock()
	if len(running) == 0 {
		return
	}
	type holder struct {
		node  string
		alive bool
		l     lease.Lease
	}
	live := map[string][]holder{}
	ended := map[string][]endedLease{}
	a.mu.Lock()
	for _, l := range a.table.List() {
		if l.Entry != "" {
			live[l.Entry] = append(live[l.Entry], holder{a.cfg.NodeName, true, l})
		}
	}
	for _, x := range a.ended {
		if !x.Reserved {
			ended[x.Entry] = append(ended[x.Entry], x)
		}
	}
	a.mu.Unlock()
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName {
			continue
		}
		for _, l := range r.Leases {
			if l.Entry != "" {
				live[l.Entry] = append(live[l.Entry], holder{r.Name, r.State == "alive", l})
			}
		}
		if r.Extra != nil {
			for _, x := range r.Extra.Ended {
				if !x.Reserved {
					ended[x.Entry] = append(ended[x.Entry], x)
				}
			}
		}
	}
	for _, e := range running {
		key := e.Key()
		hs := live[key]
		failed, why := false, ""
		interactive := e.Job == nil || len(e.Job.Command) == 0
		for _, x := range ended[key] {
			// An interactive shell has no exit status: leaving it is normal.
			if x.failed() && !(interactive && x.Reason == "session-ended") {
				failed, why = true, fmt.Sprintf("lease %s ended: %s", x.Lease, x.Reason)
			}
		}
		for _, h := range hs {
			if !h.alive {
				failed, why = true, fmt.Sprintf("node %s is down", h.node)
			}
		}
		if len(hs) > 0 {
			if failed && e.Nodes > 1 {
				byNode := map[string][]lease.Lease{}
				for _, h := range hs {
					if h.alive {
						byNode[h.node] = append(byNode[h.node], h.l)
					}
				}
				a.stopGang(e, byNode, why)
			}
			continue
		}
		if len(ended[key]) == 0 {
			continue // not seen ending yet (gossip may lag)
		}
		a.finishEntry(e, failed, why)
	}
}

// stopGang ends the other ranks of a gang whose rank failed: SIGTERM now,
// SIGKILL and the end after the grace.
func (a *Agent) stopGang(e lease.QueueEntry, byNode map[string][]lease.Lease, why string) {
	for node, ls := range byNode {
		for _, l := range ls {
			if !l.PreemptedAt.IsZero() {
				continue
			}
			a.logf("queue: gang %s: %s; stopping rank %d (%s on %s)", e.ID, why, l.Rank, l.ID, node)
			ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
			err := a.cluster.request(ctx, lease.Caller{UID: e.UID, User: e.User, Admin: true}, node, opPreempt,
				preemptRequest{Lease: l.ID, Token: l.Token, Reason: "gang", Signal: int(syscall.SIGTERM)}, &struct{}{})
			cancel()
			if err != nil {
				a.logf("queue: stop %s on %s: %v", l.ID, node, err)
			}
		}
	}
}

// finishEntry ends or requeues an entry whose leases are all gone.
func (a *Agent) finishEntry(e lease.QueueEntry, failed bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, ok := a.queue[e.ID]
	if !ok || cur.Key() != e.Key() || !cur.Running {
		return
	}
	if failed && cur.Requeue && cur.Restarts < cur.MaxRestarts {
		cur.Running = false
		cur.Restarts++
		cur.Attempt++
		if err := a.store.PutEntry(cur, a.queueSeq); err != nil {
			a.logf("queue: requeue %s: %v", e.ID, err)
			return
		}
		a.queue[e.ID] = cur
		a.noticeLocked(cur.UID, fmt.Sprintf("%s failed (%s); back in the queue (restart %d of %d)", e.ID, why, cur.Restarts, cur.MaxRestarts))
		a.logf("queue: %s failed (%s); requeued, restart %d of %d", e.ID, why, cur.Restarts, cur.MaxRestarts)
	} else {
		if err := a.store.DeleteEntry(e.ID); err != nil {
			a.logf("queue: finish %s: %v", e.ID, err)
			return
		}
		delete(a.queue, e.ID)
		if failed {
			a.noticeLocked(cur.UID, fmt.Sprintf("%s failed: %s", e.ID, why))
		}
	}
	a.bumpLocked()
	go func() {
		a.leaseChanged()
		a.kickScheduler()
	}()
}
