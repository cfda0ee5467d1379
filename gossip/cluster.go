package gossip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dibs-gpu/dibs/base/lograte"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// NodeState is what one agent publishes about its node.
type NodeState struct {
	Node string
	// BootID is random per agent start; BootedAt orders the starts of one
	// node. Both are the Cluster's (Config.BootID, Config.BootedAt).
	BootID   string
	BootedAt time.Time
	// Version is the agent's counter, carried as data: on other agents it is
	// the highest Version among the sections (leases, telemetry) received
	// from the current boot. Ordering on the wire uses the Cluster's own
	// per-section revisions, so the agent need not bump Version for every
	// change (though it should, to make the number meaningful).
	Version  uint64
	Snapshot nodeprobe.Snapshot
	Leases   []lease.Lease
	// Usage is user → GPU-seconds in the node's ledger.
	Usage map[string]float64
	// Queue is the requests submitted at this node (their source of
	// truth); Ended tells origins how queued runs' leases here ended;
	// QuietSince is when each quiet GPU went quiet, so every board judges
	// idleness with the owner's history. They travel with the leases
	// (urgently) and are validated like them.
	Queue      []queue.QueueEntry
	Ended      []lease.EndedRun
	QuietSince map[int]time.Time
}

// Delegate is implemented by the agent. The Cluster calls it from its own
// goroutines, never while holding one of its locks, so a method may call
// back into the Cluster (View, Publish, Request) — except Leave and
// Shutdown, which wait for those goroutines.
type Delegate interface {
	// LocalState returns this node's current state. It is called from the
	// Cluster's publishing goroutine (once by New, then on Publish and every
	// TelemetryInterval), never from memberlist's goroutines and never from
	// Publish's caller, so the agent may call Publish with its own locks
	// held. It should be fast (a copy under a lock). Node, BootID and
	// BootedAt are overwritten by the Cluster. The Cluster keeps what it
	// returns and never modifies it, so it must not share memory the agent
	// later changes.
	LocalState() NodeState
	// HandleRequest serves a request another agent sent (claim, release,
	// extend, run on this node). It runs on a worker goroutine, up to
	// Config.MaxConcurrentRequests at once, and may block for as long as
	// ctx allows (the requester's timeout, cancelled on Shutdown); from is
	// the requesting node, which the cluster key authenticated; who the
	// request acts for is the agent's business, inside Body.
	HandleRequest(ctx context.Context, from string, req Request) Response
	// ClusterChanged says the merged view changed: a member joined, left,
	// failed or became suspect, or a node's state was replaced. It is
	// called from one goroutine, never concurrently, and calls are
	// coalesced: several changes may produce one call. It must not block;
	// read View to see what changed.
	ClusterChanged()
}

// Request is what one agent asks of another. Body is JSON of the agent's own
// protocol; gossip does not look inside.
type Request struct {
	Op   string
	Body json.RawMessage
}

// Response answers a Request. A refusal (ErrCode set) is a response, not a
// transport error.
type Response struct {
	Body    json.RawMessage
	ErrCode refusal.Code
	ErrMsg  string
}

// Membership states of a Peer. memberlist tracks alive, suspect, dead and
// left but exposes only alive members and join/leave events, so:
//
//   - alive: memberlist lists the node as a member.
//   - suspect: still a member, but this agent's probe of it failed within
//     the last suspicion timeout and it has not answered since. Best
//     effort: memberlist tells only the prober, so other agents may go from
//     alive straight to dead.
//   - dead: not a member (failed, partitioned away, reaped, or stepped
//     out to restart: Restart), or never seen as one (known only from
//     another agent's state).
//   - left: not a member, and its agent said it was leaving for good
//     (Leave).
const (
	StateAlive   = "alive"
	StateSuspect = "suspect"
	StateDead    = "dead"
	StateLeft    = "left"
)

// Peer is one node as this agent sees it. A node that is suspect, dead or
// left keeps its last NodeState, so its leases show as unknown, not free.
type Peer struct {
	Name string
	// Addr is the node's gossip address (host:port), empty if memberlist
	// never reported it.
	Addr string
	// State is one of StateAlive, StateSuspect, StateDead, StateLeft.
	State string
	// HasState says NodeState holds something received from the node.
	HasState  bool
	NodeState NodeState
	// UpdatedAt is when this agent last applied a newer part of the node's
	// state (for this node itself: when LocalState was last read).
	UpdatedAt time.Time
	// HeardAt is when this agent last heard from the node: it answered
	// this agent's failure-detector probe, or a newer part of its state
	// arrived. An alive node's unchanged telemetry is not re-sent (see
	// Config.TelemetryRefresh), so its Snapshot.TakenAt ages while HeardAt
	// stays within a probe round (members × ProbeInterval). Zero when
	// never; for this node, when LocalState was last read.
	HeardAt time.Time
	// DownSince is when this agent saw it stop being a member (or first
	// heard of it without its being one); zero while it is a member.
	DownSince time.Time
}

