package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// ClusterSettings configure gossip with the other agents.
type ClusterSettings struct {
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int
	// Join lists HOST:PORT peers to join (and re-join).
	Join []string
	// Name is the cluster's label: agents of another cluster are ignored.
	Name string
	// Key is the 32-byte cluster key; nil only with Insecure.
	Key      []byte
	Insecure bool
	// Fast re-joins missing peers every second instead of every 15 s, and
	// sends changed telemetry every second instead of every 5 s: for agents
	// on one machine (tests, the demo), where bandwidth is free and a peer
	// restarts in milliseconds.
	Fast bool
	// Faults, when set, decides the fate of everything this agent sends to
	// the others: the nemesis tests' partitions, loss, delay and
	// duplication. Nil in production.
	Faults gossip.Faults
	// Protocol, when set, pins this agent to agent protocols up to it
	// (peer.Mux.SpeakAtMost): this release speaking as the previous one,
	// for tests of a cluster one release apart. Zero in production.
	Protocol int
	// MaxStreams and MaxStreamsPerSource cap the inbound gossip streams
	// held open, in total and from one address (zero: gossip's defaults).
	MaxStreams, MaxStreamsPerSource int
	// RequestTimeout bounds how long this agent waits for another's answer
	// (zero: gossip's default, 3 s): longer for tests that run many agents
	// on one loaded machine, where an answer can take seconds.
	RequestTimeout time.Duration
}

// clusterLink connects the agent's parts to memberlist: it publishes this
// node's state, hands other agents' requests to the peer protocol, carries
// this agent's requests out, and turns gossip's view into the
// []queue.NodeView (Peers) the cluster view is built from.
type clusterLink struct {
	a *Agent
	c *gossip.Cluster
}

var (
	_ gossip.Delegate = delegate{}
	_ peer.Transport  = (*clusterLink)(nil)
)

