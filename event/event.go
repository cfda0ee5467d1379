// Package event holds what dibs records as having happened, with no I/O:
// the kinds of event and how each is worded, the notice a person gets from
// one, their notification settings, which events a node's judgements call
// for, and the interface of the store that keeps them. It lies above the
// lease rules and the queue (an event names a lease or a queue entry) and
// below the agent; agent/events keeps the log itself (storage, fan-out to
// every node, webhooks) and is the only part that does I/O with events.
package event

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// EventKind names what happened. Every part of dibs spells a kind from
// here, so `dibs events --json` and the board read the same words.
type EventKind string

// What the nodes record.
const (
	EventClaim   EventKind = "claim"   // a lease was granted (a run's too)
	EventRelease EventKind = "release" // its holder released it
	EventEnd     EventKind = "end"     // it ended for any other reason: Reason says which
	EventExtend  EventKind = "extend"
	EventAdopt   EventKind = "adopt"
	// EventWarn: the holder was told the end is near (Reason "10m", "1m")
	// or past ("overdue"), or that the session is being stopped ("stopping").
	EventWarn EventKind = "warn"
	// EventPreempt: a borrowed lease (or a gang's rank) is being stopped;
	// Reason is lease.PreemptQuota or PreemptGang.
	EventPreempt EventKind = "preempt"
	// EventReclaim: an idle lease is being reclaimed for someone waiting.
	EventReclaim EventKind = "idle-reclaim"
	// EventIdle: a leased GPU went idle (no process, low utilisation).
	EventIdle EventKind = "idle"
	// EventSquatter: a process runs on a GPU without its lease.
	EventSquatter EventKind = "squatter"

	EventSubmit  EventKind = "queue-submit"
	EventStart   EventKind = "queue-start"
	EventFinish  EventKind = "queue-finish"
	EventFail    EventKind = "queue-fail"
	EventRequeue EventKind = "queue-requeue"
	EventCancel  EventKind = "queue-cancel"

	EventAgentJoin  EventKind = "agent-join"
	EventAgentLeave EventKind = "agent-leave"
)

// EventKinds lists every kind, for validation and for `dibs events --help`.
func EventKinds() []EventKind {
	return []EventKind{EventClaim, EventRelease, EventEnd, EventExtend, EventAdopt, EventWarn, EventPreempt,
		EventReclaim, EventIdle, EventSquatter, EventSubmit, EventStart, EventFinish, EventFail, EventRequeue,
		EventCancel, EventAgentJoin, EventAgentLeave, EventSvcStarted, EventSvcHealthy, EventSvcUnhealthy,
		EventSvcRestarted, EventSvcMoved, EventSvcCrashLoop, EventSvcUpdated, EventSvcStopped, EventSvcIdle}
}

// Event is one thing that happened on a node, recorded by that node. Seq
// orders a node's events; (Node, Seq) names one cluster-wide.
type Event struct {
	Seq  uint64    `json:"seq"`
	Node string    `json:"node"`
	At   time.Time `json:"at"`
	Kind EventKind `json:"kind"`
	// User is whom it concerns: the holder, the submitter; empty for the
	// cluster's own (an agent joining).
	User string `json:"user,omitempty"`
	// By is who did it when not User: an admin, or the cluster.
	By    string `json:"by,omitempty"`
	Admin bool   `json:"admin,omitempty"`
	Lease string `json:"lease,omitempty"`
	// Entry is the queue entry (its id, or an attempt's key "q3#0").
	Entry   string `json:"entry,omitempty"`
	Rank    int    `json:"rank,omitempty"`
	Session string `json:"session,omitempty"`
	// Log names a claim's kept log (Lease.LogName), for dibs logs.
	Log  string `json:"log,omitempty"`
	GPUs []int  `json:"gpus,omitempty"`
	// Reason says why (an end reason, a preemption's why, a warning's lead).
	Reason string `json:"reason,omitempty"`
	// Subject is the node an agent-join or agent-leave is about.
	Subject string `json:"subject,omitempty"`
	// Service is the service's name, on every event about a service's
	// lease; State is the replica's state a service event leaves it in
	// (healthy, unhealthy, restarting, ...), for a webhook's reader.
	Service string `json:"service,omitempty"`
	State   string `json:"state,omitempty"`
	// Text is the one line a person reads.
	Text string `json:"text"`
}

