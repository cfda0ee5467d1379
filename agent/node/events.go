package node

import (
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// claimEvent is the event of a lease granted, reserved (a gang's rank, not
// yet running) or committed.
func claimEvent(l lease.Lease, at time.Time) event.Event {
	e := event.LeaseEvent(event.EventClaim, l, at)
	switch {
	case !l.ReservedUntil.IsZero():
		e.Reason = event.ReasonReserved
	case l.Gang != "":
		e.Reason = event.ReasonCommitted
	}
	return e
}

// record records an event that goes with no change to the table (a
// warning; a booking's start, told once its run started or failed): under
// the single writer's lock, so it takes its place among the changes'.
func (n *Node) record(e event.Event) {
	n.locked(func() error {
		n.deps.Events(e)
		return nil
	})
}
