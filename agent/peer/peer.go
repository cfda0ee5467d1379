// Package peer is the one protocol between agents: an endpoint per
// operation with a typed request and reply, each validated and
// size-bounded, one registry of handlers, and a call that goes over the
// cluster's encrypted request channel to another node or straight to the
// handler (no JSON) when the node is this one.
//
// What crosses nodes is who a request acts for — a user name, or the
// cluster itself for the scheduler's own steps — never a uid or an admin
// flag: the receiving node maps the name to its own account and takes admin
// rights from its own config.
package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// MaxBody bounds an encoded request or reply; the gossip layer bounds the
// message around it too.
const MaxBody = 256 << 10

// Actor is who a request acts for.
type Actor struct {
	// User is the account name; the receiving node acts as its own account
	// of that name, or refuses.
	User string `json:"user,omitempty"`
	// System marks a step of the cluster itself (a scheduler's preemption,
	// an origin's "started"), authorised by the cluster key alone.
	System bool `json:"system,omitempty"`
}

// As is a request acting for the named user.
func As(user string) Actor { return Actor{User: user} }

// System is a request of the cluster itself.
var System = Actor{System: true}

func (a Actor) validate() error {
	if a.System {
		if a.User != "" {
			return errors.New("a system request names no user")
		}
		return nil
	}
	if !words.ValidUserName(a.User) {
		return fmt.Errorf("bad user name %q", truncate(a.User))
	}
	return nil
}

// Message is what every request and reply type implements: its own shape
// checks, run on both sides (but see Endpoint.MadeAtEdge).
type Message interface {
	Validate() error
}

// Endpoint names one operation and its request and reply types.
type Endpoint[Req, Resp Message] struct {
	Name string
	// MadeAtEdge marks an endpoint whose every request is the value an
	// agent's edge made of a person's words and validated there (a claim,
	// core.claimOf; a booking, core.bookingOf), sent as is: Call sends it
	// to another node without checking it again, since the check would
	// only repeat the edge's. The receiver validates it as network input
	// all the same, and a call to this node (which decodes nothing, so
	// the handler sees what Call was given) is checked as any other.
	// Requests built by the agent itself (the scheduler's, the system
	// actor's) or from words no edge checks keep the sender's check: it
	// refuses them here, in this release's bounds, before an older
	// receiver with fewer bounds could take them.
	MadeAtEdge bool
}

// Transport carries an encoded request to another node's agent and brings
// back its reply. A refusal comes back as code and msg, not as err.
type Transport interface {
	Request(ctx context.Context, node, op string, body []byte) (reply []byte, code refusal.Code, msg string, err error)
	// Protocols says which protocols the agent on node speaks (from its
	// gossip node meta); ok is false when it is not known.
	Protocols(node string) (lo, hi int, ok bool)
}

// handler serves one endpoint, from decoded or raw requests.
type handler struct {
	local  func(ctx context.Context, from string, who Actor, req any) (any, error)
	remote func(ctx context.Context, from string, who Actor, body []byte) ([]byte, error)
}

// Mux is one agent's registry of endpoints and its way to call the others.
// Register every handler before the cluster starts; calls are safe for
// concurrent use.
type Mux struct {
	self string
	mu   sync.RWMutex
	tr   Transport
	h    map[string]handler
	// hi is the newest protocol this agent speaks: Version, or less when
	// it is pinned to the previous release's dialect (SpeakAtMost).
	hi int
}

// NewMux makes the registry of the agent on node self.
func NewMux(self string) *Mux { return &Mux{self: self, h: map[string]handler{}, hi: Version} }

// SpeakAtMost pins this agent to protocols up to v, as an agent of the
// release that brought v would speak: it advertises no newer one, writes
// v's dialect to everyone and, for protocol 6, decodes as strictly as
// v0.1.0 did. It exists so tests can run this release beside its own
// previous-release dialect (the N-1 promise); call it before the cluster
// starts. Production agents never call it.
func (m *Mux) SpeakAtMost(v int) error {
	if v < MinVersion || v > Version {
		return fmt.Errorf("agent protocol %d: this agent speaks %d to %d", v, MinVersion, Version)
	}
	m.mu.Lock()
	m.hi = v
	m.mu.Unlock()
	return nil
}

// Protocols is the range of protocols this agent speaks, for its gossip
// node meta.
func (m *Mux) Protocols() (lo, hi int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return MinVersion, m.hi
}

// strict says whether decoding refuses unknown fields: only when pinned to
// protocol 6, whose decoder (v0.1.0's) did.
func (m *Mux) strict() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.hi < lenientSince
}

// speak picks the protocol to write to node: the newest both speak.
func (m *Mux) speak(tr Transport, node string) (int, error) {
	m.mu.RLock()
	hi := m.hi
	m.mu.RUnlock()
	lo, theirs, ok := tr.Protocols(node)
	if !ok {
		// Not known yet (or not a member, which the call itself will say):
		// the oldest dialect is the one every agent it may be reads.
		return MinVersion, nil
	}
	v := min(hi, theirs)
	if v < max(lo, MinVersion) {
		return 0, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s speaks agent protocols %d to %d and this agent %d to %d: nodes may be at most one dibs release apart; upgrade the older one", node, lo, theirs, MinVersion, hi)}
	}
	return v, nil
}

// SetTransport connects the mux to the cluster; without one, calls to other
// nodes are refused.
func (m *Mux) SetTransport(tr Transport) {
	m.mu.Lock()
	m.tr = tr
	m.mu.Unlock()
}

// envelope is a request on the wire.
type envelope struct {
	V     int             `json:"v"`
	Actor Actor           `json:"actor"`
	Req   json.RawMessage `json:"req"`
}

