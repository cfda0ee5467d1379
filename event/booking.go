package event

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
)

// Claim events of bookings: a booking made is a claim event with Reason
// ReasonBooking; its start, when it becomes the holder's lease, one with
// ReasonBookingBegan (the one of the two a person is told of). A booking
// withdrawn is a release with Reason EndUnbooked; one that lapsed, or a
// lease ended because a booking began, an end.
const (
	ReasonBooking      = "booking"
	ReasonBookingBegan = "booking-began"
)

// BookingEvent is booking b made.
func BookingEvent(b lease.Lease, at time.Time) Event {
	e := LeaseEvent(EventClaim, b, at)
	e.Reason = ReasonBooking
	e.Text = clipText(fmt.Sprintf("%s booked %s on %s as %s for %s–%s", b.User, gpuWords(b.GPUs), b.Node, b.ID,
		b.StartedAt.Local().Format("Mon Jan 2 15:04"), b.ExpiresAt.Local().Format("15:04 MST")))
	return e
}

// BookingStartEvent is booking l begun: it is now its holder's lease.
// failed, when set, says why its command could not start (the lease stays,
// without a session).
func BookingStartEvent(l lease.Lease, failed string, at time.Time) Event {
	e := LeaseEvent(EventClaim, l, at)
	e.Reason = ReasonBookingBegan
	s := fmt.Sprintf("%s's booking %s has begun: %s on %s until %s", l.User, l.ID, unitWords(l), l.Node, l.ExpiresAt.Local().Format("15:04 MST"))
	switch {
	case failed != "":
		// The error may quote a command or a path: escaped.
		s += "; its command could not start (" + termsafe.String(failed) + "), so the lease has no session"
		e.Session = ""
	case l.Session != "":
		s += ", running in tmux session " + l.Session
	}
	e.Text = clipText(s)
	return e
}