// joinCluster starts gossip and joins the configured peers.
func (a *Agent) joinCluster(s ClusterSettings) (*clusterLink, error) {
	cfg := gossip.Config{
		NodeName: a.cfg.NodeName, BindAddr: s.BindAddr, BindPort: s.BindPort,
		AdvertiseAddr: s.AdvertiseAddr, AdvertisePort: s.AdvertisePort, Join: s.Join,
		ClusterName: s.Name, Key: s.Key, Insecure: s.Insecure,
		BootID: randomID(), BootedAt: a.deps.Clock.Now(), Faults: s.Faults,
		MaxInboundStreams: s.MaxStreams, MaxInboundStreamsPerSource: s.MaxStreamsPerSource, RequestTimeout: s.RequestTimeout,
		Logf: func(f string, args ...any) { a.log.Warn(fmt.Sprintf(f, args...)) },
	}
	if s.Fast {
		cfg.RejoinInterval = time.Second
		cfg.TelemetryInterval = time.Second
	}
	lo, hi := a.peers.Protocols()
	cfg.ProtocolMin, cfg.Protocol = uint8(lo), uint8(hi)
	link := &clusterLink{a: a}
	c, err := gossip.New(cfg, delegate{link})
	if err != nil {
		if errors.Is(err, gossip.ErrDuplicateName) {
			return nil, fmt.Errorf("another agent in the cluster is already called %s: give this one its own --node-name", a.cfg.NodeName)
		}
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	link.c = c
	return link, nil
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// delegate adapts the agent to gossip.Delegate.
type delegate struct{ l *clusterLink }

// LocalState implements gossip.Delegate.
func (d delegate) LocalState() gossip.NodeState {
	a := d.l.a
	st := a.node.State()
	// Bookings travel as leases (Booked set); Peers splits them off again.
	// A job's command, directory and environment stay here (the origin
	// hands them to the scheduler that places the entry; a booked run
	// starts on this node): what every node holds of one person's work is
	// bounded by the caps on entries and bookings, not by their commands.
	leases := st.Leases
	if len(st.Bookings) > 0 {
		leases = slices.Clone(st.Leases)
		for _, b := range st.Bookings {
			leases = append(leases, b.Published())
		}
	}
	entries := a.origin.Entries()
	queue := make([]queue.QueueEntry, len(entries))
	whole := d.l.olderScheduler()
	for i, e := range entries {
		if whole {
			queue[i] = e
		} else {
			queue[i] = e.Published()
		}
	}
	return gossip.NodeState{
		Node: a.cfg.NodeName, Version: st.Version, Snapshot: st.Snap, Leases: leases,
		Queue: queue, Ended: st.Ended, QuietSince: st.QuietSince,
		Usage: a.node.Usage().PublishedUsage(),
	}
}

// ClusterChanged implements gossip.Delegate: every open board wakes, and
// the scheduler looks again (a release elsewhere may let a request start).
func (d delegate) ClusterChanged() {
	d.l.a.changed.Notify()
	d.l.a.kick()
}

// HandleRequest implements gossip.Delegate: a request another agent sent,
// served by the peer protocol.
func (d delegate) HandleRequest(ctx context.Context, from string, req gossip.Request) gossip.Response {
	body, code, msg := d.l.a.peers.Serve(ctx, from, req.Op, req.Body)
	return gossip.Response{Body: body, ErrCode: code, ErrMsg: msg}
}

// Request implements peer.Transport. Gossip bounds the wait by its
// RequestTimeout (ClusterSettings.RequestTimeout) or ctx, whichever ends
// first.
func (l *clusterLink) Request(ctx context.Context, node, op string, body []byte) ([]byte, refusal.Code, string, error) {
	resp, err := l.c.Request(ctx, node, gossip.Request{Op: op, Body: body})
	switch {
	case errors.Is(err, gossip.ErrUnknownNode):
		return nil, "", "", &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no node %s in this cluster: `dibs ls` shows the nodes", node)}
	case errors.Is(err, gossip.ErrNodeDown):
		return nil, "", "", &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s is down, so nobody can claim or release its GPUs until its agent is back", node)}
	case errors.Is(err, gossip.ErrNoResponse) && errors.Is(err, gossip.ErrClosed):
		// Sent, then this agent stopped (a restart) before the answer came.
		return nil, "", "", &refusal.Error{Code: refusal.CodeNoAnswer, Msg: fmt.Sprintf("this agent restarted before %s answered: the request may or may not have been carried out; `dibs ls` shows what it did", node)}
	case errors.Is(err, gossip.ErrNoResponse), errors.Is(err, context.DeadlineExceeded):
		return nil, "", "", &refusal.Error{Code: refusal.CodeNoAnswer, Msg: fmt.Sprintf("%s did not answer in time; it may be unreachable from here. `dibs ls` shows what it last said (the request may or may not have been carried out)", node)}
	case err != nil:
		return nil, "", "", refusal.Wrapf(refusal.CodeUnavailable, err, "cannot reach %s: %v", node, err)
	}
	return resp.Body, resp.ErrCode, resp.ErrMsg, nil
}

// Protocols implements peer.Transport: what node's agent speaks, from its
// gossip node meta.
func (l *clusterLink) Protocols(node string) (lo, hi int, ok bool) {
	a, b, ok := l.c.Protocols(node)
	return int(a), int(b), ok
}

// olderScheduler reports whether a member speaks agent protocol 6
// (v0.1.0) at most. Such a scheduler takes a queued run's job from its
// origin's gossip, not from the answer to place, so while one is in the
// cluster (an upgrade rolling through) this origin publishes its jobs
// whole, as v0.1.0 did; the section's size floor still bounds what one
// person adds to it.
//
// memberlist may ask for LocalState before gossip.New has returned and
// l.c is set: the agent's atomic pointer to the link is stored only after,
// so reading the cluster through it is safe, and before it nothing has
// joined yet.
func (l *clusterLink) olderScheduler() bool {
	cl := l.a.cluster.Load()
	if cl == nil {
		return false
	}
	for _, hi := range cl.c.MemberProtocols() {
		if hi != 0 && int(hi) < peer.PlaceCarriesJobSince {
			return true
		}
	}
	return false
}

// Peers implements core.Cluster.
func (l *clusterLink) Peers() []queue.NodeView {
	peers := l.c.View()
	protocols := l.c.MemberProtocols()
	last := l.c.LastProtocols()
	out := make([]queue.NodeView, 0, len(peers))
	for _, p := range peers {
		if p.Name == l.a.cfg.NodeName {
			out = append(out, queue.NodeView{Name: p.Name, Addr: p.Addr})
			continue
		}
		st := &p.NodeState
		leases, bookings := lease.SplitBookings(st.Leases)
		// Gossip times a member's absence on the system's monotonic clock;
		// the view judges it against the agent's clock (lost ranks), so
		// say when it went down on that clock: a wall-clock step must not
		// make a node lost at once, or never.
		//
		// A node is silent since it was last heard, which for a crash is
		// a suspicion timeout before memberlist declares it dead: the
		// grace counts from then.
		since := p.DownSince
		if !since.IsZero() && !p.HeardAt.IsZero() && p.HeardAt.Before(since) {
			since = p.HeardAt
		}
		if !since.IsZero() {
			since = l.a.deps.Clock.Now().Add(-time.Since(since))
		}
		out = append(out, queue.NodeView{
			Name: p.Name, State: memberState(p, last), Addr: p.Addr, HasState: p.HasState, Since: since,
			Version: st.Version, Snap: st.Snapshot, Leases: leases, Bookings: bookings, Idle: lease.IdleTrackerFrom(st.QuietSince),
			Queue: st.Queue, Ended: st.Ended, Usage: st.Usage, Protocol: int(protocols[p.Name]),
		})
	}
	return out
}

// memberState is a peer's membership state as this agent judges it: as
// gossip says, except that a leave notice from an agent that sent one on
// every stop (v0.1.0, protocol 6: peer.LeaveIsForGood) is a restart — the
// node is down, and its leases, ranks and gangs hold for the grace — so a
// rolling upgrade from v0.1.0 ends no gang with a rank on the node being
// swapped. The cost: such a node removed for good holds its gangs until
// the grace has passed, as a crashed one does. last is each peer's newest
// protocol as its last node meta said (gossip.Cluster.LastProtocols).
func memberState(p gossip.Peer, last map[string]uint8) string {
	if p.State == gossip.StateLeft && !peer.LeaveIsForGood(int(last[p.Name])) {
		return gossip.StateDead
	}
	return p.State
}

// Host implements core.Cluster: the address the others reach this node at.
func (l *clusterLink) Host() string {
	if h, _, err := net.SplitHostPort(l.c.LocalAddr()); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		return h
	}
	return l.a.cfg.NodeName
}

// SSHHost implements core.Cluster: the node's name, which is what people
// already ssh to (the default node name is the host name).
func (l *clusterLink) SSHHost(node string) string { return node }

// Status implements core.Cluster.
func (l *clusterLink) Status(now time.Time) ([]api.Member, api.GossipCounter) {
	var ms []api.Member
	protocols, last := l.c.MemberProtocols(), l.c.LastProtocols()
	for _, p := range l.c.View() {
		m := api.Member{Name: p.Name, Addr: p.Addr, State: memberState(p, last), StateVersion: p.NodeState.Version, Protocol: int(protocols[p.Name])}
		if p.HasState && !p.NodeState.Snapshot.TakenAt.IsZero() {
			m.TelemetryAge = now.Sub(p.NodeState.Snapshot.TakenAt)
		}
		if !p.HeardAt.IsZero() && p.Name != l.a.cfg.NodeName {
			m.SinceHeard = max(now.Sub(p.HeardAt), 0)
		}
		ms = append(ms, m)
	}
	s := l.c.Stats()
	return ms, api.GossipCounter{
		MessagesIn: s.MessagesIn, MessagesOut: s.MessagesOut, BytesIn: s.BytesIn, BytesOut: s.BytesOut,
		Dropped: s.Dropped, DecryptFailures: s.DecryptFailures, LabelMismatches: s.LabelMismatches,
		RemoteRequests: s.RemoteRequests, RemoteRequestErrs: s.RemoteRequestErrs, StreamsRefused: s.StreamsRefused,
	}
}

func (l *clusterLink) publish(urgent bool) { l.c.Publish(urgent) }

// awaitPeers is how long a starting agent that joins others waits to hear
// from one before it serves.
const awaitPeers = 3 * time.Second

// awaitPeers waits, at most within, until this agent has heard the state
// of another agent and of every member that is alive. The initial join
// brings the others' states at once when any of them is up; when none is
// (they restart too), the first to come back is waited for, so the agent
// does not open its doors showing an empty cluster. Real time: it waits on
// the network.
func (l *clusterLink) awaitPeers(within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		heard, all := 0, true
		for _, p := range l.c.View() {
			if p.Name == l.a.cfg.NodeName || p.State != gossip.StateAlive {
				continue
			}
			if p.HasState {
				heard++
			} else {
				all = false
			}
		}
		if heard > 0 && all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.a.log.Info("serving before any other agent answered", "waited", within)
}

func (l *clusterLink) addr() string { return l.c.LocalAddr() }

func (l *clusterLink) shutdown(how exitHow) {
	switch how {
	case exitRestart:
		if err := l.c.Restart(2 * time.Second); err != nil {
			l.a.log.Warn("gossip: step out to restart", "err", err)
		}
	case exitLeave:
		if err := l.c.Leave(2 * time.Second); err != nil {
			l.a.log.Warn("gossip: leave", "err", err)
		}
	}
	if err := l.c.Shutdown(); err != nil {
		l.a.log.Warn("gossip: shutdown", "err", err)
	}
}