// Bounds on an event, wherever it comes from.
const (
	maxEventText = 512
	// MaxEventsPerReply bounds one answer of a node's events.
	MaxEventsPerReply = 400
	// DefaultEventKeep is how long a node keeps its events unless
	// configured ([events] keep).
	DefaultEventKeep = 14 * 24 * time.Hour
)

// Validate checks an event's shape: what the store reads back and what a
// peer sends is checked the same way.
func (e *Event) Validate() error {
	if e.Seq == 0 || words.ValidNodeName(e.Node) != nil || !words.ValidSince(e.At) || e.At.IsZero() {
		return refusal.Invalidf("an event has a bad sequence, node or time")
	}
	if !slices.Contains(EventKinds(), e.Kind) {
		return refusal.Invalidf("event %d has an unknown kind %s", e.Seq, words.QuoteInput(string(e.Kind)))
	}
	for _, u := range []string{e.User, e.By} {
		if u != "" && !words.ValidUserName(u) && u != ByCluster {
			return refusal.Invalidf("event %d has a bad user %s", e.Seq, words.QuoteInput(u))
		}
	}
	for _, s := range []string{e.Lease, e.Entry, e.Session, e.Log, e.Reason} {
		if s != "" && !words.ValidToken(s, 2*words.MaxNameLen) {
			return refusal.Invalidf("event %d has a bad field %s", e.Seq, words.QuoteInput(s))
		}
	}
	if e.Subject != "" && words.ValidNodeName(e.Subject) != nil {
		return refusal.Invalidf("event %d has a bad subject", e.Seq)
	}
	if e.Service != "" && service.CheckName(e.Service) != nil || e.State != "" && !words.ValidToken(e.State, 2*words.MaxNameLen) {
		return refusal.Invalidf("event %d has a bad service or state", e.Seq)
	}
	if e.Rank < 0 || e.Rank >= words.MaxGangNodes {
		return refusal.Invalidf("event %d has a rank out of range", e.Seq)
	}
	if err := lease.CheckGPUs(e.GPUs); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "event %d: %v", e.Seq, err)
	}
	if len(e.Text) > maxEventText || strings.ContainsAny(e.Text, "\n\r") {
		return refusal.Invalidf("event %d: its text is over %d bytes or not one line", e.Seq, maxEventText)
	}
	return words.CheckText("event text", e.Text)
}

// ReasonReserved marks the claim event of a gang reservation (its commit
// is a claim event of its own); ReasonCommitted marks the commit.
const (
	ReasonReserved  = "reserved"
	ReasonCommitted = "committed"
)

// ByCluster is Event.By for what the cluster did by itself (a scheduler's
// preemption, a time limit).
const ByCluster = "dibs"

// LeaseEvent is an event about lease l.
func LeaseEvent(kind EventKind, l lease.Lease, at time.Time) Event {
	e := Event{
		Node: l.Node, At: at.Round(0), Kind: kind, User: l.User, Lease: l.ID, Entry: l.Entry,
		Rank: l.Rank, Session: l.Session, GPUs: slices.Clone(l.GPUs),
	}
	if l.IsService() {
		e.Service = l.Service.Name
	}
	if kind == EventClaim && l.Session != "" && l.ReservedUntil.IsZero() {
		e.Log = l.LogName()
	}
	e.Text = e.describe(l)
	return e
}

// EndEvent is the end of lease l: a release by its holder, or an end with
// a reason (by an admin when by is set).
func EndEvent(l lease.Lease, reason lease.EndReason, by string, at time.Time) Event {
	kind := EventEnd
	if reason == lease.EndReleased || reason == lease.EndUnbooked {
		kind = EventRelease
	}
	e := LeaseEvent(kind, l, at)
	e.Reason = string(reason)
	if by != "" && by != l.User {
		e.Admin = reason == lease.EndByAdmin
		if words.ValidUserName(by) {
			e.By = by // a caller known only by uid stays out of By (a name)
		}
	}
	e.Text = e.describe(l)
	return e
}

