package api

import (
	"testing"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// TestServiceState: a replica on a node that is not alive shows unknown
// with the node's state (its last word is stale), except one the agent
// marks moving; on an alive node, its supervisor's word.
func TestServiceState(t *testing.T) {
	b := Board{Nodes: []Node{{Name: "n1", State: NodeAlive}, {Name: "n2", State: NodeRestarting}, {Name: "n3", State: NodeDead}}}
	svc := func(node string, st service.State) *lease.Lease {
		return &lease.Lease{Node: node, Service: &service.Service{Spec: service.Spec{Name: "web"}, Status: service.Status{State: st}}}
	}
	tests := []struct {
		name string
		l    *lease.Lease
		want service.State
	}{
		{"alive node", svc("n1", service.Healthy), service.Healthy},
		{"restarting node", svc("n2", service.Healthy), "unknown (restarting)"},
		{"dead node", svc("n3", service.Restarting), "unknown (dead)"},
		{"moving off a dead node", svc("n3", service.Moving), service.Moving},
		{"node not on the board", svc("n9", service.Starting), service.Starting},
		{"not a service", &lease.Lease{Node: "n1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := b.ServiceState(tt.l); got != tt.want {
				t.Errorf("ServiceState = %q, want %q", got, tt.want)
			}
		})
	}
}
