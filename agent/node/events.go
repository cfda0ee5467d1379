package node

import (
	"strings"
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

// MovePrefix begins the request id that marks a service's lease as a
// replica placed again (agent/svcmove.go: "move-" and the lease it
// replaces, whose node was lost): its start is told as svc-moved.
const MovePrefix = "move-"

// serviceStartEvent is the event of service lease l granted here: a
// start, a move (its request id names the lease it replaces, whose node
// was lost) or a rolling update's new replica (Spec.Replaces names the
// old one).
func serviceStartEvent(l lease.Lease, at time.Time) event.Event {
	switch {
	case strings.HasPrefix(l.RequestID, MovePrefix):
		detail := "its node was lost past the grace"
		if from, ok := lease.NodeOfID(strings.TrimPrefix(l.RequestID, MovePrefix)); ok {
			detail = "from " + from + ", lost past the grace"
		}
		return event.ServiceEvent(event.EventSvcMoved, l, at, detail)
	case l.Service.Replaces != "":
		return event.ServiceEvent(event.EventSvcUpdated, l, at, "it replaces lease "+l.Service.Replaces)
	}
	return event.ServiceEvent(event.EventSvcStarted, l, at, "")
}
