package origin

import (
	"context"
	"fmt"
	"slices"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/queue"
)

// Dependencies (`--after ID`, `--after-any ID`; lease/after.go) at the
// origin of the run that waits. On every pass the origin asks where each
// dependency stands (its own record, or the dependency's origin through
// Deps.DepStatus) and removes, durably, each that ended as asked; the run
// is scheduled once none is left. A run whose dependency failed (for
// --after) is ended, with an event naming the dependency. A dependency
// whose origin cannot be reached is asked again on the next pass.

// depStatus is where dependency id stands: Deps.DepStatus (which also
// reads this node's event log for an entry the origin no longer
// remembers), else this origin's own record.
func (o *Origin) depStatus(ctx context.Context, id string) (queue.EntryStatus, error) {
	if o.deps.DepStatus != nil {
		return o.deps.DepStatus(ctx, id)
	}
	if origin, _ := queue.OriginOfQueueID(id); origin == o.node {
		return o.Status(id, o.deps.Clock.Now()), nil
	}
	return queue.EntryStatus{}, fmt.Errorf("no way to ask another node about %s", id)
}

// resolveAfter settles what it can of the dependencies of this node's
// waiting entries.
func (o *Origin) resolveAfter(ctx context.Context) {
	cache := map[string]queue.EntryStatus{}
	for _, e := range o.Entries() {
		if len(e.After) == 0 {
			continue
		}
		var keep []queue.Dep
		broken := ""
		for _, d := range e.After {
			st, ok := cache[d.ID]
			if !ok {
				s, err := o.depStatus(ctx, d.ID)
				if err != nil {
					o.deps.Log.Debug("cannot ask where a dependency stands", "entry", e.ID, "after", d.ID, "err", err)
					keep = append(keep, d)
					continue
				}
				st, cache[d.ID] = s, s
			}
			switch queue.DepFor(d, st) {
			case queue.DepWait:
				keep = append(keep, d)
			case queue.DepBroken:
				broken = depBrokenWhy(d, st)
			}
			if broken != "" {
				break
			}
		}
		switch {
		case broken != "":
			o.dropAfter(e, broken)
		case len(keep) < len(e.After):
			o.setAfter(e, keep)
		}
	}
}

// depBrokenWhy says why a run will not start after d.
func depBrokenWhy(d queue.Dep, st queue.EntryStatus) string {
	switch st.State {
	case queue.EntryFailed:
		why := "its dependency " + d.ID + " failed"
		if st.Reason != "" {
			why += " (" + st.Reason + ")"
		}
		return why
	case queue.EntryCancelled:
		return "its dependency " + d.ID + " was cancelled"
	}
	return "its dependency " + d.ID + " ended too long ago for its origin to say how"
}

// setAfter writes e with the dependencies still to wait for; with none
// left it may be scheduled (an array starts making its tasks).
func (o *Origin) setAfter(e queue.QueueEntry, keep []queue.Dep) {
	set, err := o.keepAfter(e, keep)
	if err != nil {
		o.deps.Log.Error("record a dependency met", "entry", e.ID, "err", err)
		return
	}
	if !set {
		return
	}
	if len(keep) == 0 {
		o.deps.Log.Info("dependencies met", "entry", e.ID)
	}
	o.deps.QueueChanged()
}

// keepAfter is setAfter under the lock: set is false when e changed
// meanwhile (its dependencies are another pass's to settle).
func (o *Origin) keepAfter(e queue.QueueEntry, keep []queue.Dep) (set bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, ok := o.entries[e.ID]
	if !ok || !slices.Equal(cur.After, e.After) {
		return false, nil
	}
	cur.After = keep
	if err := o.deps.Store.PutEntry(cur, o.seq); err != nil {
		return false, err
	}
	o.entries[e.ID] = cur
	if len(keep) == 0 && cur.Array != nil {
		o.fillLocked(cur.ID, true)
	}
	o.publishLocked()
	return true, nil
}

// dropAfter ends a waiting entry whose dependency did not end as asked.
func (o *Origin) dropAfter(e queue.QueueEntry, why string) {
	dropped, err := o.endAfter(e, why)
	if err != nil {
		o.deps.Log.Error("end a run whose dependency failed", "entry", e.ID, "err", err)
		return
	}
	if !dropped {
		return
	}
	o.deps.Log.Info("not starting: a dependency did not succeed", "entry", e.ID, "why", why)
	o.deps.QueueChanged()
}

// endAfter is dropAfter under the lock: dropped is false when e changed
// meanwhile.
func (o *Origin) endAfter(e queue.QueueEntry, why string) (dropped bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, ok := o.entries[e.ID]
	if !ok || !slices.Equal(cur.After, e.After) {
		return false, nil
	}
	if err := o.deps.Store.DeleteEntry(e.ID); err != nil {
		return false, err
	}
	delete(o.entries, e.ID)
	o.ended.note(queue.EntryStatus{ID: e.ID, State: queue.EntryFailed, Reason: queue.ClipRetryWhy(why)})
	o.deps.Events(event.EntryEvent(event.EventFail, cur, why, o.deps.Clock.Now()))
	o.publishLocked()
	return true, nil
}
