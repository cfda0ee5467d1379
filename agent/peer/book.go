package peer

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Bookings between agents: a booking of a node's GPUs is made by that
// node's agent (it alone grants them); it is withdrawn with Release, like a
// lease.
var (
	// Book asks a node to book its GPUs ahead for a user.
	Book = Endpoint[BookRequest, LeaseReply]{Name: "book"}

	// MultiNodeBooking is a booking made of parts on several nodes
	// (`dibs book --nodes N`): an older agent would drop the field that
	// links a part to the whole, so `dibs unbook` there would withdraw
	// only one part.
	MultiNodeBooking = Feature{Name: "a booking across nodes (dibs book --nodes)", Since: 7}
)

// BookRequest is a booking made at another node for this one.
type BookRequest struct {
	Count     int           `json:"count,omitempty"`
	GPUs      []int         `json:"gpus,omitempty"`
	Start     time.Time     `json:"start"`
	Duration  time.Duration `json:"duration"`
	Kind      lease.Kind    `json:"kind,omitempty"`
	Note      string        `json:"note,omitempty"`
	Model     string        `json:"model,omitempty"`
	Tags      []string      `json:"tags,omitempty"`
	Run       *Run          `json:"run,omitempty"`
	RequestID string        `json:"request_id,omitempty"`
	// Group links a part of a multi-node booking to its first part;
	// Lead marks the first part. Protocol 7 on (MultiNodeBooking).
	Group string `json:"group,omitempty"`
	Lead  bool   `json:"lead,omitempty"`
}

// Validate implements Message.
func (r BookRequest) Validate() error {
	if err := lease.CheckBookingRequest(r.Booking()); err != nil {
		return err
	}
	if _, err := lease.ParseKind(string(r.Kind)); err != nil {
		return err
	}
	if err := lease.CheckNote(r.Note); err != nil {
		return err
	}
	if r.RequestID != "" && !lease.ValidRequestID(r.RequestID) {
		return lease.Invalidf("bad request id")
	}
	return r.Run.Check()
}

// Booking is the request as the lease rules read it.
func (r BookRequest) Booking() lease.BookRequest {
	b := lease.BookRequest{
		Count: r.Count, GPUs: r.GPUs, Start: r.Start, Duration: r.Duration, Kind: r.Kind,
		Note: r.Note, Model: r.Model, Tags: r.Tags, Group: r.Group, Lead: r.Lead,
	}
	if r.Run != nil {
		b.Job = r.Run.Job()
	}
	return b
}