// Handle registers f for e. f runs for requests from other agents (after
// decoding and validation) and for this agent's own calls to itself.
func Handle[Req, Resp Message](m *Mux, e Endpoint[Req, Resp], f func(ctx context.Context, from string, who Actor, req Req) (Resp, error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.h[e.Name]; dup {
		panic("peer: endpoint " + e.Name + " registered twice")
	}
	m.h[e.Name] = handler{
		local: func(ctx context.Context, from string, who Actor, req any) (any, error) {
			return f(ctx, from, who, req.(Req))
		},
		remote: func(ctx context.Context, from string, who Actor, body []byte) ([]byte, error) {
			var req Req
			if err := decode(body, &req, m.strict()); err != nil {
				return nil, refusal.Wrapf(refusal.CodeInvalid, err, "malformed %s request from %s: %v", e.Name, from, err)
			}
			if err := req.Validate(); err != nil {
				return nil, refusal.Wrapf(refusal.CodeInvalid, err, "%s request from %s: %v", e.Name, from, err)
			}
			resp, err := f(ctx, from, who, req)
			if err != nil {
				return nil, err
			}
			return json.Marshal(resp)
		},
	}
}

// Call sends req to node's agent as who and returns its reply, or the
// refusal it answered with (a *refusal.Error carrying its code). A call to
// this node runs the handler directly. req is validated first, unless it
// goes to another node and was validated where it was made
// (Endpoint.MadeAtEdge).
func Call[Req, Resp Message](ctx context.Context, m *Mux, node string, e Endpoint[Req, Resp], who Actor, req Req) (Resp, error) {
	var zero Resp
	if err := who.validate(); err != nil {
		return zero, fmt.Errorf("%s to %s: %w", e.Name, node, err)
	}
	if !e.MadeAtEdge || node == m.self {
		if err := req.Validate(); err != nil {
			return zero, err
		}
	}
	m.mu.RLock()
	h, ok := m.h[e.Name]
	tr := m.tr
	m.mu.RUnlock()
	if node == m.self {
		if !ok {
			return zero, fmt.Errorf("peer: no handler for %s", e.Name)
		}
		out, err := h.local(ctx, m.self, who, req)
		if err != nil {
			return zero, err
		}
		return out.(Resp), nil
	}
	if tr == nil {
		return zero, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no node %s: this agent runs alone (start it with --join to form a cluster)", node)}
	}
	v, err := m.speak(tr, node)
	if err != nil {
		return zero, err
	}
	rb, err := json.Marshal(req)
	if err != nil {
		return zero, fmt.Errorf("encode %s request: %w", e.Name, err)
	}
	if rb, err = downgrade(e.Name, false, v, rb); err != nil {
		return zero, fmt.Errorf("%s to %s: %w", e.Name, node, err)
	}
	body, err := json.Marshal(envelope{V: v, Actor: who, Req: rb})
	if err != nil {
		return zero, err
	}
	if len(body) > MaxBody {
		return zero, refusal.Invalidf("%s request is %d bytes, over %d", e.Name, len(body), MaxBody)
	}
	reply, code, msg, err := tr.Request(ctx, node, e.Name, body)
	if err != nil {
		return zero, err
	}
	if code != "" || msg != "" {
		if code == "" {
			code = refusal.CodeUnavailable
		}
		return zero, &refusal.Error{Code: code, Msg: msg}
	}
	var resp Resp
	if err := decode(reply, &resp, m.strict()); err != nil {
		return zero, fmt.Errorf("decode %s reply from %s: %w", e.Name, node, err)
	}
	if err := resp.Validate(); err != nil {
		return zero, fmt.Errorf("%s reply from %s: %w", e.Name, node, err)
	}
	return resp, nil
}

// Serve handles a request another agent sent: decode the envelope, check
// the version and the actor, dispatch. The reply or the refusal comes back
// as the transport carries it.
func (m *Mux) Serve(ctx context.Context, from, op string, body []byte) (reply []byte, code refusal.Code, msg string) {
	refuse := func(err error) ([]byte, refusal.Code, string) {
		err = node.ExplainDiskFailure(err)
		c := refusal.CodeOf(err)
		if c == "" {
			c = refusal.CodeUnavailable
		}
		return nil, c, words.OneLine(err.Error())
	}
	m.mu.RLock()
	h, ok := m.h[op]
	m.mu.RUnlock()
	if !ok {
		return refuse(refusal.Invalidf("unknown request %q from %s: is it running another dibs version?", truncate(op), from))
	}
	var env envelope
	if err := decode(body, &env, m.strict()); err != nil {
		return refuse(refusal.Wrapf(refusal.CodeInvalid, err, "malformed %s request from %s: %v", op, from, err))
	}
	if _, hi := m.Protocols(); env.V < MinVersion || env.V > hi {
		return refuse(refusal.Invalidf("%s speaks agent protocol %d and this agent %d to %d: nodes may be at most one dibs release apart; upgrade the older one", from, env.V, MinVersion, hi))
	}
	if err := env.Actor.validate(); err != nil {
		return refuse(refusal.Wrapf(refusal.CodeInvalid, err, "%s request from %s: %v", op, from, err))
	}
	out, err := h.remote(ctx, from, env.Actor, env.Req)
	if err != nil {
		return refuse(err)
	}
	// The reply in the caller's dialect: a v0.1.0 caller refuses a field
	// it does not know.
	if out, err = downgrade(op, true, env.V, out); err != nil {
		return refuse(err)
	}
	return out, "", ""
}

// decode reads one JSON value: bounded, nothing after it. Fields it does
// not know are ignored (a newer agent's additions), unless strict, as
// protocol 6 (v0.1.0) decoded.
func decode(b []byte, v any, strict bool) error {
	if len(b) > MaxBody {
		return fmt.Errorf("%d bytes, over %d", len(b), MaxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
