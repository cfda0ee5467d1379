package gossip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
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
	Queue      []lease.QueueEntry
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
	ErrCode lease.Code
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
//   - dead: not a member (failed, partitioned away, or reaped), or never
//     seen as one (known only from another agent's state).
//   - left: not a member, and its agent said it was leaving (Leave).
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
//     (with Extra) and telemetry (snapshot and usage). A section's revision
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
type Cluster struct {
	cfg       Config
	d         Delegate
	mlp       atomic.Pointer[memberlist.Memberlist]
	stats     counters
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

	reqMu   sync.Mutex
	reqs    map[uint64]*pendingRequest
	nextID  atomic.Uint64
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
	leaving   atomic.Bool
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

// localSection is one section of this node's own state as last published.
type localSection struct {
	content []byte // what changes are detected on
	msg     *stateMsg
	wire    []byte // the encoded full section
	gossip  []byte // the copy that fits a UDP packet; nil if none does
	json    []byte // msg as push/pull carries it
	sentSeq uint64
	madeAt  time.Time
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
		bootID:    cfg.BootID,
		bootedAt:  cfg.BootedAt,
		peers:     make(map[string]*peerRec),
		conflict:  make(map[string]bool),
		reqs:      make(map[uint64]*pendingRequest),
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
	c.nextID.Store(uint64(seed[0])<<56 | uint64(seed[1])<<48 | uint64(seed[2])<<40 | uint64(seed[3])<<32)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.meta = nodeMeta{WireMin: minWireVersion, WireMax: wireVersion, BootedAt: c.bootedAt, BootID: c.bootID, Protocol: c.cfg.Protocol}.encode()
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
	mc.Transport = newMeteredTransport(nt, &c.stats, cfg.testPacketLoss)
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
		joined = c.joinOnce(c.missingPeers(), 2*time.Second+cfg.TCPTimeout)
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

// Publish says this node's state changed. Urgent changes (leases, Extra)
// are sent to every live member at once, plus gossip; the rest (telemetry)
// goes at most every TelemetryInterval, and only if it changed. Publish only
// signals the Cluster's publishing goroutine, which calls LocalState: it
// never blocks and may be called with the agent's locks held.
func (c *Cluster) Publish(urgent bool) {
	ch := c.kickCh
	if urgent {
		ch = c.urgentCh
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sendLoop is the publishing goroutine: the only caller of LocalState after
// New, and the sender of this node's sections.
func (c *Cluster) sendLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.TelemetryInterval)
	defer tick.Stop()
	var lastTelemetry time.Time
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.urgentCh:
			c.publish(time.Now(), false)
		case <-c.kickCh:
			if now := time.Now(); now.Sub(lastTelemetry) >= c.cfg.TelemetryInterval {
				c.publish(now, true)
				lastTelemetry = now
			}
		case now := <-tick.C:
			if now.Sub(lastTelemetry) >= c.cfg.TelemetryInterval/2 {
				c.publish(now, true)
				lastTelemetry = now
			}
		}
	}
}

// publish reads LocalState and sends the lease section if it changed (and
// the telemetry section too, when telemetry is due).
func (c *Cluster) publish(now time.Time, telemetry bool) {
	if c.leaving.Load() || c.closed() {
		return
	}
	c.refreshLocal(now, telemetry)
	c.pubMu.Lock()
	ls, ts := &c.local[secLeases], &c.local[secTelemetry]
	var sendLeases, sendTelemetry []byte
	var gossipCopy []byte
	if ls.msg != nil && ls.sentSeq != ls.msg.Seq {
		ls.sentSeq = ls.msg.Seq
		sendLeases, gossipCopy = ls.wire, ls.gossip
	}
	if telemetry && ts.msg != nil && ts.sentSeq != ts.msg.Seq {
		ts.sentSeq = ts.msg.Seq
		sendTelemetry = ts.wire
	}
	c.pubMu.Unlock()
	if sendLeases != nil {
		c.seenBefore(sendLeases) // our own copies coming back are not news
		if gossipCopy != nil {
			c.seenBefore(gossipCopy)
			c.queueGossip(gossipName(sectionLeases, c.cfg.NodeName), gossipCopy)
		}
		c.fanout(sendLeases)
	}
	if sendTelemetry != nil {
		c.fanout(sendTelemetry)
	}
}

