package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/lease"
)

// Request ops between agents. The body of each is the local API's request
// type, so a forwarded claim is decided by exactly the code a local one is.
const (
	opClaim   = "claim"
	opRelease = "release"
	opExtend  = "extend"
)

// gossipLink is clustering through memberlist.
type gossipLink struct {
	a *Agent
	c *gossip.Cluster
}

// gossipDelegate adapts the agent to gossip.Delegate.
type gossipDelegate struct{ a *Agent }

var _ gossip.Delegate = gossipDelegate{}

func (a *Agent) startCluster(s ClusterSettings) (clusterLink, error) {
	cfg := gossip.Config{
		NodeName:      a.cfg.NodeName,
		BindAddr:      s.BindAddr,
		BindPort:      s.BindPort,
		AdvertiseAddr: s.AdvertiseAddr,
		AdvertisePort: s.AdvertisePort,
		Join:          s.Join,
		ClusterName:   s.Name,
		Key:           s.Key,
		Insecure:      s.Insecure,
		BootID:        a.bootID,
		BootedAt:      a.startedAt,
		Logf:          func(f string, args ...any) { a.logf("gossip: "+f, args...) },
	}
	if s.Fast {
		cfg.RejoinInterval = time.Second
		cfg.TelemetryInterval = time.Second
	}
	c, err := gossip.New(cfg, gossipDelegate{a})
	if err != nil {
		if errors.Is(err, gossip.ErrDuplicateName) {
			return nil, fmt.Errorf("another agent in the cluster is already called %s: give this one its own --node-name", a.cfg.NodeName)
		}
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	return &gossipLink{a: a, c: c}, nil
}

// extraState is what the agent publishes beyond leases and telemetry, in
// NodeState.Extra.
type extraState struct {
	// QuietSince is when each quiet GPU went quiet, so every board judges
	// idleness with the owner's history.
	QuietSince map[int]time.Time `json:"quiet_since,omitempty"`
	// Queue is the requests submitted at this node.
	Queue []lease.QueueEntry `json:"queue,omitempty"`
	// Ended tells origins how queued leases here ended (recent ones).
	Ended []endedLease `json:"ended,omitempty"`
}

// LocalState implements gossip.Delegate.
func (d gossipDelegate) LocalState() gossip.NodeState {
	a := d.a
	a.mu.Lock()
	defer a.mu.Unlock()
	x := extraState{QuietSince: a.idle.QuietSinceAll(), Ended: a.ended}
	for _, e := range a.queue {
		x.Queue = append(x.Queue, e)
	}
	slices.SortFunc(x.Queue, func(p, q lease.QueueEntry) int { return strings.Compare(p.ID, q.ID) })
	extra, _ := json.Marshal(x)
	return gossip.NodeState{
		Node:     a.cfg.NodeName,
		Version:  a.version,
		Snapshot: a.snap,
		Leases:   a.table.List(),
		Extra:    extra,
		Usage:    a.publishedUsage(),
	}
}

// ClusterChanged implements gossip.Delegate: every open board wakes, and
// the scheduler looks again (a release elsewhere may let a request start).
func (d gossipDelegate) ClusterChanged() {
	d.a.mu.Lock()
	d.a.bumpLocked()
	d.a.mu.Unlock()
	d.a.kickScheduler()
}

// HandleRequest implements gossip.Delegate: a request another agent
// forwarded, decided here because this agent alone writes this node's GPUs.
// The caller is identified across nodes by user name: the account with that
// name on this node is who the lease and any session belong to.
func (d gossipDelegate) HandleRequest(ctx context.Context, from string, req gossip.Request) gossip.Response {
	a := d.a
	c := req.Caller
	if u, err := a.deps.Users.LookupUser(c.User); err == nil {
		local := a.CallerFor(u.UID)
		local.Admin = local.Admin || c.Admin
		c = local
	}
	if err := a.mayWrite(c); err != nil {
		return errResponse(err)
	}
	var out any
	var err error
	switch req.Op {
	case opClaim:
		var r api.ClaimRequest
		if err = decodeBody(req.Body, &r); err == nil {
			r.Node = a.cfg.NodeName
			out, err = a.claimLocal(ctx, c, r)
		}
	case opExtend:
		var r api.ExtendRequest
		if err = decodeBody(req.Body, &r); err == nil {
			out, err = a.Extend(ctx, c, r)
		}
	default:
		out, err = a.handleOp(ctx, c, from, req.Op, req.Body)
	}
	if err != nil {
		return errResponse(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return errResponse(err)
	}
	return gossip.Response{Body: b}
}

func decodeBody(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return lease.Invalidf("malformed request from another agent: %v", err)
	}
	return nil
}

func errResponse(err error) gossip.Response {
	code := lease.CodeOf(err)
	if code == "" {
		code = lease.CodeUnavailable
	}
	return gossip.Response{ErrCode: code, ErrMsg: oneLine(err.Error())}
}

// request sends a request to node's agent and decodes its answer into out.
func (g *gossipLink) request(ctx context.Context, c lease.Caller, node, op string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
	}
	resp, err := g.c.Request(ctx, node, gossip.Request{Op: op, Caller: c, Body: b})
	switch {
	case errors.Is(err, gossip.ErrUnknownNode):
		return &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no node %s in this cluster: `dibs ls` shows the nodes", node)}
	case errors.Is(err, gossip.ErrNodeDown):
		return &lease.Error{Code: lease.CodeUnavailable, Msg: fmt.Sprintf("%s is down, so nobody can claim or release its GPUs until its agent is back", node)}
	case errors.Is(err, gossip.ErrNoResponse), errors.Is(err, context.DeadlineExceeded):
		return &lease.Error{Code: lease.CodeUnavailable, Msg: fmt.Sprintf("%s did not answer in time; it may be unreachable from here. `dibs ls` shows what it last said (the request may or may not have been carried out)", node)}
	case err != nil:
		return &lease.Error{Code: lease.CodeUnavailable, Msg: fmt.Sprintf("cannot reach %s: %v", node, err)}
	}
	if resp.ErrCode != "" || resp.ErrMsg != "" {
		return &lease.Error{Code: resp.ErrCode, Msg: resp.ErrMsg}
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("decode answer from %s: %w", node, err)
	}
	return nil
}