// WarnEvent tells the holder of l the end is near ("10m", "1m"), past
// ("overdue"), or here ("stopping").
func WarnEvent(l lease.Lease, why string, at time.Time) Event {
	e := LeaseEvent(EventWarn, l, at)
	e.Reason = why
	e.Text = e.describe(l)
	return e
}

// ReasonSharedCores is the warning that a lease granted later chose some
// of l's cores (--cpus-per-gpu): SharedCoresEvent.
const ReasonSharedCores = "shared-cores"

// SharedCoresEvent tells the holder of l that newer, granted later, chose
// some of l's cores (cpus) because its GPUs' local cores were all taken:
// their data loaders may compete. The holder of newer hears it in the
// claim's answer.
func SharedCoresEvent(l, newer lease.Lease, cpus string, at time.Time) Event {
	e := WarnEvent(l, ReasonSharedCores, at)
	e.Text = fmt.Sprintf("%s's lease %s now shares cores %s with %s's lease %s: your data loaders may compete", l.User, l.ID, cpus, newer.User, newer.ID)
	return e
}

// PreemptEvent is a lease told to stop for why (PreemptQuota, PreemptIdle,
// PreemptGang), ending after grace.
func PreemptEvent(l lease.Lease, why string, grace time.Duration, at time.Time) Event {
	kind := EventPreempt
	if why == lease.PreemptIdle {
		kind = EventReclaim
	}
	e := LeaseEvent(kind, l, at)
	e.Reason, e.By = why, ByCluster
	gpus := unitWords(l) + " on " + l.Node
	switch why {
	case lease.PreemptQuota:
		e.Text = fmt.Sprintf("lease %s (%s) borrows beyond %s's quota and someone within theirs is waiting: it ends in %s", l.ID, gpus, l.User, words.FormatDuration(grace))
	case lease.PreemptIdle:
		e.Text = fmt.Sprintf("%s's %s has been idle and someone is waiting: lease %s is reclaimed in %s unless work starts", l.User, gpus, l.ID, words.FormatDuration(grace))
	case lease.PreemptOverdue:
		e.Text = fmt.Sprintf("lease %s (%s) is past its end and someone is waiting for its GPUs: it is stopped and ends in %s; save your work now", l.ID, gpus, words.FormatDuration(grace))
	default:
		e.Text = fmt.Sprintf("lease %s (%s) is being stopped (%s): it ends in %s", l.ID, gpus, why, words.FormatDuration(grace))
	}
	return e
}

// EntryEvent is an event about queue entry q (Reason says why, for a
// failure or a requeue).
func EntryEvent(kind EventKind, q queue.QueueEntry, why string, at time.Time) Event {
	e := Event{Node: q.Origin, At: at.Round(0), Kind: kind, User: q.User, Entry: q.ID, Reason: reasonToken(why)}
	size := entrySize(q)
	what := "request"
	if q.Job.RunsCommand() {
		what = "job"
	}
	switch kind {
	case EventSubmit:
		e.Text = fmt.Sprintf("%s queued %s %s (%s)", q.User, what, q.ID, size)
	case EventStart:
		e.Text = fmt.Sprintf("%s's queued %s %s started (%s)", q.User, what, q.ID, size)
	case EventFinish:
		e.Text = fmt.Sprintf("%s's %s %s finished", q.User, what, q.ID)
		if why != "" {
			e.Text += " (" + why + ")"
		}
	case EventFail:
		e.Text = fmt.Sprintf("%s's %s %s failed: %s", q.User, what, q.ID, why)
	case EventRequeue:
		e.Text = fmt.Sprintf("%s's %s %s failed (%s); back in the queue (restart %d of %d)", q.User, what, q.ID, why, q.Restarts, q.MaxRestarts)
		if q.RetryAt.After(at) {
			// Restarts are spaced: say when it tries again.
			e.Text += fmt.Sprintf(", tries again in %s", words.FormatDuration(q.RetryAt.Sub(at)))
		}
	case EventCancel:
		e.Text = fmt.Sprintf("%s's %s %s was withdrawn", q.User, what, q.ID)
		if why != "" {
			e.Text += ": " + why
		}
	}
	e.Text = clipText(e.Text)
	return e
}

