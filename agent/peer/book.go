package peer

import "github.com/dibs-gpu/dibs/lease"

// Bookings between agents: a booking of a node's GPUs is made by that
// node's agent (it alone grants them); it is withdrawn with Release, like a
// lease.
var (
	// Book asks a node to book its GPUs ahead for a user: the booking the
	// asking agent's edge made and validated (core.bookingOf), or a part
	// of it across nodes.
	Book = Endpoint[BookRequest, LeaseReply]{Name: "book", MadeAtEdge: true}

	// MultiNodeBooking is a booking made of parts on several nodes
	// (`dibs book --nodes N`): an older agent would drop the field that
	// links a part to the whole, so `dibs unbook` there would withdraw
	// only one part.
	MultiNodeBooking = Feature{Name: "a booking across nodes (dibs book --nodes)", Since: 7}
)

// BookRequest is a booking made at another node for this one: the
// booking the requesting agent made at its edge, sent as is. Its JSON is
// lease.BookRequest's, whose names are v0.1.0's (dialect_v6.json; Group
// and Lead are protocol 7's, MultiNodeBooking), and its Validate
// (lease.BookRequest.Validate) is run again on what arrives.
type BookRequest = lease.BookRequest
