package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/event"
)

// EventsRequest selects events cluster-wide (`dibs events`).
type EventsRequest struct {
	// Since is how far back, like "2h" or "3d"; empty means a day.
	Since string `json:"since,omitempty"`
	// User keeps the events about (or done by) one user.
	User string `json:"user,omitempty"`
	// Follow streams the events that come after (POST /v1/events/follow).
	Follow bool `json:"follow,omitempty"`
}

// EventList is what `dibs events` prints: every node's events, oldest
// first.
type EventList struct {
	Events []event.Event `json:"events"`
	// Missing lists the nodes that did not answer: their events are not in
	// the list.
	Missing []string `json:"missing,omitempty"`
	// Truncated says the list stopped at its bound (ask for less).
	Truncated bool `json:"truncated,omitempty"`
}

// Escaped returns the list with every text from outside made safe for a
// terminal.
func (l EventList) Escaped() EventList {
	out := l
	out.Events = make([]event.Event, len(l.Events))
	for i, e := range l.Events {
		out.Events[i] = EscapedEvent(e)
	}
	return out
}

// EscapedEvent is e with its texts made safe for a terminal.
func EscapedEvent(e event.Event) event.Event {
	for _, p := range []*string{&e.Node, &e.User, &e.By, &e.Lease, &e.Entry, &e.Session, &e.Reason, &e.Subject, &e.Service, &e.State, &e.Text} {
		*p = termsafe.String(*p)
	}
	return e
}

// NotifyRequest changes or tests the caller's notifications (`dibs
// notify`); an empty one only asks how they stand.
type NotifyRequest struct {
	// Webhook is the address to post notices to, kept on this node.
	Webhook string `json:"webhook,omitempty"`
	// Format is "json" (Slack, Discord, Mattermost) or "text" (ntfy);
	// empty picks text for ntfy addresses, json for the others.
	Format string `json:"format,omitempty"`
	Off    bool   `json:"off,omitempty"`
	Test   bool   `json:"test,omitempty"`
}

// NotifyStatus is how the caller hears of what concerns them.
type NotifyStatus struct {
	User string `json:"user"`
	// Webhook is the caller's webhook, Node the node that keeps it.
	Webhook *event.NotifySetting `json:"webhook,omitempty"`
	Node    string               `json:"node,omitempty"`
	// Also lists other nodes that keep a webhook of the caller's (set while
	// this one was away): each posts too.
	Also     []string        `json:"also,omitempty"`
	LastOK   time.Time       `json:"last_ok,omitzero"`
	Failures []NotifyFailure `json:"failures,omitempty"`
	Pending  int             `json:"pending,omitempty"`
	// Test is what `--test` did.
	Test *NotifyTest `json:"test,omitempty"`
	// Missing lists nodes that did not answer.
	Missing []string `json:"missing,omitempty"`
}

// NotifyFailure is a notice the webhook did not take after every try.
type NotifyFailure struct {
	At       time.Time `json:"at"`
	Node     string    `json:"node"`
	Text     string    `json:"text"`
	Err      string    `json:"error"`
	Attempts int       `json:"attempts"`
}

// NotifyTest is where a test notice was shown.
type NotifyTest struct {
	// Shown counts tmux clients told at once, Later sessions told at their
	// next attach, over every node.
	Shown int `json:"shown"`
	Later int `json:"later"`
	// Webhook says whether a webhook was tried; WebhookErr why it failed.
	Webhook    bool   `json:"webhook"`
	WebhookErr string `json:"webhook_error,omitempty"`
}

// LogSource is one kept log of a run: a lease's session, or one rank of a
// queued run.
type LogSource struct {
	Node    string `json:"node"`
	Session string `json:"session"`
	// Log names the run's kept log (lease.Lease.LogName); empty for a run
	// from before logs had names of their own, whose log is its Session's.
	Log   string `json:"log,omitempty"`
	Lease string `json:"lease"`
	Rank  int    `json:"rank"`
	// Running says the session still runs (its log still grows).
	Running bool `json:"running"`
	// Task is the array task (node01-q3/5) the run is, when the name
	// asked for was its array's: `dibs logs ARRAY` shows every task.
	Task string `json:"task,omitempty"`
}

// LogReadRequest reads part of one kept log.
type LogReadRequest struct {
	Node string `json:"node"`
	// Session names the log to read: LogSource.Log, or its Session when
	// that is empty.
	Session string `json:"session"`
	// Part is "" for the current file, ".1" for the one it rotated out.
	Part   string `json:"part,omitempty"`
	Offset int64  `json:"offset"`
	Max    int    `json:"max"`
}

// LogChunk is part of a kept log.
type LogChunk struct {
	Data  []byte `json:"data"`
	Size  int64  `json:"size"`
	Inode uint64 `json:"inode"`
}

// Events lists the cluster's events.
func (c *Client) Events(ctx context.Context, req EventsRequest) (EventList, error) {
	var l EventList
	err := c.do(ctx, "POST", "/v1/events", req, &l)
	return l, err
}

// FollowEvents streams events: those since req.Since first, then each new
// one as it happens anywhere in the cluster. The channel closes when ctx
// ends or the stream breaks; the error func then says why (nil after ctx
// ended).
func (c *Client) FollowEvents(ctx context.Context, req EventsRequest) (<-chan event.Event, func() error) {
	req.Follow = true
	body, _ := json.Marshal(req)
	return follow[event.Event](ctx, c, stream{method: "POST", path: "/v1/events/follow", body: body, buf: 64, maxLine: 1 << 20, what: "event"})
}

// Notify changes, tests or reports the caller's notifications.
func (c *Client) Notify(ctx context.Context, req NotifyRequest) (NotifyStatus, error) {
	var s NotifyStatus
	err := c.do(ctx, "POST", "/v1/notify", req, &s)
	return s, err
}

// LogSources finds the kept logs of a lease, a queued request or a session
// name of the caller's.
func (c *Client) LogSources(ctx context.Context, id string) ([]LogSource, error) {
	var s []LogSource
	err := c.do(ctx, "POST", "/v1/logs/find", map[string]string{"id": id}, &s)
	return s, err
}

// ReadLog reads part of one of the caller's kept logs, on any node.
func (c *Client) ReadLog(ctx context.Context, req LogReadRequest) (LogChunk, error) {
	var ch LogChunk
	err := c.do(ctx, "POST", "/v1/logs/read", req, &ch)
	return ch, err
}