// reasonToken keeps a free-text why out of Reason (a token) but in Text.
func reasonToken(why string) string {
	if words.ValidToken(why, 2*words.MaxNameLen) {
		return why
	}
	return ""
}

// SquatterEvent is a process found on GPU gpu of node without its lease
// (held is the lease there, if any).
func SquatterEvent(node string, gpu int, who string, pid int, command string, held *lease.Lease, at time.Time) Event {
	e := Event{Node: node, At: at.Round(0), Kind: EventSquatter, GPUs: []int{gpu}, Reason: reasonToken(who)}
	// The name and the command come from /proc: whatever a process calls
	// itself, escaped before it reaches a log or a terminal.
	proc := termsafe.String(fmt.Sprintf("%s's process %d (%s)", who, pid, command))
	if held != nil {
		e.User, e.Lease = held.User, held.ID
		e.Text = fmt.Sprintf("%s runs on %s's GPU %d on %s (lease %s) without the lease", proc, held.User, gpu, node, held.ID)
	} else {
		e.Text = fmt.Sprintf("%s runs on GPU %d on %s, which nobody has claimed", proc, gpu, node)
	}
	e.Text = clipText(e.Text)
	return e
}

// IdleEvent is a leased GPU that went idle.
func IdleEvent(l lease.Lease, gpu int, idleFor time.Duration, at time.Time) Event {
	e := LeaseEvent(EventIdle, l, at)
	e.GPUs = []int{gpu}
	e.Text = fmt.Sprintf("%s's GPU %d on %s (lease %s) has been idle for %s: release it if done, or it may be reclaimed when someone waits", l.User, gpu, l.Node, l.ID, words.FormatDuration(idleFor))
	return e
}

// AgentEvent is an agent joining or leaving, seen from node.
func AgentEvent(kind EventKind, node, subject, why string, at time.Time) Event {
	e := Event{Node: node, At: at.Round(0), Kind: kind, Subject: subject, By: ByCluster}
	e.Text = clipText(fmt.Sprintf("the agent on %s %s", subject, why))
	return e
}

// AgentAwayEvent is another node's agent gone away, seen from node, said
// in words for the state people are shown it in (queue.NodeView.Shown):
// restarting, left for good, suspect or dead — never "is left".
func AgentAwayEvent(node, subject, shown string, at time.Time) Event {
	return AgentEvent(EventAgentLeave, node, subject, awayWords(shown), at)
}

// awayWords is what an away node's state means for the work on it.
func awayWords(shown string) string {
	switch shown {
	case queue.NodeRestarting:
		return "is restarting: its leases and gang ranks hold for the grace, its GPUs show as unknown"
	case queue.NodeLeft:
		return "left the cluster for good: its gang ranks are lost, its GPUs show as unknown"
	case queue.NodeSuspect:
		return "is not answering (suspect): its GPUs show as unknown"
	default:
		return "is down past the grace: its gang ranks are lost, its GPUs show as unknown"
	}
}