// refreshLocal reads LocalState and revises this node's sections whose
// content changed; with refresh, the telemetry section is also revised when
// TelemetryRefresh has passed, so Snapshot.TakenAt on other agents never
// lags far behind.
func (c *Cluster) refreshLocal(now time.Time, refresh bool) {
	st := c.d.LocalState()
	st.Node, st.BootID, st.BootedAt = c.cfg.NodeName, c.bootID, c.bootedAt
	st.Leases, st.Queue, st.Ended = c.sanitize(st.Leases, st.Queue, st.Ended)

	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	ls := &leaseSection{Leases: st.Leases, Queue: st.Queue, Ended: st.Ended, QuietSince: st.QuietSince}
	c.revise(secLeases, now, false, &stateMsg{Section: sectionLeases, Leases: ls, Version: st.Version}, ls)

	ts := &telemetrySection{Snapshot: st.Snapshot, Usage: st.Usage}
	cmp := *ts
	cmp.Snapshot.TakenAt = time.Time{}
	due := refresh && now.Sub(c.local[secTelemetry].madeAt) >= c.cfg.TelemetryRefresh
	c.revise(secTelemetry, now, due, &stateMsg{Section: sectionTelemetry, Telemetry: ts, Version: st.Version}, &cmp)

	c.mu.Lock()
	c.self, c.selfAt = st, now
	c.mu.Unlock()
}

// sanitize keeps an agent bug in one lease (or queue entry) from stopping
// every lease of this node from being published: text the other agents
// would refuse is escaped, anything else they would refuse is left out,
// each with a warning.
func (c *Cluster) sanitize(leases []lease.Lease, queue []lease.QueueEntry, ended []lease.EndedRun) ([]lease.Lease, []lease.QueueEntry, []lease.EndedRun) {
	out := make([]lease.Lease, 0, len(leases))
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		if l.Node == "" {
			l.Node = c.cfg.NodeName
		}
		l.Mono = nil
		if err := l.CheckText(); err != nil {
			// A lease granted before notes were held to plain text (or an
			// agent bug): publish it with the text escaped, not hidden,
			// since hiding it would show its GPUs as free elsewhere.
			c.warnOnce("text/"+l.ID, "gossip: lease %q: %v; publishing it escaped", l.ID, err)
			l.EachString(func(_ string, p *string) { *p = termsafe.String(*p) })
		}
		if err := validateLease(c.cfg.NodeName, &l, seen); err != nil {
			c.warnOnce("lease/"+err.Error(), "gossip: not publishing a lease: %v", err)
			continue
		}
		out = append(out, l)
		if len(out) == maxLeases {
			c.warnOnce("lease/max", "gossip: publishing only the first %d leases", maxLeases)
			break
		}
	}
	q := make([]lease.QueueEntry, 0, len(queue))
	for _, e := range queue {
		if err := validateEntry(c.cfg.NodeName, &e); err != nil {
			c.warnOnce("entry/"+err.Error(), "gossip: not publishing a queue entry: %v", err)
			continue
		}
		if q = append(q, e); len(q) == maxEntries {
			break
		}
	}
	x := make([]lease.EndedRun, 0, len(ended))
	for _, r := range ended {
		if err := r.Validate(); err != nil {
			continue
		}
		if x = append(x, r); len(x) == maxEntries {
			break
		}
	}
	return out, q, x
}

