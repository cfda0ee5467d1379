package origin

import (
	"time"

	"github.com/dibs-gpu/dibs/queue"
)

// maxOutcomes bounds the outcomes an origin remembers: enough for every
// client following a run it just queued.
const maxOutcomes = 512

// outcomes remembers, in memory, how this node's recent entries ended, so a
// client that follows a run it queued (`dibs run --queue`) reads a state,
// never the words of a notice. Oldest forgotten first.
type outcomes struct {
	byID  map[string]queue.EntryStatus
	order []string
}

// note records how entry id ended. o.mu is held.
func (x *outcomes) note(s queue.EntryStatus) {
	if x.byID == nil {
		x.byID = map[string]queue.EntryStatus{}
	}
	if _, seen := x.byID[s.ID]; !seen {
		x.order = append(x.order, s.ID)
	}
	x.byID[s.ID] = s
	for len(x.order) > maxOutcomes {
		delete(x.byID, x.order[0])
		x.order = x.order[1:]
	}
}

// Status is what became of one of this node's entries: waiting (and, when
// requeued, until when and why), running, or how it ended. An entry that
// ended before this agent started, or too long ago, is queue.EntryUnknown.
func (o *Origin) Status(id string, now time.Time) queue.EntryStatus {
	if e, ok := o.Get(id); ok {
		return e.Status(now)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.ended.byID[id]; ok {
		return s
	}
	return queue.EntryStatus{ID: id, State: queue.EntryUnknown}
}
