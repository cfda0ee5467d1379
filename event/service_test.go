package event_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// TestServiceEventsNameTheServiceAndTellTheOwnerOnlyWhatMatters: every
// service event is valid, names its service and state, and only a crash
// loop, a move, a long unhealthy spell and an idle flag are told to the
// owner (their sessions, their webhook); the crash loop's lease end is not
// told a second time.
func TestServiceEventsNameTheServiceAndTellTheOwnerOnlyWhatMatters(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node02-4", Node: "node02", User: "alice", UID: 1001, Kind: lease.KindService,
		StartedAt: at, ExpiresAt: at.Add(lease.ServiceSpan), Session: "svc-web", RequestID: "move-node01-3",
		Service: &service.Service{Spec: service.Spec{Name: "web", Port: 8000}, Status: service.Status{State: service.Healthy}}}
	long := event.ServiceEvent(event.EventSvcUnhealthy, l, at, "not healthy for 10m")
	long.Reason = event.ReasonLong
	tests := []struct {
		e      event.Event
		state  service.State
		notice string // "" for none
	}{
		{event.ServiceEvent(event.EventSvcStarted, l, at, ""), service.Starting, ""},
		{event.ServiceEvent(event.EventSvcHealthy, l, at, ""), service.Healthy, ""},
		{event.ServiceEvent(event.EventSvcUnhealthy, l, at, ""), service.Unhealthy, ""},
		{long, service.Unhealthy, "your service web on node02 fails its check: not healthy for 10m"},
		{event.ServiceEvent(event.EventSvcRestarted, l, at, ""), service.Restarting, ""},
		{event.ServiceEvent(event.EventSvcMoved, l, at, "from node01"), service.Starting, "your service web moved to node02"},
		{event.ServiceEvent(event.EventSvcCrashLoop, l, at, ""), service.CrashLoop, "your service web crash-looped on node02"},
		{event.ServiceEvent(event.EventSvcUpdated, l, at, ""), service.Starting, ""},
		{event.ServiceEvent(event.EventSvcStopped, l, at, "by its holder"), service.Stopped, ""},
		{event.ServiceIdleEvent(l, 25*time.Hour, at), service.Healthy, "your service web on node02 is idle"},
	}
	for _, tc := range tests {
		e := tc.e
		e.Seq = 1
		if err := e.Validate(); err != nil {
			t.Errorf("%s: %v", e.Kind, err)
		}
		if e.Service != "web" || e.State != string(tc.state) || e.User != "alice" || e.Node != "node02" {
			t.Errorf("%s: service %q state %q user %q node %q, want web %s alice node02", e.Kind, e.Service, e.State, e.User, e.Node, tc.state)
		}
		if !event.IsServiceKind(e.Kind) {
			t.Errorf("%s is not a service kind", e.Kind)
		}
		n, ok := e.Notice()
		switch {
		case tc.notice == "" && ok:
			t.Errorf("%s: told its owner %q, want nothing", e.Kind, n.Text)
		case tc.notice != "" && (!ok || !strings.Contains(n.Text, tc.notice)):
			t.Errorf("%s: notice %q (%v), want it to say %q", e.Kind, n.Text, ok, tc.notice)
		case ok && (n.Service != "web" || n.State != string(tc.state) || n.Validate() != nil):
			t.Errorf("%s: notice names service %q state %q (%v)", e.Kind, n.Service, n.State, n.Validate())
		}
	}
	end := event.EndEvent(l, lease.EndCrashLoop, "", at)
	if n, ok := end.Notice(); ok {
		t.Errorf("a crash-looped service's lease end told its owner %q again", n.Text)
	}
	if end.Service != "web" {
		t.Errorf("a service lease's end event names service %q, want web", end.Service)
	}
}
