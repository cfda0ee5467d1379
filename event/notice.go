package event

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// Notice is what a person is told about an event that concerns them: on
// their boards, in their tmux sessions on every node, and by their webhook.
type Notice struct {
	User  string    `json:"user"`
	Kind  EventKind `json:"kind"`
	Node  string    `json:"node"`
	Lease string    `json:"lease,omitempty"`
	Entry string    `json:"entry,omitempty"`
	// Service and State name the service and the state its replica is
	// in, for a notice about a service (a webhook's reader files it by
	// them).
	Service string    `json:"service,omitempty"`
	State   string    `json:"state,omitempty"`
	At      time.Time `json:"at"`
	Text    string    `json:"text"`
	// Test marks `dibs notify --test`.
	Test bool `json:"test,omitempty"`
}

// Validate checks a notice's shape.
func (n *Notice) Validate() error {
	if !words.ValidUserName(n.User) || words.ValidNodeName(n.Node) != nil || !words.ValidSince(n.At) {
		return refusal.Invalidf("a notice has a bad user, node or time")
	}
	if !n.Test && !slices.Contains(EventKinds(), n.Kind) {
		return refusal.Invalidf("a notice has an unknown kind")
	}
	if n.Service != "" && service.CheckName(n.Service) != nil || n.State != "" && !words.ValidToken(n.State, 2*words.MaxNameLen) {
		return refusal.Invalidf("a notice has a bad service or state")
	}
	for _, s := range []string{n.Lease, n.Entry} {
		if s != "" && !words.ValidToken(s, 2*words.MaxNameLen) {
			return refusal.Invalidf("a notice has a bad field %s", words.QuoteInput(s))
		}
	}
	if n.Text == "" || len(n.Text) > maxEventText || strings.ContainsAny(n.Text, "\n\r") {
		return refusal.Invalidf("a notice's text is empty, over %d bytes or not one line", maxEventText)
	}
	return words.CheckText("notice", n.Text)
}

// Notice says whom an event concerns and what to tell them, and false for
// the events nobody needs to hear of: what they did themselves (a claim, a
// release; but a booking that begins is told), the cluster's own comings and goings, a GPU going idle (the
// board marks it; they hear when it is reclaimed), and the end of a queued
// run's lease (its origin tells how the whole run ended, once).
func (e *Event) Notice() (Notice, bool) {
	n := Notice{User: e.User, Kind: e.Kind, Node: e.Node, Lease: e.Lease, Entry: e.Entry, Service: e.Service, State: e.State, At: e.At}
	if e.User == "" {
		return Notice{}, false
	}
	if IsServiceKind(e.Kind) {
		return e.serviceNotice(n)
	}
	switch e.Kind {
	case EventStart:
		n.Text = fmt.Sprintf("your queued request %s started (`dibs ls` shows its GPUs)", e.Entry)
	case EventClaim:
		if e.Reason != ReasonBookingBegan {
			return Notice{}, false // they claimed it themselves
		}
		n.Text = yours(e.Text, e.User)
	case EventWarn, EventPreempt, EventReclaim, EventFinish, EventFail, EventRequeue, EventSquatter:
		n.Text = yours(e.Text, e.User)
	case EventCancel:
		if e.By == "" || e.By == e.User {
			return Notice{}, false
		}
		n.Text = yours(e.Text, e.User) + " by " + e.By
	case EventEnd:
		if e.Entry != "" {
			return Notice{}, false // the origin's finish, fail or requeue says it once
		}
		switch r := lease.EndReason(e.Reason); {
		case r == lease.EndSessionEnded:
			return Notice{}, false // they left their shell themselves
		case r == lease.EndCrashLoop && e.Service != "":
			return Notice{}, false // its svc-crash-loop event tells it
		case strings.HasPrefix(e.Reason, lease.ExitPrefix):
			code, _ := r.ExitCode()
			if code == 0 {
				n.Text = fmt.Sprintf("your run in lease %s finished (exit 0)", e.Lease)
			} else {
				n.Text = fmt.Sprintf("your run in lease %s failed (exit %d): `dibs logs %s` shows its output", e.Lease, code, e.Lease)
			}
		default:
			n.Text = fmt.Sprintf("your lease %s ended %s", e.Lease, e.endWords())
		}
	default:
		return Notice{}, false
	}
	n.Text = clipText(n.Text)
	return n, true
}

// yours turns "alice's GPU" into "your GPU" in a line meant for alice.
func yours(text, user string) string {
	return strings.Replace(text, user+"'s ", "your ", 1)
}

// NotifySetting is a person's webhook: where the agent posts their
// notices, kept on the node where they set it.
type NotifySetting struct {
	User string `json:"user"`
	URL  string `json:"url"`
	// Format is "json" (Slack- and Discord-compatible) or "text" (a plain
	// POST, as ntfy takes it).
	Format string    `json:"format"`
	SetAt  time.Time `json:"set_at"`
}

// Webhook formats.
const (
	WebhookJSON = "json"
	WebhookText = "text"
)

// MaxWebhookURL bounds a webhook address.
const MaxWebhookURL = 2048

// Validate checks a setting's shape (the address itself is checked where
// it is used, by the agent).
func (s *NotifySetting) Validate() error {
	if !words.ValidUserName(s.User) || !words.ValidSince(s.SetAt) {
		return refusal.Invalidf("a notification setting has a bad user or time")
	}
	if s.Format != WebhookJSON && s.Format != WebhookText {
		return refusal.Invalidf("webhook format %s: use json or text", words.QuoteInput(s.Format))
	}
	if s.URL == "" || len(s.URL) > MaxWebhookURL || !words.ValidToken(s.URL, MaxWebhookURL) {
		return refusal.Invalidf("a webhook address must be one word of at most %d printable characters", MaxWebhookURL)
	}
	return nil
}
