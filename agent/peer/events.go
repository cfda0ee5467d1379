package peer

import (
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
)

// The endpoints of events, notices, webhooks and job logs (issue 14), in a
// block of their own.
var (
	// Events reads a node's event log.
	Events = Endpoint[EventsRequest, EventsReply]{Name: "events"}
	// Notify shows a person's notice on that node: their boards, their
	// tmux sessions, their webhook if the node keeps it. The node where the
	// event happened sends it to every node, as the cluster.
	Notify = Endpoint[NotifyRequest, NotifyReply]{Name: "notify"}
	// NotifySet keeps (or forgets) the acting user's webhook on a node.
	NotifySet = Endpoint[NotifySetRequest, Empty]{Name: "notify-set"}
	// NotifyStatus is the acting user's webhook as a node keeps it.
	NotifyStatus = Endpoint[Empty, NotifyStatusReply]{Name: "notify-status"}
	// Logs reads part of the acting user's kept job log on a node.
	Logs = Endpoint[LogsRequest, LogsReply]{Name: "logs"}
)

// EventsRequest selects events.
type EventsRequest struct {
	Filter event.EventFilter `json:"filter"`
	Limit  int               `json:"limit,omitempty"`
}

// Validate implements Message.
func (r EventsRequest) Validate() error {
	if !words.ValidSince(r.Filter.Since) || r.Limit < 0 || r.Limit > event.MaxEventsPerReply {
		return refusal.Invalidf("bad events request")
	}
	if r.Filter.User != "" && !words.ValidUserName(r.Filter.User) {
		return refusal.Invalidf("bad user %q", truncate(r.Filter.User))
	}
	return nil
}

// EventsReply is a node's events, oldest first; More says there are others
// past them (ask again after the last).
type EventsReply struct {
	Events []event.Event `json:"events"`
	More   bool          `json:"more,omitempty"`
	// Last is the node's newest sequence when it answered: a follower asks
	// for what comes after it.
	Last uint64 `json:"last,omitempty"`
}

// Validate implements Message.
func (r EventsReply) Validate() error {
	if len(r.Events) > event.MaxEventsPerReply {
		return refusal.Invalidf("%d events, over %d", len(r.Events), event.MaxEventsPerReply)
	}
	for i := range r.Events {
		if err := r.Events[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// NotifyRequest is a notice to show.
type NotifyRequest struct {
	Notice event.Notice `json:"notice"`
}

// Validate implements Message.
func (r NotifyRequest) Validate() error { return r.Notice.Validate() }

// NotifyReply says where a notice was shown on a node.
type NotifyReply struct {
	// Shown counts tmux clients told at once; Later, sessions told at
	// their next attach.
	Shown int `json:"shown"`
	Later int `json:"later"`
	// Webhook is set when this node keeps the user's webhook; WebhookErr
	// says why a test post failed.
	Webhook    bool   `json:"webhook,omitempty"`
	WebhookErr string `json:"webhook_error,omitempty"`
}

// Validate implements Message.
func (r NotifyReply) Validate() error {
	if r.Shown < 0 || r.Later < 0 || len(r.WebhookErr) > 512 {
		return refusal.Invalidf("bad notify reply")
	}
	return words.CheckText("webhook error", r.WebhookErr)
}

// NotifySetRequest keeps a webhook for the acting user (Clear forgets it).
type NotifySetRequest struct {
	URL    string    `json:"url,omitempty"`
	Format string    `json:"format,omitempty"`
	SetAt  time.Time `json:"set_at,omitzero"`
	Clear  bool      `json:"clear,omitempty"`
}

// Validate implements Message.
func (r NotifySetRequest) Validate() error {
	if r.Clear {
		return nil
	}
	s := event.NotifySetting{User: "x", URL: r.URL, Format: r.Format, SetAt: r.SetAt}
	return s.Validate()
}

// NotifyStatusReply is the acting user's webhook on one node.
type NotifyStatusReply struct {
	Setting  *event.NotifySetting `json:"setting,omitempty"`
	LastOK   time.Time            `json:"last_ok,omitzero"`
	Failures []WebhookFailure     `json:"failures,omitempty"`
	Pending  int                  `json:"pending,omitempty"`
}

// WebhookFailure is a notice a webhook did not take.
type WebhookFailure struct {
	At       time.Time `json:"at"`
	Text     string    `json:"text"`
	Err      string    `json:"error"`
	Attempts int       `json:"attempts"`
}

// Validate implements Message.
func (r NotifyStatusReply) Validate() error {
	if r.Setting != nil {
		if err := r.Setting.Validate(); err != nil {
			return err
		}
	}
	if len(r.Failures) > 16 || r.Pending < 0 {
		return refusal.Invalidf("bad webhook status")
	}
	for _, f := range r.Failures {
		if len(f.Text) > 1024 || len(f.Err) > 512 || words.CheckText("failure", f.Text+f.Err) != nil {
			return refusal.Invalidf("bad webhook failure")
		}
	}
	return nil
}

// MaxLogChunk bounds one read of a job log.
const MaxLogChunk = 128 << 10

// LogsRequest reads part of the log of one of the acting user's sessions
// on a node (Part "" the current file, ".1" the older one).
type LogsRequest struct {
	Session string `json:"session"`
	Part    string `json:"part,omitempty"`
	Offset  int64  `json:"offset"`
	Max     int    `json:"max"`
}

// Validate implements Message.
func (r LogsRequest) Validate() error {
	if launch.CheckName(r.Session) != nil || (r.Part != "" && r.Part != ".1") || r.Offset < 0 || r.Max <= 0 || r.Max > MaxLogChunk {
		return refusal.Invalidf("bad logs request")
	}
	return nil
}

// LogsReply is part of a log: Data from Offset, the file's Size and its
// Inode (a new one means the log rotated).
type LogsReply struct {
	Data  []byte `json:"data"`
	Size  int64  `json:"size"`
	Inode uint64 `json:"inode"`
}

// Validate implements Message.
func (r LogsReply) Validate() error {
	if len(r.Data) > MaxLogChunk || r.Size < 0 {
		return refusal.Invalidf("bad logs reply")
	}
	return nil
}