// revise makes m the new revision of section i if its content differs from
// the last one (or force). The caller holds pubMu.
func (c *Cluster) revise(i int, now time.Time, force bool, m *stateMsg, content any) {
	ls := &c.local[i]
	b, err := json.Marshal(content)
	if err != nil {
		c.cfg.Logf("gossip: encode this node's %s: %v", m.Section, err)
		return
	}
	if !force && ls.msg != nil && string(b) == string(ls.content) {
		return
	}
	m.Node, m.BootID, m.BootedAt = c.cfg.NodeName, c.bootID, c.bootedAt.UnixNano()
	m.Seq = 1
	if ls.msg != nil {
		m.Seq = ls.msg.Seq + 1
	}
	if err := m.validate(); err != nil {
		// The agent handed us something no other agent would accept;
		// sending it would only get it dropped everywhere.
		c.warnOnce("revise/"+err.Error(), "gossip: not publishing this node's %s: %v", m.Section, err)
		return
	}
	wire, err := c.codec.encode(msgState, m)
	if err != nil {
		c.cfg.Logf("gossip: not publishing this node's %s: %v", m.Section, err)
		return
	}
	js, _ := json.Marshal(m)
	*ls = localSection{content: b, msg: m, wire: wire, json: js, sentSeq: ls.sentSeq, madeAt: now}
	if m.Section == sectionLeases {
		ls.gossip = c.gossipCopy(m, wire)
	}
}

// gossipCopy is the copy of a lease section that fits one UDP packet: the
// message itself if it fits, else the leases with their notes trimmed
// (partial), else nil.
func (c *Cluster) gossipCopy(m *stateMsg, wire []byte) []byte {
	if wire != nil && len(wire) <= c.packetBudget {
		return wire
	}
	if m.Section != sectionLeases {
		return nil
	}
	for _, keep := range []int{120, 60, 24, 0} {
		p := trimNotes(m, keep)
		b, err := c.codec.encode(msgState, p)
		if err == nil && len(b) <= c.packetBudget {
			return b
		}
	}
	return nil
}

// trimNotes is a partial copy of a lease section whose notes are cut to at
// most keep bytes (at a character boundary).
func trimNotes(m *stateMsg, keep int) *stateMsg {
	p := *m
	p.Partial = true
	ls := *m.Leases
	ls.Leases = make([]lease.Lease, len(m.Leases.Leases))
	for i, l := range m.Leases.Leases {
		if len(l.Note) > keep {
			n := keep
			for n > 0 && n < len(l.Note) && l.Note[n]&0xC0 == 0x80 {
				n--
			}
			l.Note = l.Note[:n]
		}
		ls.Leases[i] = l
	}
	p.Leases = &ls
	return &p
}

func gossipName(section, node string) string { return section + "/" + node }

func (c *Cluster) queueGossip(name string, msg []byte) {
	c.bcast.QueueBroadcast(&broadcast{name: name, msg: msg})
}

// fanout sends msg to every member but this one: a UDP packet each when it
// fits, else a TCP stream each, in parallel, in the background.
func (c *Cluster) fanout(msg []byte) {
	ml := c.list()
	if ml == nil {
		return
	}
	targets := c.memberNodes()
	if len(targets) == 0 {
		return
	}
	if len(msg) <= c.packetBudget {
		for i := range targets {
			if err := ml.SendBestEffort(&targets[i], msg); err != nil {
				c.cfg.Logf("gossip: send state to %s: %v", targets[i].Name, err)
				continue
			}
			c.stats.messagesOut.Add(1)
		}
		return
	}
	go c.sendReliableAll(ml, targets, msg, nil)
}

// sendReliableAll sends msg over TCP to every target, at most 16 at a time,
// and closes done (if given) when all have finished.
func (c *Cluster) sendReliableAll(ml *memberlist.Memberlist, targets []memberlist.Node, msg []byte, done chan struct{}) {
	if done != nil {
		defer close(done)
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func(n *memberlist.Node) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := ml.SendReliable(n, msg); err != nil {
				c.cfg.Logf("gossip: send to %s: %v", n.Name, err)
				return
			}
			c.stats.messagesOut.Add(1)
		}(&targets[i])
	}
	wg.Wait()
}

