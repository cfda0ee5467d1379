package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// depLookup bounds how long a submit (or the origin's pass) waits for
// another origin to say where a dependency stands.
const depLookup = 2 * time.Second

// sweep adds a submission's array (--array) and dependencies (--after,
// --after-any) to e, refusing at submit what could never start: an array
// with no command, a bad spec, an unknown dependency, one whose origin
// cannot be reached, one that already failed (for --after), and either
// while a node of the cluster runs an older dibs (peer.Sweeps). A cycle
// cannot form: a dependency must exist when the run waiting on it is
// submitted, and the new entry's id is given only after. v is the
// submit's view of the cluster, whose nodes' protocols say which speak it.
func (b *Bound) sweep(ctx context.Context, v queue.ClusterView, e *queue.QueueEntry, req api.SubmitRequest) error {
	if req.Array == "" && len(req.After) == 0 && len(req.AfterAny) == 0 {
		return nil
	}
	if err := peer.Require(v, peer.Sweeps); err != nil {
		return err
	}
	if req.Array != "" {
		if !e.Job.RunsCommand() {
			return refusal.Invalidf("an array runs a command once per task: dibs run --array %s -- CMD", req.Array)
		}
		a, err := queue.ParseArray(req.Array)
		if err != nil {
			return err
		}
		e.Array = a
	}
	ok, err := queue.ParseAfter(req.After, false)
	if err != nil {
		return err
	}
	anyDeps, err := queue.ParseAfter(req.AfterAny, true)
	if err != nil {
		return err
	}
	deps := append(ok, anyDeps...)
	if len(deps) > queue.MaxAfter {
		return refusal.Invalidf("a run may wait for at most %d others; it names %d", queue.MaxAfter, len(deps))
	}
	seen := map[string]bool{}
	for _, d := range deps {
		if seen[d.ID] {
			return refusal.Invalidf("%s is named twice in --after/--after-any: keep one", d.ID)
		}
		seen[d.ID] = true
		st, err := b.s.EntryState(ctx, d.ID)
		if err != nil {
			origin, _ := queue.OriginOfQueueID(d.ID)
			return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("cannot ask %s where %s stands (%v): a run cannot wait for what nobody can vouch for; try again when %s is back", origin, d.ID, err, origin)}
		}
		switch {
		case st.State == queue.EntryUnknown:
			return refusal.Invalidf("%s is not a queued run that dibs knows of (unknown, or ended too long ago): `dibs queue` shows the ids", d.ID)
		case queue.DepFor(d, st) == queue.DepBroken:
			return refusal.Invalidf("%s %s, so a run after it would never start: use --after-any %s to run anyway", d.ID, st.State, d.ID)
		case queue.DepFor(d, st) == queue.DepMet:
			continue // ended as asked already
		}
		e.After = append(e.After, d)
	}
	return nil
}

// EntryState is where entry id stands at its origin: this node's own
// record, or the origin's answer.
func (s *Service) EntryState(ctx context.Context, id string) (queue.EntryStatus, error) {
	origin, ok := queue.OriginOfQueueID(id)
	if !ok {
		return queue.EntryStatus{}, refusal.Invalidf("%q is not a queue id", id)
	}
	if origin == s.cfg.Node {
		return s.entryStatus(id), nil
	}
	cctx, cancel := context.WithTimeout(ctx, depLookup)
	defer cancel()
	r, err := peer.Call(cctx, s.deps.Peers, origin, peer.Status, peer.System, peer.StatusRequest{ID: id})
	if err != nil {
		return queue.EntryStatus{}, err
	}
	if r.Status.ID != id {
		return queue.EntryStatus{}, fmt.Errorf("%s answered for %s, not %s", origin, r.Status.ID, id)
	}
	return r.Status, nil
}

// endedLookback is how far back the event log is read for how an entry
// ended that the origin no longer remembers.
const endedLookback = 14 * 24 * time.Hour

