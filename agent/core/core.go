// Package core is the daemon's one service: every operation a person or
// another agent can ask for, bound to the caller the front door resolved.
// The unix socket, the SSH board and the peer protocol all come here;
// permission is decided here once (the lease rules decide ownership), and
// each operation is carried out by the part that owns it: the node's
// single writer, the queue's origin, the scheduler.
package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Config is what the service is told.
type Config struct {
	Node    string
	Policy  lease.Policy
	Sched   queue.SchedConfig
	Version string
	DataDir string
	Socket  string
	// ProxyPorts is the services proxy's range (agent config [services]
	// proxy_ports) when the proxy is on, zero when off: a service
	// admitted here is given a port of it (admitService).
	ProxyPorts service.PortRange
}

// Cluster is what the service reads of the gossip cluster; single-node mode
// has none (nil).
type Cluster interface {
	// Peers are the other nodes as gossip last heard of them.
	Peers() []queue.NodeView
	// Host is this node's address as the others reach it (a gang's
	// MASTER_ADDR).
	Host() string
	// SSHHost is what people ssh to for a node's sessions.
	SSHHost(node string) string
	Status(now time.Time) ([]api.Member, api.GossipCounter)
}

// Deps are the parts the service drives.
type Deps struct {
	Node     *node.Node
	Origin   *origin.Origin
	Peers    *peer.Mux
	Accounts *account.Directory
	Clock    clock.Clock
	Changed  *notify.Signal
	// Kick asks the scheduler for a pass.
	Kick func()
	// Leave asks the agent to leave the cluster for good and stop (`dibs
	// leave`); it returns at once, the agent ends after the answer. Nil
	// refuses.
	Leave func()
	// Attach builds the argv that attaches to a session.
	Attach func(u launch.User, session string) []string
	// CanWrite refuses changes for a uid this agent cannot act for (it does
	// not run as root and uid is not its own); nil allows all.
	CanWrite func(uid int) error
	Log      *slog.Logger
	// Events is this node's event log; Webhooks the webhooks it keeps;
	// Tell shows a notice in every tmux session a user has here. Any may
	// be nil (no events, no webhooks, no tmux).
	Events   *events.Log
	Webhooks *events.Webhooks
	Tell     func(ctx context.Context, u launch.User, text string) (shown, later int, err error)
	// ReadLog reads a run's kept output as the user
	// (launch.Launcher.ReadLog); nil keeps no logs to read.
	ReadLog func(ctx context.Context, u launch.User, session, part string, off int64, n int) (launch.LogChunk, error)
}

// Service is the daemon's operations.
type Service struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	startedAt time.Time
	// cluster is set once the agent has joined; peer requests may be
	// served (and read it) while the join is still under way.
	cluster atomic.Pointer[Cluster]
	placed  placements
}

// placements remembers, for a while, where a claim with a request id was
// sent, so its retries go to the same node.
type placements struct {
	mu sync.Mutex
	m  map[string]placement
}

type placement struct {
	node string
	at   time.Time
}

// placementKeep is how long a placement is remembered: longer than any
// client retries (api.RetryFor).
const placementKeep = time.Minute

func (p *placements) get(user, id string) (string, bool) {
	if id == "" {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	x, ok := p.m[user+"/"+id]
	return x.node, ok
}

func (p *placements) put(user, id, node string, now time.Time) {
	if id == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]placement{}
	}
	for k, x := range p.m {
		if now.Sub(x.at) > placementKeep {
			delete(p.m, k)
		}
	}
	p.m[user+"/"+id] = placement{node: node, at: now}
}

// New builds the service and registers its peer endpoints.
func New(cfg Config, deps Deps) *Service {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Kick == nil {
		deps.Kick = func() {}
	}
	cfg.Sched = cfg.Sched.WithDefaults()
	s := &Service{cfg: cfg, deps: deps, log: deps.Log, startedAt: deps.Clock.Now()}
	s.registerPeerOps()
	s.registerEventOps()
	s.registerHistoryOps()
	return s
}

// SetCluster connects the service to the gossip cluster. Memberlist
// delivers peers' requests from the moment it joins, before the agent gets
// here, so the link is published atomically.
func (s *Service) SetCluster(c Cluster) { s.cluster.Store(&c) }

// link is the gossip cluster, nil until SetCluster (and on a lone node).
func (s *Service) link() Cluster {
	if c := s.cluster.Load(); c != nil {
		return *c
	}
	return nil
}

