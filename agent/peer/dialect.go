package peer

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// The compatibility rule (docs/architecture.md, "Versions"): an agent
// speaks its own protocol (Version) and the previous release's
// (MinVersion), so a node works beside nodes one release older or newer
// and an upgrade rolls through a running cluster. Between two agents the
// call is made in the newest protocol both speak, which each reads from
// the other's gossip node meta.
//
//   - A newer agent speaks the older one's dialect to it: the envelope
//     carries the older protocol number, and the request (or reply) is
//     pruned to the fields that protocol's decoder knows
//     (dialect_v6.json for protocol 6, generated from v0.1.0's own types),
//     because v0.1.0 decodes strictly and refuses an unknown field.
//   - From protocol 7 on, decoders ignore fields they do not know, and a
//     field an older agent leaves out decodes as its zero value: every
//     field added to a request or reply must mean "as before" when zero.
//   - A feature whose meaning an older agent would miss (not a field it
//     may ignore, but something it must do) is gated: Require refuses it,
//     naming the node, until every live member speaks the protocol that
//     brought it.
const (
	// Version is the newest protocol this agent speaks, and the one it
	// writes to agents that speak it too.
	Version = 8
	// MinVersion is the oldest protocol this agent speaks: the previous
	// release's (v0.1.0, protocol 6).
	MinVersion = 6
	// lenientSince is the first protocol whose decoders ignore fields they
	// do not know: what is written to an agent of it or later needs no
	// pruning. Only protocol 6 (v0.1.0) decoded strictly.
	lenientSince = 7
	// PlaceCarriesJobSince is the first protocol whose schedulers take a
	// queued run's job from the origin's answer to place; before it (v0.1.0)
	// they took it from the origin's gossip.
	PlaceCarriesJobSince = 7
	// LeavesOnlyForGoodSince is the first protocol whose agents send the
	// leave notice only when they leave for good (`dibs leave`, the
	// package's removal); a stop (SIGTERM: a restart, an upgrade) says
	// nothing and is held for the grace. Before it (v0.1.0) every stop sent
	// the notice, so one from such an agent is taken as a restart too
	// (LeaveIsForGood): its gangs' ranks are held for the grace, not lost.
	LeavesOnlyForGoodSince = 7
	// CPUsSince is the first protocol whose agents choose cores for a
	// lease (--cpus-per-gpu, lease.Lease.CPUs) and bind sessions to them;
	// an older agent would grant the GPUs and drop the cores unsaid.
	CPUsSince = 8
	// ServiceSince is the first protocol whose agents run services (`dibs
	// serve`): a lease of kind service with no end while it is up, which
	// an older agent would take for a plain claim (v0.1.0 refuses the
	// kind; v0.2.0 would grant it without its supervisor).
	ServiceSince = 8
	// HardReleaseSince is the first protocol whose agents honour
	// ReleaseRequest.Kill (SIGKILL to a released lease's session before
	// tmux's hangup). An older agent ignores the field and releases as
	// before: the lease ends all the same, only a process that ignores
	// the hangup outlives it, as it always did.
	HardReleaseSince = 8
)

// LeaveIsForGood reports whether a leave notice from an agent that spoke
// protocol (its newest, as its node meta last said; 0 when never heard)
// means the node left for good. Only from LeavesOnlyForGoodSince on does
// it: a v0.1.0 agent sends one on every stop, an upgrade's included, and
// taking that for good would end the gangs with a rank on a node being
// upgraded. An unknown protocol keeps the notice's word, since there is no
// boot to wait for.
func LeaveIsForGood(protocol int) bool {
	return protocol == 0 || protocol >= LeavesOnlyForGoodSince
}

// dialectV6 is the shape of every endpoint's request and reply in
// protocol 6, generated from v0.1.0 (e4e3039) by
// testdata/v0.1.0/gen.
//
//go:embed dialect_v6.json
var dialectV6JSON []byte

// shape is a JSON value's shape: an object's known fields, or the shape of
// a list's (or a map's) elements; neither means any value, kept whole.
type shape struct {
	Fields map[string]*shape `json:"fields,omitempty"`
	Elem   *shape            `json:"elem,omitempty"`
}

// dialect is the shapes of one protocol's endpoints.
type dialect struct {
	Protocol  int `json:"protocol"`
	Endpoints map[string]struct {
		Req  *shape `json:"req"`
		Resp *shape `json:"resp"`
	} `json:"endpoints"`
}

var loadV6 = sync.OnceValues(func() (*dialect, error) {
	var d dialect
	if err := json.Unmarshal(dialectV6JSON, &d); err != nil {
		return nil, fmt.Errorf("peer: dialect_v6.json: %w", err)
	}
	if d.Protocol != 6 {
		return nil, fmt.Errorf("peer: dialect_v6.json is of protocol %d", d.Protocol)
	}
	return &d, nil
})

// downgrade rewrites an encoded request (reply false) or reply of endpoint
// op, written in this agent's protocol, into protocol v: what an agent of
// v decodes without a complaint. A protocol this agent writes as is comes
// back unchanged; an endpoint protocol v does not have is refused.
func downgrade(op string, reply bool, v int, b []byte) ([]byte, error) {
	if v >= lenientSince {
		return b, nil
	}
	if v != 6 {
		return nil, fmt.Errorf("agent protocol %d is not one this agent speaks (%d to %d)", v, MinVersion, Version)
	}
	d, err := loadV6()
	if err != nil {
		return nil, err
	}
	e, ok := d.Endpoints[op]
	if !ok {
		return nil, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s is not known to agents of protocol %d (an older dibs): upgrade every node first", op, v)}
	}
	s := e.Req
	if reply {
		s = e.Resp
	}
	if s == nil || (s.Fields == nil && s.Elem == nil) {
		// A request or reply is always an object; one with no fields
		// (peer.Empty in v0.1.0) is written as {} in dialect_v6.json, which
		// elsewhere means "any value": here it means none of its fields.
		s = &shape{Fields: map[string]*shape{}}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return nil, fmt.Errorf("downgrade %s to protocol %d: %w", op, v, err)
	}
	if !prune(val, s) {
		return b, nil
	}
	out, err := json.Marshal(val)
	if err != nil {
		return nil, fmt.Errorf("downgrade %s to protocol %d: %w", op, v, err)
	}
	return out, nil
}

// prune removes, in place, every object field s does not know, at every
// depth, and reports whether it removed any.
func prune(v any, s *shape) bool {
	if s == nil {
		return false
	}
	changed := false
	switch x := v.(type) {
	case map[string]any:
		if s.Fields != nil {
			for k, fv := range x {
				fs, ok := s.Fields[k]
				if !ok {
					delete(x, k)
					changed = true
					continue
				}
				changed = prune(fv, fs) || changed
			}
		} else if s.Elem != nil {
			for _, fv := range x {
				changed = prune(fv, s.Elem) || changed
			}
		}
	case []any:
		if s.Elem != nil {
			for _, ev := range x {
				changed = prune(ev, s.Elem) || changed
			}
		}
	}
	return changed
}
