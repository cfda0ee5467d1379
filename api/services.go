package api

import (
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// ServiceState is the state a front end shows for a service's replica l
// on this board: what its supervisor last wrote while l's node is alive,
// "unknown (STATE)" while the node is not (its supervisor is not heard, so
// the last word may be stale), and moving as the agent marks a replica it
// is placing again. One rule, so `dibs services` and the board's services
// view say the same.
func (b *Board) ServiceState(l *lease.Lease) service.State {
	if l.Service == nil {
		return ""
	}
	st := l.Service.State
	if st == service.Moving {
		return st
	}
	for i := range b.Nodes {
		if n := &b.Nodes[i]; n.Name == l.Node && n.State != NodeAlive {
			return service.State("unknown (" + n.State + ")")
		}
	}
	return st
}