// notifyLoop calls ClusterChanged, one call at a time, coalescing.
func (c *Cluster) notifyLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.changedCh:
			c.d.ClusterChanged()
		}
	}
}

// changed schedules a ClusterChanged call.
func (c *Cluster) changed() {
	select {
	case c.changedCh <- struct{}{}:
	default:
	}
}

// handleMessage dispatches a dibs message from NotifyMsg. b is owned.
func (c *Cluster) handleMessage(b []byte) {
	c.stats.messagesIn.Add(1)
	if len(b) == 0 {
		c.stats.dropped.Add(1)
		return
	}
	var err error
	switch messageType(b[0]) {
	case msgState:
		if c.testDropState.Load() {
			c.stats.dropped.Add(1)
			return
		}
		if c.seenBefore(b) {
			c.stats.duplicates.Add(1)
			return
		}
		var m *stateMsg
		if m, err = c.codec.decodeState(b); err == nil {
			c.applyState(m, b, true)
		}
	case msgLeave:
		var m *leaveMsg
		if m, err = c.codec.decodeLeave(b); err == nil {
			c.applyLeave(m, b)
		}
	case msgRequest:
		var m *requestMsg
		if m, err = c.codec.decodeRequest(b); err == nil {
			c.serve(m)
		}
	case msgResponse:
		var m *responseMsg
		if m, err = c.codec.decodeResponse(b); err == nil {
			c.deliver(m)
		}
	default:
		err = wireErrorf("unexpected message type %d outside push/pull", b[0])
	}
	if err != nil {
		c.stats.dropped.Add(1)
		c.cfg.Logf("gossip: dropped a message: %v", err)
	}
}

// seenBefore reports whether this exact state message was handled before,
// and remembers it. Gossip copies are relayed byte for byte, so this catches
// nearly every duplicate; the set is cleared when it grows large, which only
// costs a few decodes.
func (c *Cluster) seenBefore(b []byte) bool {
	h := fnv.New64a()
	h.Write(b)
	k := h.Sum64()
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if _, ok := c.seen[k]; ok {
		return true
	}
	if len(c.seen) >= 8192 {
		clear(c.seen)
	}
	c.seen[k] = struct{}{}
	return false
}

// pushPullState is LocalState for push/pull: this node's sections, every
// section held for other nodes, and the leaves known.
func (c *Cluster) pushPullState() []byte {
	pp := pushPullMsg{From: c.cfg.NodeName}
	c.pubMu.Lock()
	for i := range c.local {
		if js := c.local[i].json; js != nil {
			pp.States = append(pp.States, js)
		}
	}
	c.pubMu.Unlock()
	if c.leaving.Load() {
		pp.Left = append(pp.Left, leaveMsg{Node: c.cfg.NodeName, BootID: c.bootID, BootedAt: c.bootedAt.UnixNano()})
	}
	c.mu.Lock()
	for _, r := range c.peers {
		for _, h := range r.held {
			if h == nil {
				continue
			}
			if h.json == nil {
				h.json, _ = json.Marshal(h.msg)
			}
			pp.States = append(pp.States, h.json)
		}
		if r.leftBoot != "" {
			pp.Left = append(pp.Left, leaveMsg{Node: r.name, BootID: r.leftBoot, BootedAt: r.leftBootedAt})
		}
	}
	c.mu.Unlock()
	b, err := c.codec.encode(msgPushPull, &pp)
	if err != nil {
		c.cfg.Logf("gossip: push/pull: %v", err)
		return nil
	}
	c.stats.messagesOut.Add(1)
	return b
}

// mergePushPull applies another agent's push/pull state.
func (c *Cluster) mergePushPull(buf []byte) {
	c.stats.messagesIn.Add(1)
	pp, states, err := c.codec.decodePushPull(buf)
	if err != nil {
		c.stats.dropped.Add(1)
		c.cfg.Logf("gossip: dropped push/pull state: %v", err)
		return
	}
	for _, s := range states {
		c.applyState(s, nil, false)
	}
	for i := range pp.Left {
		c.applyLeave(&pp.Left[i], nil)
	}
}