// describe is the line a person reads for a lease event.
func (e *Event) describe(l lease.Lease) string {
	gpus := unitWords(l) + " on " + l.Node
	var s string
	switch e.Kind {
	case EventClaim:
		s = fmt.Sprintf("%s claimed %s as %s until %s", l.User, gpus, l.ID, l.ExpiresAt.Local().Format("Jan 2 15:04 MST"))
		if l.Session != "" {
			s += ", tmux " + l.Session
		}
		if !l.ReservedUntil.IsZero() {
			s = fmt.Sprintf("%s reserved %s as %s for rank %d of %s", l.User, gpus, l.ID, l.Rank, l.Entry)
		}
		if l.IsService() {
			// A service's lease has no end while it is up.
			s = fmt.Sprintf("%s claimed %s as %s for service %s, tmux %s", l.User, gpus, l.ID, l.Service.Name, l.Session)
		}
	case EventRelease:
		s = fmt.Sprintf("%s released %s (%s)", l.User, l.ID, gpus)
		if lease.EndReason(e.Reason) == lease.EndUnbooked {
			s = fmt.Sprintf("%s withdrew booking %s (%s)", l.User, l.ID, gpus)
		}
	case EventEnd:
		s = fmt.Sprintf("%s's lease %s (%s) ended %s", l.User, l.ID, gpus, e.endWords())
	case EventExtend:
		s = fmt.Sprintf("%s extended %s until %s", l.User, l.ID, l.ExpiresAt.Local().Format("Jan 2 15:04 MST"))
	case EventAdopt:
		s = fmt.Sprintf("%s adopted a run on %s as %s", l.User, gpus, l.ID)
	case EventWarn:
		switch e.Reason {
		case "overdue":
			s = fmt.Sprintf("lease %s (%s) is past its end: release it (`dibs release %s`) or extend it", l.ID, gpus, l.ID)
		case "stopping":
			s = fmt.Sprintf("lease %s (%s) has ended: its session is being stopped", l.ID, gpus)
		case ReasonSharedCores:
			s = fmt.Sprintf("%s's lease %s (%s) shares cores with another lease: `dibs ls` shows which", l.User, l.ID, gpus)
		default:
			s = fmt.Sprintf("lease %s ends in %s (at %s; %s): `dibs extend %s --for 1h` keeps it", l.ID, e.Reason, l.ExpiresAt.Local().Format("15:04 MST"), gpus, l.ID)
		}
	default:
		s = fmt.Sprintf("%s: %s %s", e.Kind, l.ID, gpus)
	}
	return clipText(s)
}

// endWords says why the lease of an end event ended, naming the admin.
func (e *Event) endWords() string {
	if lease.EndReason(e.Reason) == lease.EndByAdmin && e.By != "" {
		return "by admin " + e.By
	}
	return lease.EndReason(e.Reason).Words()
}

// unitWords names what a lease holds: its GPUs, or its part of one (a MIG
// instance, a memory budget). A MIG lease's events said "GPU 0", and its
// queued start "(1 GPU)", as if it held the whole GPU.
func unitWords(l lease.Lease) string {
	switch {
	case l.MIG != "" && len(l.GPUs) == 1:
		return "a MIG instance of GPU " + strconv.Itoa(l.GPUs[0])
	case l.MemMiB > 0 && len(l.GPUs) == 1:
		return lease.FormatMem(l.MemMiB) + " of GPU " + strconv.Itoa(l.GPUs[0])
	}
	return gpuWords(l.GPUs)
}

// entrySize is what a queued request asks for, as its events say it.
func entrySize(q queue.QueueEntry) string {
	switch {
	case q.MIG != "":
		return "a MIG instance " + q.MIG
	case q.MemMiB > 0:
		return lease.FormatMem(q.MemMiB) + " of a GPU"
	case q.Nodes > 1:
		return fmt.Sprintf("%d nodes × %d GPUs", q.Nodes, q.GPUsPerNode)
	case q.GPUsPerNode == 1:
		return "1 GPU"
	}
	return strconv.Itoa(q.GPUsPerNode) + " GPUs"
}

func gpuWords(gpus []int) string {
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = strconv.Itoa(g)
	}
	switch len(gpus) {
	case 0:
		return "no GPU" // a service's lease may hold none
	case 1:
		return "GPU " + parts[0]
	}
	return "GPUs " + strings.Join(parts, ",")
}

func clipText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxEventText {
		return s
	}
	cut := maxEventText - len("…")
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// EventFilter selects events: after a node's sequence number, since a
// time, about a user.
type EventFilter struct {
	After uint64    `json:"after,omitempty"`
	Since time.Time `json:"since,omitzero"`
	User  string    `json:"user,omitempty"`
}

// Match reports whether e passes the filter.
func (f EventFilter) Match(e *Event) bool {
	if e.Seq <= f.After || (!f.Since.IsZero() && e.At.Before(f.Since)) {
		return false
	}
	return f.User == "" || e.User == f.User || e.By == f.User
}

// SortEvents orders events from several nodes by time, then node, then
// sequence: the order `dibs events` prints.
func SortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}