// entryStatus is where one of this node's entries stands: the origin's
// record, or, for one it no longer remembers (it ended before this agent
// last started, or among more than the origin keeps), the last word of the
// event log, which is on disk: so a run waiting for it (--after) is not
// ended for the restart of its dependency's origin.
func (s *Service) entryStatus(id string) queue.EntryStatus {
	now := s.deps.Clock.Now()
	st := s.deps.Origin.Status(id, now)
	if st.State != queue.EntryUnknown || s.deps.Events == nil {
		return st
	}
	f := event.EventFilter{Since: now.Add(-endedLookback)}
	for {
		evs, more, err := s.deps.Events.Events(f, 4096)
		if err != nil {
			s.log.Warn("read the event log for an entry's end", "entry", id, "err", err)
			return st
		}
		for i := range evs {
			e := &evs[i]
			if e.Entry != id {
				continue
			}
			switch e.Kind {
			case event.EventFinish:
				st = queue.EntryStatus{ID: id, State: queue.EntryFinished}
			case event.EventFail:
				st = queue.EntryStatus{ID: id, State: queue.EntryFailed, Reason: queue.ClipRetryWhy(e.Reason)}
			case event.EventCancel:
				st = queue.EntryStatus{ID: id, State: queue.EntryCancelled}
			}
		}
		if !more || len(evs) == 0 {
			return st
		}
		f.After = evs[len(evs)-1].Seq
	}
}

// registerSweepOps serves other origins asking where one of this node's
// entries stands (a run of theirs waits for it). Only states travel, never
// commands, so any actor may ask.
func (s *Service) registerSweepOps() {
	peer.Handle(s.deps.Peers, peer.Status, func(ctx context.Context, from string, who peer.Actor, r peer.StatusRequest) (peer.StatusReply, error) {
		if origin, _ := queue.OriginOfQueueID(r.ID); origin != s.cfg.Node {
			return peer.StatusReply{}, refusal.Invalidf("%s is not %s's entry", r.ID, s.cfg.Node)
		}
		return peer.StatusReply{Status: s.entryStatus(r.ID)}, nil
	})
}

// foldArrays turns the rows of an array's tasks into one row for the
// array (`dibs queue` shows n1-q7[3-5] running, 12 waiting, 3 done): where
// its first task stood, or after the rest when none is made. Rows of runs
// that wait for others say for which.
func foldArrays(c lease.Caller, rows []api.QueuedEntry, held []queue.QueueEntry) []api.QueuedEntry {
	arrays := map[string]*api.QueuedEntry{}
	var order []*api.QueuedEntry
	for _, p := range held {
		row := queuedView(c, p, 0, 0, time.Time{}, heldWhy(p))
		if row.Waiting != "" {
			row.Reason = &queue.Reason{Code: queue.WaitDependency, Words: row.Waiting}
		}
		if p.Array != nil {
			done, failed, cancelled := p.Array.Counts()
			row.Array = &api.ArrayView{Spec: p.Array.String(), Done: done, Failed: failed, Cancelled: cancelled, Waiting: p.Array.Unmade()}
		}
		for _, d := range p.After {
			row.After = append(row.After, d.String())
		}
		r := row
		arrays[p.ID] = &r
		order = append(order, &r)
	}
	var out []api.QueuedEntry
	slot := map[string]int{} // an array's row in out
	for _, r := range rows {
		arr, idx, ok := job.ArrayTaskOf(r.ID)
		p := arrays[arr]
		if !ok || p == nil {
			out = append(out, r)
			continue
		}
		if r.Running {
			p.Array.RunningTasks = append(p.Array.RunningTasks, idx)
			p.Running = true
		} else {
			p.Array.Waiting++
			if p.Position == 0 || r.Position > 0 && r.Position < p.Position {
				p.Position, p.Priority, p.EstStart, p.Waiting = r.Position, r.Priority, r.EstStart, r.Waiting
				p.Reason, p.NodeReasons = r.Reason, r.NodeReasons
			}
		}
		if _, ok := slot[arr]; !ok {
			slot[arr] = len(out)
			out = append(out, api.QueuedEntry{})
		}
	}
	for _, p := range order {
		if i, ok := slot[p.ID]; ok {
			if p.Array != nil {
				slices.Sort(p.Array.RunningTasks)
			}
			out[i] = *p
		} else {
			out = append(out, *p)
		}
	}
	return out
}

// heldWhy says what a held entry waits for.
func heldWhy(e queue.QueueEntry) string {
	if len(e.After) == 0 {
		return ""
	}
	ids := make([]string, len(e.After))
	for i, d := range e.After {
		ids[i] = d.ID
		if d.Any {
			ids[i] += " to end"
		} else {
			ids[i] += " to succeed"
		}
	}
	return "waits for " + strings.Join(ids, ", ")
}
