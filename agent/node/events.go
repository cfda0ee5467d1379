package node

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// claimEvent is the event of a lease granted, reserved (a gang's rank, not
// yet running) or committed.
func claimEvent(l lease.Lease, at time.Time) lease.Event {
	e := lease.LeaseEvent(lease.EventClaim, l, at)
	switch {
	case !l.ReservedUntil.IsZero():
		e.Reason = lease.ReasonReserved
	case l.Gang != "":
		e.Reason = lease.ReasonCommitted
	}
	return e
}
