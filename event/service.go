package event

import (
	"fmt"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// The events of a service's replica (`dibs serve`, issue 33), each
// recorded by the node that knows it: the node that grants or ends the
// lease (started, moved, updated, stopped), the supervisor on the
// replica's node (healthy, unhealthy, restarted, crash-loop, idle). They
// come on top of the lease's own claim and end events, which say what
// happened to the GPUs; these say what happened to the service.
const (
	EventSvcStarted   EventKind = "svc-started"
	EventSvcHealthy   EventKind = "svc-healthy"
	EventSvcUnhealthy EventKind = "svc-unhealthy"
	EventSvcRestarted EventKind = "svc-restarted"
	EventSvcMoved     EventKind = "svc-moved"
	EventSvcCrashLoop EventKind = "svc-crash-loop"
	EventSvcUpdated   EventKind = "svc-updated"
	EventSvcStopped   EventKind = "svc-stopped"
	// EventSvcIdle: a service had no requests and no SM use for the
	// cluster's service_idle_after; it is flagged, never reclaimed.
	EventSvcIdle EventKind = "svc-idle"
)

// ServiceKinds lists the kinds of service events: an agent older than
// protocol 8 (peer.ServiceSince) knows none of them, and refuses an
// event of a kind it does not know.
func ServiceKinds() []EventKind {
	return []EventKind{EventSvcStarted, EventSvcHealthy, EventSvcUnhealthy, EventSvcRestarted, EventSvcMoved,
		EventSvcCrashLoop, EventSvcUpdated, EventSvcStopped, EventSvcIdle}
}

// IsServiceKind reports whether k is one of ServiceKinds.
func IsServiceKind(k EventKind) bool { return strings.HasPrefix(string(k), "svc-") }

// ReasonLong marks the svc-unhealthy event of a replica that has not been
// healthy for a long while (service.UnhealthyTellAfter): the one its
// owner is told of. The first svc-unhealthy of an episode is on the log
// only: the supervisor restarts the replica, and most are back at once.
const ReasonLong = "long"

// ServiceEvent is an event of kind about service lease l. detail, when
// set, is appended to its line (a restart count, where it moved from).
func ServiceEvent(kind EventKind, l lease.Lease, at time.Time, detail string) Event {
	e := LeaseEvent(kind, l, at)
	if l.Service == nil {
		return e
	}
	e.State = string(l.Service.State)
	// NAME, or NAME/i for one of several replicas, as dibs services says
	// it and dibs logs takes it.
	name, where := l.Service.Label(), l.Node
	var s string
	switch kind {
	case EventSvcStarted:
		s = fmt.Sprintf("%s's service %s started on %s (lease %s, %s)", l.User, name, where, l.ID, unitWords(l))
		if u := service.URL(l.Node, l.Service.Port); u != "" {
			s += " at " + u
		}
		e.State = string(service.Starting)
	case EventSvcHealthy:
		s = fmt.Sprintf("%s's service %s on %s is healthy", l.User, name, where)
		e.State = string(service.Healthy)
	case EventSvcUnhealthy:
		s = fmt.Sprintf("%s's service %s on %s fails its check", l.User, name, where)
		e.State = string(service.Unhealthy)
	case EventSvcRestarted:
		s = fmt.Sprintf("%s's service %s on %s was restarted in place (restart %d)", l.User, name, where, l.Service.Restarts)
		e.State = string(service.Restarting)
	case EventSvcMoved:
		s = fmt.Sprintf("%s's service %s moved to %s (lease %s)", l.User, name, where, l.ID)
		e.State = string(service.Starting)
	case EventSvcCrashLoop:
		s = fmt.Sprintf("%s's service %s crash-looped on %s: stopped, its log kept (dibs logs %s)", l.User, name, where, name)
		e.State = string(service.CrashLoop)
	case EventSvcUpdated:
		s = fmt.Sprintf("%s's service %s was updated: its new replica started on %s (lease %s)", l.User, name, where, l.ID)
		e.State = string(service.Starting)
	case EventSvcStopped:
		s = fmt.Sprintf("%s's service %s on %s stopped (lease %s)", l.User, name, where, l.ID)
		e.State = string(service.Stopped)
	case EventSvcIdle:
		s = fmt.Sprintf("%s's service %s on %s is idle: no requests and no SM use", l.User, name, where)
	default:
		s = e.Text
	}
	switch {
	case detail == "":
	case kind == EventSvcStopped:
		s += " " + detail // "by its holder", "because ..."
	default:
		s += ": " + detail
	}
	e.Service = l.Service.Name
	e.Text = clipText(s)
	return e
}

// ServiceIdleEvent is service lease l found idle: no requests and no SM
// use since since (for idleFor at at).
func ServiceIdleEvent(l lease.Lease, idleFor time.Duration, at time.Time) Event {
	return ServiceEvent(EventSvcIdle, l, at, "none for "+words.FormatDuration(words.ToMinute(idleFor))+"; stop it (dibs stop "+l.Service.Name+") if nobody needs it")
}

// serviceNotice is the notice of a service event, and false for the
// events its owner need not hear of (a start they made, a check that
// passes, a restart the supervisor made and that healed).
func (e *Event) serviceNotice(n Notice) (Notice, bool) {
	switch e.Kind {
	case EventSvcCrashLoop, EventSvcMoved, EventSvcIdle:
	case EventSvcUnhealthy:
		if e.Reason != ReasonLong {
			return Notice{}, false
		}
	default:
		return Notice{}, false
	}
	n.Text = clipText(yours(e.Text, e.User))
	return n, true
}
