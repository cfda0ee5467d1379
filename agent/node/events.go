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

// The request ids that mark a service's lease as a replica placed again
// (agent/svcmove.go: "move-" and the lease it replaces) or as an update's
// new replica ("update-" and whatever follows): its start is told as
// svc-moved or svc-updated, not svc-started.
const (
	MovePrefix   = "move-"
	UpdatePrefix = "update-"
)

// serviceStartEvent is the event of service lease l granted here: a
// start, a move (its request id names the lease it replaces, whose node
// was lost) or an update's new replica.
func serviceStartEvent(l lease.Lease, at time.Time) event.Event {
	switch {
	case strings.HasPrefix(l.RequestID, MovePrefix):
		detail := "its node was lost past the grace"
		if from, ok := lease.NodeOfID(strings.TrimPrefix(l.RequestID, MovePrefix)); ok {
			detail = "from " + from + ", lost past the grace"
		}
		return event.ServiceEvent(event.EventSvcMoved, l, at, detail)
	case strings.HasPrefix(l.RequestID, UpdatePrefix):
		return event.ServiceEvent(event.EventSvcUpdated, l, at, "")
	}
	return event.ServiceEvent(event.EventSvcStarted, l, at, "")
}

// ServiceUpdated records that service lease l is an update's new replica
// (`dibs serve NAME --update`), replacing lease replaces (empty when
// none is named): for a caller whose new replica's lease was not claimed
// with a request id starting UpdatePrefix, which the grant tells by
// itself.
func (n *Node) ServiceUpdated(l lease.Lease, replaces string) {
	detail := ""
	if replaces != "" {
		detail = "it replaces lease " + replaces
	}
	n.record(event.ServiceEvent(event.EventSvcUpdated, l, n.deps.Clock.Now(), detail))
}
