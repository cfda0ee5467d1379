package origin

import (
	"fmt"
	"slices"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Job arrays (lease/array.go) at their origin. The parent entry is the
// array's record; its tasks are ordinary entries (ID/INDEX) that the origin
// makes a few at a time, so the throttle is kept by the single writer of
// the array, on its disk, and holds across every scheduler and restart.
// Order of writes, so a crash between two loses and duplicates nothing:
// a task is written before the parent counts it made (Open raises Next to
// the tasks it finds), and the parent records how a task ended before the
// task is deleted (Open deletes a task its parent says ended).

// weight is how many entries e counts as against the per-user cap: each
// task of an array one, made or not.
func weight(e queue.QueueEntry) int {
	if e.Array == nil {
		return 1
	}
	return e.Array.Remaining()
}

// cloneArray gives e its own copy of its array record before a change:
// the published list shares the old one with readers.
func cloneArray(e *queue.QueueEntry) {
	a := *e.Array
	e.Array = &a
}

// tasksLocked are the made tasks of array id that are still entries.
func (o *Origin) tasksLocked(id string) []queue.QueueEntry {
	var out []queue.QueueEntry
	for _, x := range o.entries {
		if arr, _, ok := job.ArrayTaskOf(x.ID); ok && arr == id {
			out = append(out, x)
		}
	}
	return out
}

// repairArraysLocked makes the arrays loaded from disk agree with their
// tasks after a crash between two writes: a task whose parent is gone or
// says it ended is deleted, and a parent's Next covers every task made.
func (o *Origin) repairArraysLocked() {
	for _, t := range o.entries {
		arr, idx, ok := job.ArrayTaskOf(t.ID)
		if !ok {
			continue
		}
		p, ok := o.entries[arr]
		if !ok || p.Array == nil || p.Array.Ended(idx) {
			if err := o.deps.Store.DeleteEntry(t.ID); err != nil {
				o.deps.Log.Error("drop a task of an array that ended", "entry", t.ID, "err", err)
				continue
			}
			delete(o.entries, t.ID)
			continue
		}
		if pos := slices.Index(p.Array.Indices(), idx); pos >= p.Array.Next {
			cloneArray(&p)
			p.Array.Next = pos + 1
			if err := o.deps.Store.PutEntry(p, o.seq); err != nil {
				o.deps.Log.Error("repair an array", "entry", p.ID, "err", err)
				continue
			}
			o.entries[p.ID] = p
		}
	}
}

// fillArrays makes the next tasks of every array that may have more, and
// ends the arrays whose tasks all ended.
func (o *Origin) fillArrays() {
	if o.fill() {
		o.deps.QueueChanged()
	}
}

// fill is fillArrays under the lock; it reports whether anything changed.
func (o *Origin) fill() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := o.fillArraysLocked(true)
	if changed {
		o.publishLocked()
	}
	return changed
}

