package peer

import (
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/queue"
)

// Sweeps is the feature gate for job arrays (`--array`) and dependencies
// (`--after`): an older agent would schedule an array's parent as one run,
// and a dependent run before its dependency ended, so neither may be
// submitted while a live node speaks an older protocol.
var Sweeps = Feature{Name: "job arrays and dependencies (--array, --after)", Since: 7}

// Status asks an entry's origin where the entry stands: a run waiting on
// it (`--after ID`) starts, or is ended, by the answer. The origin is the
// single writer of its entries and remembers how recent ones ended.
var Status = Endpoint[StatusRequest, StatusReply]{Name: "entry-status"}

// StatusRequest names the entry asked about.
type StatusRequest struct {
	ID string `json:"id"`
}

// Validate implements Message.
func (r StatusRequest) Validate() error { return CancelRequest(r).Validate() }

// StatusReply is the entry's state at its origin.
type StatusReply struct {
	Status queue.EntryStatus `json:"status"`
}

// Validate implements Message.
func (r StatusReply) Validate() error {
	s := r.Status
	if _, ok := queue.OriginOfQueueID(s.ID); !ok || len(s.ID) > 2*words.MaxNameLen {
		return refusal.Invalidf("a status for a bad entry id")
	}
	switch s.State {
	case queue.EntryWaiting, queue.EntryBackoff, queue.EntryRunning, queue.EntryFinished, queue.EntryFailed, queue.EntryCancelled, queue.EntryUnknown:
	default:
		return refusal.Invalidf("unknown entry state %q", truncate(string(s.State)))
	}
	if len(s.Reason) > queue.MaxRetryWhy || words.CheckText("reason", s.Reason) != nil {
		return refusal.Invalidf("a bad status reason")
	}
	return nil
}