// protocol is the newest agent protocol this agent speaks.
func (s *Service) protocol() int {
	_, hi := s.deps.Peers.Protocols()
	return hi
}

// Require refuses f while a live node's agent is older than the release
// that brought it (peer.Require): what a submit path calls before it
// accepts a request that uses a feature new in this release.
func (s *Service) Require(f peer.Feature) error { return peer.Require(s.View(), f) }

// View is the cluster as this agent sees it now.
func (s *Service) View() queue.ClusterView {
	st := s.deps.Node.State()
	self := queue.NodeView{
		Name: s.cfg.Node, State: queue.NodeAlive, HasState: true, Version: st.Version,
		Snap: st.Snap, Leases: st.Leases, Bookings: st.Bookings, Judged: st.Judged, Idle: lease.IdleTrackerFrom(st.QuietSince),
		Queue: s.deps.Origin.Entries(), Ended: st.Ended, Usage: s.deps.Node.Usage().DecayedUsage(s.cfg.Sched.HalfLife),
		Protocol: s.protocol(), Software: s.cfg.Version,
	}
	var peers []queue.NodeView
	if cl := s.link(); cl != nil {
		peers = cl.Peers()
	}
	return queue.NewClusterView(self, peers, s.deps.Clock.Now())
}

// Changes returns a channel closed at the next change anywhere.
func (s *Service) Changes() <-chan struct{} { return s.deps.Changed.Wait() }

// ForUID binds the service to the process the kernel named on the socket.
func (s *Service) ForUID(uid int) *Bound {
	c := s.deps.Accounts.CallerForUID(uid)
	return &Bound{s: s, c: c, readOnly: s.canWrite(c.UID)}
}

// ForUser binds the service to the account an SSH key was accepted for.
// A name with no account here (a users-file identity) can look, not act.
func (s *Service) ForUser(name string) *Bound {
	u, err := s.deps.Accounts.ByName(name)
	if err != nil {
		c := lease.Caller{UID: -1, User: name}
		return &Bound{s: s, c: c, readOnly: &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s, so can look but not claim", name, s.cfg.Node)}}
	}
	c := s.deps.Accounts.Caller(u)
	return &Bound{s: s, c: c, readOnly: s.canWrite(c.UID)}
}

// ForCaller binds the service to a caller as given, with no check that this
// agent may act for them: for in-process callers the agent trusts as they
// are (the demo's simulated teammates, tests). No front door uses it.
func (s *Service) ForCaller(c lease.Caller) *Bound { return &Bound{s: s, c: c} }

// forPeer is a request another agent forwarded for a user: it acts as this
// node's account of the same name, or is refused.
func (s *Service) forPeer(from string, who peer.Actor) (*Bound, error) {
	if who.System {
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: "this request must act for a user"}
	}
	c, err := s.deps.Accounts.CallerForName(who.User, from)
	if err != nil {
		return nil, err
	}
	if err := s.canWrite(c.UID); err != nil {
		return nil, err
	}
	return &Bound{s: s, c: c}, nil
}

func (s *Service) canWrite(uid int) error {
	if s.deps.CanWrite == nil {
		return nil
	}
	return s.deps.CanWrite(uid)
}

// Status reports the agent's view of itself and the cluster.
func (s *Service) Status() api.Status {
	st := s.deps.Node.State()
	out := api.Status{
		Node: s.cfg.Node, Version: s.cfg.Version, StartedAt: s.startedAt.Round(0),
		Backend: string(st.Snap.Host.Backend), DataDir: s.cfg.DataDir, Socket: s.cfg.Socket,
		Leases: len(st.Leases), LastToken: st.LastToken,
	}
	if cl := s.link(); cl != nil {
		out.Members, out.Gossip = cl.Status(s.deps.Clock.Now())
		// A member away within the grace shows as restarting, as on the
		// board: the view knows since when it is away.
		v := s.View()
		for i := range out.Members {
			if n, ok := v.Node(out.Members[i].Name); ok {
				out.Members[i].State = s.shown(n, v.Now)
			}
		}
	}
	return out
}

// shown is the state people see for a node: restarting while it is away
// within the grace (queue.NodeView.Shown).
func (s *Service) shown(n *queue.NodeView, now time.Time) string {
	return n.Shown(now, s.cfg.Sched.LostAfter) // defaulted once, in New
}

// TellUser notes text on uid's board and in their sessions on this node.
func (s *Service) TellUser(uid int, text string) {
	s.deps.Node.Notify(uid, "", text)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.deps.Node.TellUser(ctx, uid, text)
}