// fillArraysLocked is fillArrays under o.mu; it reports whether anything
// changed (the caller publishes). With end false the arrays whose tasks
// all ended are left for the next pass to end, so a task's end is
// recorded before its array's.
func (o *Origin) fillArraysLocked(end bool) bool {
	var ids []string
	for id, e := range o.entries {
		if e.Array != nil && len(e.After) == 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	changed := false
	for _, id := range ids {
		if o.fillLocked(id, end) {
			changed = true
		}
	}
	return changed
}

// fillLocked makes array id's next tasks: while fewer than its throttle
// wait or run (without one, while fewer than queue.ArrayWindow wait); with
// end, it ends the array once every task has.
func (o *Origin) fillLocked(id string, end bool) bool {
	p := o.entries[id]
	tasks := o.tasksLocked(id)
	live, waiting := len(tasks), 0
	for _, t := range tasks {
		if !t.Running {
			waiting++
		}
	}
	idx := p.Array.Indices()
	next := p.Array.Next
	made := false
	var ended map[int]bool
	for next < len(idx) {
		if p.Array.Throttle > 0 && live >= p.Array.Throttle || p.Array.Throttle == 0 && waiting >= queue.ArrayWindow {
			break
		}
		i := idx[next]
		if ended == nil {
			ended = p.Array.EndedSet()
		}
		if ended[i] { // cancelled before it was made
			next++
			continue
		}
		t := p.Task(i)
		if err := o.deps.Store.PutEntry(t, o.seq); err != nil {
			o.deps.Log.Error("make a task of an array", "entry", t.ID, "err", err)
			break
		}
		o.entries[t.ID] = t
		live++
		waiting++
		next++
		made = true
	}
	if next != p.Array.Next {
		cloneArray(&p)
		p.Array.Next = next
		if err := o.deps.Store.PutEntry(p, o.seq); err != nil {
			// The tasks are written; Open raises Next to them.
			o.deps.Log.Error("count the tasks of an array", "entry", p.ID, "err", err)
		}
		o.entries[p.ID] = p
		made = true
	}
	if end && next == len(idx) && live == 0 {
		return o.endArrayLocked(p) || made
	}
	return made
}

// endArrayLocked deletes an array whose tasks all ended, remembers how it
// ended (Status) and records it: finished when every task exited 0.
func (o *Origin) endArrayLocked(p queue.QueueEntry) bool {
	if err := o.deps.Store.DeleteEntry(p.ID); err != nil {
		o.deps.Log.Error("end an array", "entry", p.ID, "err", err)
		return false
	}
	delete(o.entries, p.ID)
	done, failed, cancelled := p.Array.Counts()
	st := queue.EntryStatus{ID: p.ID, State: queue.EntryFinished}
	why := fmt.Sprintf("%d tasks exited 0", done)
	switch {
	case failed > 0:
		st.State = queue.EntryFailed
		why = fmt.Sprintf("tasks %s of %s failed (%d of %d done)", p.Array.Failed, p.Array.Spec, done, done+failed+cancelled)
	case cancelled > 0:
		st.State = queue.EntryCancelled
		why = fmt.Sprintf("tasks %s were cancelled (%d done)", p.Array.Cancelled, done)
	}
	st.Reason = queue.ClipRetryWhy(why)
	o.ended.note(st)
	kind := event.EventFinish
	if st.State != queue.EntryFinished {
		kind = event.EventFail
	}
	o.deps.Events(event.EntryEvent(kind, p, why, o.deps.Clock.Now()))
	o.deps.Log.Info("array ended", "entry", p.ID, "done", done, "failed", failed, "cancelled", cancelled)
	return true
}

// taskEndedLocked records in its array's parent how task t ended, before
// t is deleted. Not a task, or its array is gone (cancelled): nothing.
func (o *Origin) taskEndedLocked(t queue.QueueEntry, state queue.EntryState) error {
	arr, idx, ok := job.ArrayTaskOf(t.ID)
	if !ok {
		return nil
	}
	p, ok := o.entries[arr]
	if !ok || p.Array == nil {
		return nil
	}
	cloneArray(&p)
	p.Array.MarkEnded(idx, state)
	if err := o.deps.Store.PutEntry(p, o.seq); err != nil {
		return fmt.Errorf("record the end of task %s: %w", t.ID, err)
	}
	o.entries[p.ID] = p
	return nil
}

// taskStartedLocked marks an array started when its first task starts,
// and records the array's start.
func (o *Origin) taskStartedLocked(t queue.QueueEntry) {
	arr, _, ok := job.ArrayTaskOf(t.ID)
	if !ok {
		return
	}
	p, ok := o.entries[arr]
	if !ok || p.Array == nil || p.Array.Started {
		return
	}
	cloneArray(&p)
	p.Array.Started = true
	if err := o.deps.Store.PutEntry(p, o.seq); err != nil {
		o.deps.Log.Error("mark an array started", "entry", p.ID, "err", err)
		return
	}
	o.entries[p.ID] = p
	o.deps.Events(event.EntryEvent(event.EventStart, p, "", o.deps.Clock.Now()))
}

// cancelArrayLocked cancels a whole array (its waiting and running tasks,
// as scancel does) or one task of it, made or not. handled is false for an
// id that is neither: Cancel goes on as for any entry. o.mu is held
// (Origin.withdraw).
func (o *Origin) cancelArrayLocked(c lease.Caller, id string) (handled bool, err error) {
	arr, idx, isTask := job.ArrayTaskOf(id)
	pid := id
	if isTask {
		pid = arr
	}
	p, ok := o.entries[pid]
	if !ok || p.Array == nil {
		return false, nil
	}
	if p.UID != c.UID && !c.Admin {
		return true, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s is %s's array; only they (or an admin) can cancel it", pid, p.User)}
	}
	var ev event.Event
	if isTask {
		if !slices.Contains(p.Array.Indices(), idx) {
			return true, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("array %s has no task %d (its tasks: %s)", pid, idx, p.Array.Spec)}
		}
		if p.Array.Ended(idx) {
			return true, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("task %s has ended already", id)}
		}
		t, made := o.entries[id]
		if err := o.taskEndedLocked(queue.QueueEntry{ID: id}, queue.EntryCancelled); err != nil {
			return true, err
		}
		if made {
			if err := o.deps.Store.DeleteEntry(id); err != nil {
				return true, err // Open drops it: its parent says it ended
			}
			delete(o.entries, id)
			delete(o.placed, t.Key())
		} else {
			t = p.Task(idx)
		}
		o.ended.note(queue.EntryStatus{ID: id, State: queue.EntryCancelled})
		ev = event.EntryEvent(event.EventCancel, t, "", o.deps.Clock.Now())
		o.fillLocked(pid, false)
	} else {
		// The parent first: a crash before its tasks are deleted leaves
		// tasks without a parent, which Open deletes.
		if err := o.deps.Store.DeleteEntry(pid); err != nil {
			return true, err
		}
		delete(o.entries, pid)
		running := 0
		for _, t := range o.tasksLocked(pid) {
			if t.Running {
				running++
			}
			if err := o.deps.Store.DeleteEntry(t.ID); err != nil {
				o.deps.Log.Error("cancel a task", "entry", t.ID, "err", err)
			}
			delete(o.entries, t.ID)
			delete(o.placed, t.Key())
		}
		o.ended.note(queue.EntryStatus{ID: pid, State: queue.EntryCancelled})
		why := ""
		if running > 0 {
			why = fmt.Sprintf("its %d running tasks are stopped (SIGTERM) and end after the grace", running)
		}
		ev = event.EntryEvent(event.EventCancel, p, why, o.deps.Clock.Now())
	}
	if c.UID != p.UID && words.ValidUserName(c.User) {
		ev.By, ev.Admin = c.User, c.Admin
		ev.Text += " by " + c.User
	}
	o.deps.Events(ev)
	o.publishLocked()
	return true, nil
}
