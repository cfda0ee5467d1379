package peer

import (
	"fmt"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/queue"
)

// Feature is something a release brought that an older agent would get
// wrong rather than ignore (a new kind of request, a rule every node must
// apply): it may be used only once every live node speaks the protocol
// that brought it. A field an older agent may ignore needs no Feature.
type Feature struct {
	// Name is what a person is told they cannot use yet.
	Name string
	// Since is the agent protocol that brought it.
	Since int
}

// Require refuses f, with the node and what to do, while a live node of v
// speaks an older protocol than f.Since: the oldest live member decides,
// so a feature is refused at submit until the upgrade has rolled through
// every node, and never half-used across a mixed cluster. Nodes that are
// down do not hold it back (nothing is placed there), nor do nodes whose
// protocol gossip has not told yet.
func Require(v queue.ClusterView, f Feature) error {
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Self && n.State != queue.NodeAlive && n.State != queue.NodeSuspect {
			continue
		}
		if n.Protocol != 0 && n.Protocol < f.Since {
			return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf(
				"%s needs every node at agent protocol %d or newer, and %s runs an older dibs (protocol %d): upgrade it first",
				f.Name, f.Since, n.Name, n.Protocol)}
		}
	}
	return nil
}

// Services is `dibs serve`: refused while a live node speaks a protocol
// before ServiceSince.
var Services = Feature{Name: "services (dibs serve)", Since: ServiceSince}