// Errors a Request may wrap.
var (
	// ErrUnknownNode: the node was never a member of this cluster.
	ErrUnknownNode = errors.New("unknown node")
	// ErrNodeDown: the node is dead or left, so nobody can act for it.
	ErrNodeDown = errors.New("node is down")
	// ErrNoResponse: the request may or may not have been carried out;
	// look at the node's state before retrying.
	ErrNoResponse = errors.New("no response")
	// ErrClosed: the Cluster was shut down.
	ErrClosed = errors.New("gossip cluster is shut down")
	// ErrDuplicateName: another agent already uses this node name.
	ErrDuplicateName = errors.New("duplicate node name")
)

// Cluster is this agent's membership in the dibs cluster: it publishes this
// node's state, holds every node's, and carries requests between agents.
// Its methods are safe for concurrent use.
//
// How state travels:
//
//   - A node's state has two sections, each revised on its own: leases
//     (with the queue entries, ended runs and quiet GPUs) and telemetry (snapshot and usage). A section's revision
//     grows when its content changes; (boot, revision) orders copies, so a
//     newer copy replaces an older one however it arrived.
//   - Publish(true) sends the lease section at once to every member
//     directly — a UDP packet each when it fits (compressed, ~60 bytes per
//     lease plus the note), a TCP stream each otherwise — and queues a
//     gossip copy, which every agent that learns of the change gossips on.
//     A gossip copy must fit one UDP packet (a larger broadcast is silently
//     never sent by memberlist), so when the full section does not fit,
//     the copy carries the leases with their notes trimmed and is marked
//     partial; the full section (direct TCP, or push/pull) replaces it.
//     With 8 leases of 32-character users and 200-character notes of
//     incompressible text the full section is ~1.6 KB and takes the TCP
//     path; typical notes fit UDP. See TestMessageSizes.
//   - Telemetry goes directly to every member, at most every
//     TelemetryInterval and only when it changed (or TelemetryRefresh
//     passed); it is not gossiped.
//   - Push/pull (every PushPullInterval, with one random member, and on
//     every join) carries every section this agent holds for every node
//     and is merged through the same apply as direct sends and gossip, so
//     anything missed is repaired and a joining agent learns everything.
//
// Its methods are grouped by job in files named for it, over the one state
// below: publish.go sends this node's state; request.go carries requests
// between agents; join.go joins and re-joins the configured peers; view.go
// keeps every other node as this agent knows it (membership, state
// sections applied in one place, suspicion, name conflicts); refute.go
// corrects what others hold in this node's name.
type Cluster struct {
	cfg       Config
	d         Delegate
	mlp       atomic.Pointer[memberlist.Memberlist]
	stats     counters
	refusals  *lograte.Limiter // lines of dropped messages, rate-limited per kind and sender
	meta      []byte
	bootID    string
	bootedAt  time.Time
	localAddr string
	// selfNode is this agent's memberlist address, set once memberlist has
	// chosen it; memberlist goroutines read it.
	selfNode atomic.Pointer[memberlist.Node]

	bcast      *memberlist.TransmitLimitedQueue
	numMembers atomic.Int64
	// packetBudget is the largest message that goes as one UDP packet,
	// directly or as a gossip copy.
	packetBudget int

	mu       sync.RWMutex
	peers    map[string]*peerRec
	self     NodeState
	selfAt   time.Time
	conflict map[string]bool // names already warned about

	pubMu sync.Mutex
	local [numSections]localSection

	pending pending
	workers chan struct{}

	urgentCh  chan struct{}
	kickCh    chan struct{}
	changedCh chan struct{}
	rejoinCh  chan struct{}
	stopCh    chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	runMu     sync.Mutex
	stopping  bool // under runMu: no more tracked goroutines
	closeOnce sync.Once
	// startedAt is when New ran, on the monotonic clock: a refutation
	// soon after is this boot correcting what the others held of the
	// last one (a restart), not news (logSink).
	startedAt time.Time
	leaving   atomic.Bool // Leave or Restart called: publish no more
	forGood   atomic.Bool // Leave called: tell the others it left
	done      chan struct{}
	shutErr   error

	errMu   sync.Mutex
	err     error
	started atomic.Bool // New has returned the Cluster

	codec codec

	// seen holds hashes of state messages already handled, so the many
	// gossip copies of one change cost a hash each, not a decode.
	seenMu sync.Mutex
	seen   map[uint64]struct{}

	// testDropState makes the agent drop every state message, so a test
	// can show push/pull repairing what it missed.
	testDropState atomic.Bool
}