func (g *gossipLink) enabled() bool { return true }

func (g *gossipLink) publish(urgent bool) { g.c.Publish(urgent) }

func (g *gossipLink) claim(ctx context.Context, c lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error) {
	var r api.ClaimResponse
	err := g.request(ctx, c, req.Node, opClaim, req, &r)
	return r, err
}

func (g *gossipLink) release(ctx context.Context, c lease.Caller, node string, ids []string) (api.ReleaseResponse, error) {
	var r api.ReleaseResponse
	err := g.request(ctx, c, node, opRelease, api.ReleaseRequest{IDs: ids}, &r)
	return r, err
}

func (g *gossipLink) extend(ctx context.Context, c lease.Caller, node string, req api.ExtendRequest) (api.ClaimResponse, error) {
	var r api.ClaimResponse
	err := g.request(ctx, c, node, opExtend, req, &r)
	return r, err
}

func (g *gossipLink) view() []remoteNode {
	peers := g.c.View()
	out := make([]remoteNode, 0, len(peers))
	for _, p := range peers {
		out = append(out, remoteNode{
			Name: p.Name, Addr: p.Addr, State: p.State, Version: p.NodeState.Version,
			Snapshot: p.NodeState.Snapshot, Leases: p.NodeState.Leases, HasState: p.HasState, UpdatedAt: p.UpdatedAt,
			Usage: p.NodeState.Usage,
		})
		out[len(out)-1].Idle, out[len(out)-1].Extra = extraFrom(p.NodeState.Extra)
	}
	return out
}

// sshHost is the node's name: the default node name is the host name, the
// name people already ssh to.
func (g *gossipLink) sshHost(node string) string { return node }

func (g *gossipLink) status(now time.Time) ([]api.Member, api.GossipCounter) {
	var ms []api.Member
	for _, p := range g.c.View() {
		m := api.Member{Name: p.Name, Addr: p.Addr, State: p.State, StateVersion: p.NodeState.Version}
		if p.HasState && !p.NodeState.Snapshot.TakenAt.IsZero() {
			m.TelemetryAge = now.Sub(p.NodeState.Snapshot.TakenAt)
		}
		ms = append(ms, m)
	}
	s := g.c.Stats()
	return ms, api.GossipCounter{
		MessagesIn: s.MessagesIn, MessagesOut: s.MessagesOut, BytesIn: s.BytesIn, BytesOut: s.BytesOut,
		Dropped: s.Dropped, DecryptFailures: s.DecryptFailures,
		RemoteRequests: s.RemoteRequests, RemoteRequestErrs: s.RemoteRequestErrs,
	}
}

func (g *gossipLink) shutdown(graceful bool) {
	if graceful {
		if err := g.c.Leave(2 * time.Second); err != nil {
			g.a.logf("gossip: leave: %v", err)
		}
	}
	if err := g.c.Shutdown(); err != nil {
		g.a.logf("gossip: shutdown: %v", err)
	}
}

func (g *gossipLink) addr() string { return g.c.LocalAddr() }

// extraFrom reads what a node published beyond leases; nil when nothing.
func extraFrom(extra json.RawMessage) (*lease.IdleTracker, *extraState) {
	if len(extra) == 0 {
		return nil, nil
	}
	var x extraState
	if json.Unmarshal(extra, &x) != nil {
		return nil, nil
	}
	return lease.IdleTrackerFrom(x.QuietSince), &x
}

// publishedUsage is the usage last computed, for gossip (never reads disk).
func (a *Agent) publishedUsage() map[string]float64 {
	if u := a.usage.Load(); u != nil {
		return *u
	}
	return nil
}
