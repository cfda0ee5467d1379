package api

import (
	"context"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// BookRequest books GPUs ahead: Count (or exactly GPUs) from Start for
// Duration, on Node or the best node of the pools in Tags. With Run, the
// command starts under the lease at Start (`dibs run --at`).
type BookRequest struct {
	Node  string `json:"node,omitempty"`
	Count int    `json:"count,omitempty"`
	GPUs  []int  `json:"gpus,omitempty"`
	// Start is when the booking begins; the CLI reads what the person
	// typed ("tomorrow 09:00") in their own time zone (words.ParseWhen).
	Start time.Time `json:"start"`
	// Duration like "3h"; required.
	Duration  string   `json:"duration"`
	Kind      string   `json:"kind,omitempty"`
	Note      string   `json:"note,omitempty"`
	Model     string   `json:"model,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	Run       *RunSpec `json:"run,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
	// Nodes, when more than one, books Count GPUs on each of that many
	// nodes, all or nothing (`dibs book --nodes N --gpus-per-node M`):
	// the answer is the first part, whose id names the whole booking.
	Nodes int `json:"nodes,omitempty"`
	// NodeChoice is --nodelist and --exclude, as a claim's.
	lease.NodeChoice
}

// Bookings is `dibs bookings`: every booking in the cluster not started
// yet, soonest first.
type Bookings struct {
	Bookings []lease.Lease `json:"bookings"`
}

// Book books GPUs ahead. A lost answer is retried with the same request
// id, so it never books twice.
func (c *Client) Book(ctx context.Context, req BookRequest) (lease.Lease, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	var out lease.Lease
	err := c.retry(ctx, func() error { return c.do(ctx, "POST", "/v1/book", req, &out) })
	return out, err
}

// Bookings lists the cluster's bookings.
func (c *Client) Bookings(ctx context.Context) (Bookings, error) {
	var out Bookings
	err := c.do(ctx, "GET", "/v1/bookings", nil, &out)
	return out, err
}

// Unbook withdraws a booking before it starts.
func (c *Client) Unbook(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/unbook", struct {
		ID string `json:"id"`
	}{id}, nil)
}