// New starts this agent's memberlist on cfg's address, joins the configured
// peers and returns once the first join attempt has finished or a few
// seconds have passed; joining goes on in the background. It calls
// d.LocalState once before joining, so the first push/pull carries this
// node's state. It fails on a bad configuration or key, when it cannot bind,
// and when another agent already uses cfg.NodeName (ErrDuplicateName).
func New(cfg Config, d Delegate) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("gossip config: %w", err)
	}
	if d == nil {
		return nil, errors.New("gossip: nil delegate")
	}
	c := &Cluster{
		cfg:       cfg,
		d:         d,
		startedAt: time.Now(),
		refusals:  lograte.New(0, 0, nil),
		bootID:    cfg.BootID,
		bootedAt:  cfg.BootedAt,
		peers:     make(map[string]*peerRec),
		conflict:  make(map[string]bool),
		seen:      make(map[uint64]struct{}),
		workers:   make(chan struct{}, cfg.MaxConcurrentRequests),
		urgentCh:  make(chan struct{}, 1),
		kickCh:    make(chan struct{}, 1),
		changedCh: make(chan struct{}, 1),
		rejoinCh:  make(chan struct{}, 1),
		stopCh:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	if c.bootID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("gossip: boot id: %w", err)
		}
		c.bootID = hex.EncodeToString(b[:])
	}
	if c.bootedAt.IsZero() {
		c.bootedAt = time.Now()
	}
	c.bootedAt = c.bootedAt.Round(0)
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	c.pending.nextID.Store(uint64(seed[0])<<56 | uint64(seed[1])<<48 | uint64(seed[2])<<40 | uint64(seed[3])<<32)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.meta = nodeMeta{WireMin: minWireVersion, WireMax: wireVersion, BootedAt: c.bootedAt, BootID: c.bootID}.withProtocols(c.protocolRange()).encode()
	c.numMembers.Store(1)
	c.bcast = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(c.numMembers.Load()) },
		RetransmitMult: cfg.RetransmitMult,
	}
	c.packetBudget = packetBudget(cfg)

	sink := &logSink{c: c}
	mc := cfg.memberlistConfig(sink)
	nt, err := bindTransport(cfg, mc)
	if err != nil {
		c.cancel()
		return nil, err
	}
	mc.Transport = newMeteredTransport(nt, &c.stats, cfg)
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
	}
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = mc.BindPort
	}
	if !cfg.Insecure {
		kr, err := memberlist.NewKeyring(nil, cfg.Key)
		if err != nil {
			_ = mc.Transport.Shutdown()
			c.cancel()
			return nil, fmt.Errorf("gossip: cluster key: %w", err)
		}
		mc.Keyring = kr
	}
	mc.Delegate = &delegate{c}
	mc.Events = &events{c}
	mc.Alive = &alive{c}
	mc.Conflict = &conflict{c}
	mc.Merge = &merge{c}
	mc.Ping = &ping{c}

	// Our own sections exist before anyone can ask for them.
	c.refreshLocal(time.Now(), false)

	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = mc.Transport.Shutdown()
		c.cancel()
		return nil, fmt.Errorf("gossip: start memberlist on %s:%d: %w", cfg.BindAddr, mc.BindPort, err)
	}
	c.mlp.Store(ml)
	self := ml.LocalNode()
	c.selfNode.Store(&memberlist.Node{Name: self.Name, Addr: append(net.IP(nil), self.Addr...), Port: self.Port})
	c.localAddr = self.Address()

	c.wg.Add(2)
	go c.notifyLoop()
	go c.sendLoop()

	joined := 0
	if len(cfg.Join) > 0 {
		joined = c.joinOnce(c.missingPeers(), 2*time.Second+cfg.TCPTimeout, true)
		if err := c.Err(); err != nil {
			_ = c.Shutdown()
			return nil, err
		}
	}
	c.wg.Add(1)
	go c.joinLoop(joined > 0)
	c.started.Store(true)
	if err := c.Err(); err != nil {
		// A duplicate found while New was finishing.
		_ = c.Shutdown()
		return nil, err
	}
	return c, nil
}

// packetBudget is the largest dibs message that still fits one UDP packet
// of cfg.PacketSize, as a direct send or as a gossip copy: memberlist adds a
// compound header (2) and per-message framing (2 + 1 for a user message), a
// CRC (5), encryption (29: version, nonce, GCM tag) and the label (2 + its
// length). Direct sends use the same budget so that a copy received as one
// packet can be gossiped on as it is.
func packetBudget(cfg Config) int {
	b := cfg.PacketSize - 2 - 2 - 1 - 5 - (2 + len(cfg.ClusterName))
	if !cfg.Insecure {
		b -= 29
	}
	return b
}