// Leave tells the other agents this one is leaving, so they show it as
// left rather than dead: a leave notice to every member directly and by
// gossip, then memberlist's leave. It waits at most timeout (≤ 0 means 5
// s). Call Shutdown afterwards.
func (c *Cluster) Leave(timeout time.Duration) error {
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
	deadline := time.Now().Add(timeout)
	msg, err := c.codec.encode(msgLeave, &leaveMsg{Node: c.cfg.NodeName, BootID: c.bootID, BootedAt: c.bootedAt.UnixNano()})
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
		c.runMu.Lock()
		c.stopping = true
		c.runMu.Unlock()
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

// fail records why the Cluster must stop and stops it in the background.
func (c *Cluster) fail(err error) {
	c.errMu.Lock()
	first := c.err == nil
	if first {
		c.err = err
	}
	c.errMu.Unlock()
	if !first {
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

// memberNodes copies the memberlist nodes of every member but this one.
func (c *Cluster) memberNodes() []memberlist.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]memberlist.Node, 0, len(c.peers))
	for _, r := range c.peers {
		if r.member {
			out = append(out, r.node)
		}
	}
	return out
}

// joinOnce joins the given peers in parallel and returns how many answered,
// waiting at most wait.
func (c *Cluster) joinOnce(peers []string, wait time.Duration) int {
	ml := c.list()
	if ml == nil || len(peers) == 0 {
		return 0
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ml.Join([]string{p}); err != nil {
				if !c.closed() && c.Err() == nil {
					c.cfg.Logf("gossip: join %s: %v", p, err)
				}
				return
			}
			ok.Add(1)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	case <-c.stopCh:
	}
	return int(ok.Load())
}

// joinLoop keeps the configured peers joined: with backoff until some peer
// answers, then every RejoinInterval for configured peers that are not
// alive members, and shortly after every membership loss.
func (c *Cluster) joinLoop(up bool) {
	defer c.wg.Done()
	if len(c.cfg.Join) == 0 {
		return
	}
	backoff := time.Second
	timer := time.NewTimer(c.nextJoinWait(up, &backoff))
	defer timer.Stop()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.rejoinCh:
			// Let a burst of losses settle into one attempt.
			select {
			case <-c.stopCh:
				return
			case <-time.After(time.Second):
			}
		case <-timer.C:
		}
		if missing := c.missingPeers(); len(missing) > 0 {
			c.stats.rejoins.Add(1)
			if c.joinOnce(missing, c.cfg.TCPTimeout+time.Second) > 0 {
				up = true
			}
			if c.closed() {
				return
			}
		}
		if c.numMembers.Load() > 1 {
			up = true
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(c.nextJoinWait(up, &backoff))
	}
}

func (c *Cluster) nextJoinWait(up bool, backoff *time.Duration) time.Duration {
	if up {
		*backoff = time.Second
		return c.cfg.RejoinInterval
	}
	w := *backoff
	*backoff = min(2**backoff, 30*time.Second)
	return w
}

// missingPeers lists the configured peers that are not alive members.
func (c *Cluster) missingPeers() []string {
	alive := make(map[string]bool)
	c.mu.RLock()
	for _, r := range c.peers {
		if r.member {
			alive[r.node.Address()] = true
		}
	}
	c.mu.RUnlock()
	self := c.localAddr
	var out []string
	for _, p := range c.cfg.Join {
		p, err := normalizePeer(p)
		if err != nil {
			continue
		}
		host, port, _ := net.SplitHostPort(p)
		ips := []string{host}
		if net.ParseIP(host) == nil {
			ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			addrs, err := net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			if err != nil {
				out = append(out, p) // let memberlist report it
				continue
			}
			ips = addrs
		}
		up := false
		for _, ip := range ips {
			a := net.JoinHostPort(net.ParseIP(ip).String(), port)
			if alive[a] || a == self {
				up = true
				break
			}
		}
		if !up {
			out = append(out, p)
		}
	}
	return out
}
