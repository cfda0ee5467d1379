package node

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// TestServiceStartEventTellsAMoveAndAnUpdate: a service lease granted for
// a move (agent/svcmove.go's request id) is told as svc-moved, naming the
// lost node; one granted for a rolling update (Spec.Replaces) as
// svc-updated, naming the replica it replaces; any other as svc-started.
func TestServiceStartEventTellsAMoveAndAnUpdate(t *testing.T) {
	at := time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node01-9", Node: "node01", User: "alice", UID: 1001, Kind: lease.KindService, Session: "svc-web",
		StartedAt: at, ExpiresAt: at.Add(lease.ServiceSpan), Service: &service.Service{Spec: service.Spec{Name: "web", Port: 8000}}}
	for _, tc := range []struct {
		request string
		kind    event.EventKind
		says    string
	}{
		{"", event.EventSvcStarted, "alice's service web started on node01 (lease node01-9, no GPU) at http://node01:8000"},
		{"cli-123", event.EventSvcStarted, "started on node01"},
		{MovePrefix + "node02-3", event.EventSvcMoved, "alice's service web moved to node01 (lease node01-9): from node02, lost past the grace"},
		{"replaces node02-5", event.EventSvcUpdated, "alice's service web was updated: its new replica started on node01 (lease node01-9): it replaces lease node02-5"},
	} {
		x := l
		x.RequestID = tc.request
		if old, ok := strings.CutPrefix(tc.request, "replaces "); ok {
			svc := *l.Service
			svc.Replaces = old
			x.Service, x.RequestID = &svc, ""
		}
		e := serviceStartEvent(x, at)
		if e.Kind != tc.kind || !strings.Contains(e.Text, tc.says) || e.Service != "web" {
			t.Errorf("request %q: %s %q (service %q), want %s saying %q", tc.request, e.Kind, e.Text, e.Service, tc.kind, tc.says)
		}
	}
}

// TestSMBusyReadsTheServicesOwnGPUs: a service uses its GPUs' SMs when
// one of them reads at least idle_util_pct in the node's latest probe;
// other GPUs' use, a GPU that reports none and a service without GPUs
// show none.
func TestSMBusyReadsTheServicesOwnGPUs(t *testing.T) {
	pct := func(v int) *int { return &v }
	n := &Node{}
	n.cfg.Policy.IdleUtilPct = 5
	n.state.Store(&State{Snap: nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{
		{Index: 0, UtilizationPct: pct(2)}, {Index: 1, UtilizationPct: pct(40)}, {Index: 2}, {Index: 3, UtilizationPct: pct(5)},
	}}})
	for _, tc := range []struct {
		gpus []int
		want bool
	}{
		{nil, false}, {[]int{0}, false}, {[]int{2}, false}, {[]int{0, 2}, false},
		{[]int{1}, true}, {[]int{0, 1}, true}, {[]int{3}, true},
	} {
		if got := n.smBusy(lease.Lease{GPUs: tc.gpus}); got != tc.want {
			t.Errorf("GPUs %v: busy %v, want %v", tc.gpus, got, tc.want)
		}
	}
}