// bindTransport opens the UDP and TCP listeners. A free port (BindPort 0) is
// retried a few times, as memberlist does: binding UDP and TCP to the same
// free port races with other processes.
func bindTransport(cfg Config, mc *memberlist.Config) (*memberlist.NetTransport, error) {
	nc := &memberlist.NetTransportConfig{
		BindAddrs: []string{cfg.BindAddr},
		BindPort:  cfg.BindPort,
		Logger:    mc.Logger,
	}
	tries := 1
	if cfg.BindPort == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip: bind %s:%d: %w (is another agent running on this port?)", cfg.BindAddr, cfg.BindPort, err)
}

// list is the memberlist, nil until New has created it.
func (c *Cluster) list() *memberlist.Memberlist { return c.mlp.Load() }

func (c *Cluster) closed() bool {
	select {
	case <-c.stopCh:
		return true
	default:
		return false
	}
}

// Restart steps out of the cluster for a moment, as an agent does when it
// restarts (an upgrade, an admin's `systemctl restart`): memberlist's leave,
// so the others see at once that it is away, but no leave notice, so they
// show it as dead — restarting, while within the grace — not as left, and
// keep what it holds. It waits at most timeout (≤ 0 means 5 s). Call
// Shutdown afterwards.
func (c *Cluster) Restart(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ml := c.list()
	if ml == nil || c.closed() {
		return ErrClosed
	}
	if c.leaving.Swap(true) {
		return nil
	}
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("step out of the cluster: %w", err)
	}
	c.changed()
	return nil
}

// Leave tells the other agents this one is leaving for good, so they show
// it as left rather than dead (or restarting): a leave notice to every
// member directly and by gossip, then memberlist's leave. It waits at most
// timeout (≤ 0 means 5 s). Call Shutdown afterwards.
func (c *Cluster) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ml := c.list()
	if ml == nil || c.closed() {
		return ErrClosed
	}
	c.forGood.Store(true)
	if c.leaving.Swap(true) {
		return nil
	}
	deadline := time.Now().Add(timeout)
	msg, err := c.codec.encode(msgLeave, &leaveMsg{Node: c.cfg.NodeName, BootID: c.bootID, BootedAt: c.bootedAt.UnixNano(), Seq: c.lastSeq(secLeases)})
	if err != nil {
		return fmt.Errorf("leave cluster: %w", err)
	}
	c.queueGossip(gossipName("leave", c.cfg.NodeName), msg)
	done := make(chan struct{})
	go c.sendReliableAll(ml, c.memberNodes(), msg, done)
	select {
	case <-done:
	case <-time.After(timeout / 2):
	}
	if err := ml.Leave(time.Until(deadline)); err != nil {
		return fmt.Errorf("leave cluster: %w", err)
	}
	c.changed()
	return nil
}

// Shutdown stops gossiping without saying goodbye (the others will see this
// node as dead; call Leave first to be shown as left), fails pending
// requests with ErrClosed and waits for the Cluster's goroutines. It is safe
// to call more than once.
func (c *Cluster) Shutdown() error {
	c.closeOnce.Do(func() {
		c.setStopping()
		close(c.stopCh)
		c.cancel()
		if ml := c.list(); ml != nil {
			if err := ml.Shutdown(); err != nil {
				c.shutErr = fmt.Errorf("gossip shutdown: %w", err)
			}
		}
		c.wg.Wait()
		close(c.done)
	})
	<-c.done
	return c.shutErr
}

// setStopping says no more goroutines may be tracked (goTracked).
func (c *Cluster) setStopping() {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	c.stopping = true
}

// Done is closed once the Cluster has shut down, by Shutdown or by itself
// (see Err).
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Err says why the Cluster shut itself down: another agent with this node's
// name was there first (ErrDuplicateName). Nil otherwise.
func (c *Cluster) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// recordErr keeps err as why the Cluster stops, unless a reason is kept
// already; it says whether err is the first.
func (c *Cluster) recordErr(err error) bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = err
	return true
}

// fail records why the Cluster must stop and stops it in the background.
func (c *Cluster) fail(err error) {
	if !c.recordErr(err) {
		return
	}
	c.cfg.Logf("gossip: %v; leaving the cluster", err)
	if c.started.Load() { // else New returns the error
		go func() {
			_ = c.Shutdown()
			c.d.ClusterChanged()
		}()
	}
}

// LocalAddr is the address (host:port) the other agents reach this one at.
func (c *Cluster) LocalAddr() string { return c.localAddr }

// BootID identifies this start of the agent.
func (c *Cluster) BootID() string { return c.bootID }

// Stats returns the counters so far.
func (c *Cluster) Stats() Stats { return c.stats.snapshot() }
