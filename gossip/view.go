package gossip

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Section indices in peerRec.held and Cluster.local.
const (
	secLeases = iota
	secTelemetry
	numSections
)

func sectionIndex(s string) int {
	if s == sectionTelemetry {
		return secTelemetry
	}
	return secLeases
}

// peerRec is everything this agent knows about another node: what
// memberlist says of it and the newest sections of its state.
type peerRec struct {
	name string
	// member: memberlist lists it (joined, not dead or left).
	member bool
	// node is its memberlist node as last reported (address, versions).
	node    memberlist.Node
	seen    bool
	hasMeta bool
	meta    nodeMeta
	// suspectUntil is set when this agent's prober failed to reach it, or
	// another agent said its probe did (suspectHeard); a suspicion heard stands
	// only until a lease section of the node newer than suspectSeq arrives
	// (the node refutes it; see refute.go).
	suspectUntil time.Time
	suspectHeard bool
	suspectSeq   uint64
	// downSince is when it stopped being a member (or was first heard of
	// without being one); zero while it is a member.
	downSince time.Time

	// leftBoot is the boot that said it left; the leave stands only while
	// no lease section of that boot newer than leftSeq has arrived.
	leftBoot     string
	leftBootedAt int64
	leftSeq      uint64

	held [numSections]*heldSection
	// pending holds sections of a boot newer than the one memberlist
	// reports, until its alive message arrives.
	pending [numSections]*heldSection

	state     NodeState
	hasState  bool
	updatedAt time.Time
	// heardAt is when the node last answered this agent's probe or a newer
	// part of its state arrived: how fresh this agent's picture of it is,
	// even while it has nothing new to say.
	heardAt time.Time
}

// heldSection is a section as received.
type heldSection struct {
	msg  *stateMsg
	wire []byte // the message as received in one packet or stream, if so
	json []byte // msg as JSON, for push/pull, made on first use
}

// currentBoot is the boot memberlist reports for the node, if it is a
// member.
func (r *peerRec) currentBoot() string {
	if r.member && r.hasMeta {
		return r.meta.BootID
	}
	return ""
}

// newer reports whether section a should replace b. Within a boot the
// revision decides, and a full copy replaces a partial one of the same
// revision. Across boots, the boot memberlist currently reports wins (so a
// clock set back between two starts cannot pin an old boot), else the later
// BootedAt.
func newer(a, b *stateMsg, currentBoot string) bool {
	if a.BootID == b.BootID {
		if a.Seq != b.Seq {
			return a.Seq > b.Seq
		}
		return b.Partial && !a.Partial
	}
	if currentBoot != "" {
		if a.BootID == currentBoot {
			return true
		}
		if b.BootID == currentBoot {
			return false
		}
	}
	if a.BootedAt != b.BootedAt {
		return a.BootedAt > b.BootedAt
	}
	return a.BootID > b.BootID
}

// peerLocked returns the record for name, creating it. c.mu is held.
func (x *members) peerLocked(name string) *peerRec {
	c := x.c
	r := c.peers[name]
	if r == nil {
		r = &peerRec{name: name, downSince: time.Now()}
		c.peers[name] = r
	}
	return r
}

// applyState is the one place a section of another node's state is applied,
// whether it came directly, by gossip or by push/pull. A lease section that
// came directly or by gossip and was new is gossiped on.
func (x *members) applyState(m *stateMsg, wire []byte, relay bool) {
	c := x.c
	if m.Node == c.cfg.NodeName {
		// This agent is the authority on its own node; copies of its state
		// (this boot's or an earlier one's) coming back are ignored, and
		// one it did not write is refuted.
		c.stats.duplicates.Add(1)
		c.mem.refuteState(m)
		return
	}
	c.mu.Lock()
	r := c.mem.peerLocked(m.Node)
	applied := c.mem.applyLocked(r, &heldSection{msg: m, wire: wire})
	c.mu.Unlock()
	if !applied {
		return
	}
	c.mem.echo(m, wire)
	if relay && m.Section == sectionLeases {
		if b := c.pub.gossipCopy(m, wire); b != nil {
			c.pub.queueGossip(gossipName(sectionLeases, m.Node), b)
		}
	}
	c.changed()
}

// applyLocked applies h to r if it is newer than what r holds. c.mu is held.
func (x *members) applyLocked(r *peerRec, h *heldSection) bool {
	c := x.c
	m := h.msg
	i := sectionIndex(m.Section)
	if !c.mem.checkSeq(r, m.Section+" section", m.BootID, m.BootedAt, m.Seq) {
		return false
	}
	if r.member && r.hasMeta && m.BootID != r.meta.BootID && m.BootedAt > r.meta.BootedAt.UnixNano() {
		// A boot newer than the one memberlist reports: the node restarted
		// and its alive message has not reached us yet, or another agent is
		// using its name. Hold it until memberlist confirms the boot.
		if p := r.pending[i]; p == nil || newer(m, p.msg, "") {
			r.pending[i] = h
		}
		return false
	}
	if cur := r.held[i]; cur != nil {
		if cur.msg.BootID == m.BootID && cur.msg.Seq == m.Seq && (cur.msg.Partial == m.Partial || !cur.msg.Partial) {
			c.stats.duplicates.Add(1)
			return false
		}
		if !newer(m, cur.msg, r.currentBoot()) {
			c.stats.dropped.Add(1) // stale
			return false
		}
	}
	r.held[i] = h
	r.updatedAt = time.Now()
	r.heardAt = r.updatedAt
	if i == secLeases {
		// A newer lease section of the boot refutes a leave or a suspicion
		// heard of it before (refute.go).
		if r.leftBoot == m.BootID && m.Seq > r.leftSeq {
			r.leftBoot, r.leftBootedAt, r.leftSeq = "", 0, 0
		}
		if r.suspectHeard && m.BootID == r.currentBoot() && m.Seq > r.suspectSeq {
			r.suspectUntil, r.suspectHeard = time.Time{}, false
		}
	}
	r.rebuild()
	return true
}

// leaseSeq is the sequence of the lease section held for boot, 0 if none.
func (r *peerRec) leaseSeq(boot string) uint64 {
	if h := r.held[secLeases]; h != nil && h.msg.BootID == boot {
		return h.msg.Seq
	}
	return 0
}

// rebuild assembles r.state from its sections.
func (r *peerRec) rebuild() {
	ls, ts := r.held[secLeases], r.held[secTelemetry]
	head := ls
	if ts != nil && (head == nil || newer(ts.msg, head.msg, r.currentBoot()) && ts.msg.BootID != head.msg.BootID) {
		head = ts
	}
	if head == nil {
		return
	}
	s := NodeState{
		Node:     r.name,
		BootID:   head.msg.BootID,
		BootedAt: time.Unix(0, head.msg.BootedAt),
	}
	for _, h := range r.held {
		if h != nil && h.msg.BootID == s.BootID {
			s.Version = max(s.Version, h.msg.Version)
		}
	}
	if ls != nil {
		l := ls.msg.Leases
		s.Leases, s.Queue, s.Ended, s.QuietSince = l.Leases, l.Queue, l.Ended, l.QuietSince
	}
	if ts != nil {
		s.Snapshot, s.Usage = ts.msg.Telemetry.Snapshot, ts.msg.Telemetry.Usage
	}
	r.state, r.hasState = s, true
}

// applyLeave records that a node's boot left on purpose; a notice that
// came as a message (wire set) and was new is gossiped on.
func (x *members) applyLeave(m *leaveMsg, wire []byte) {
	c := x.c
	if m.Node == c.cfg.NodeName {
		c.mem.refuteLeave(m)
		return
	}
	c.mu.Lock()
	r := c.mem.peerLocked(m.Node)
	if r.leftBoot == m.BootID && m.Seq <= r.leftSeq {
		c.mu.Unlock()
		c.stats.duplicates.Add(1)
		return
	}
	if m.Seq > 0 && !c.mem.checkSeq(r, "leave", m.BootID, m.BootedAt, m.Seq) {
		c.mu.Unlock()
		return
	}
	seq := m.Seq
	if seq == 0 {
		// An agent of v0.1.0 does not say its last sequence: the leave
		// stands until a newer section than the one held now.
		seq = r.leaseSeq(m.BootID)
	}
	if r.leaseSeq(m.BootID) > seq {
		// The node published after it said it left: a forged leave,
		// already refuted.
		c.mu.Unlock()
		c.stats.dropped.Add(1)
		return
	}
	if cur := r.currentBoot(); cur != "" && cur != m.BootID && m.BootedAt < r.meta.BootedAt.UnixNano() {
		// An earlier boot's leave: the node has come back since.
		c.mu.Unlock()
		c.stats.dropped.Add(1)
		return
	}
	r.leftBoot, r.leftBootedAt, r.leftSeq = m.BootID, m.BootedAt, seq
	c.mu.Unlock()
	if wire != nil {
		c.pub.queueGossip(gossipName("leave", m.Node), wire)
	}
	c.changed()
}

// memberUp handles memberlist's join and update events.
func (x *members) memberUp(n *memberlist.Node) {
	c := x.c
	if n.Name == c.cfg.NodeName {
		return
	}
	meta, err := decodeMeta(n.Meta)
	var relay []*heldSection
	c.mu.Lock()
	r := c.mem.peerLocked(n.Name)
	joined := !r.member
	if joined {
		c.numMembers.Add(1)
	}
	r.member, r.seen = true, true
	r.suspectUntil, r.downSince = time.Time{}, time.Time{}
	r.node = *n
	r.node.Addr = append([]byte(nil), n.Addr...)
	r.node.Meta = append([]byte(nil), n.Meta...)
	if err == nil {
		r.meta, r.hasMeta = meta, true
		for i, p := range r.pending {
			if p != nil && p.msg.BootID == meta.BootID {
				r.pending[i] = nil
				if c.mem.applyLocked(r, p) && p.msg.Section == sectionLeases {
					relay = append(relay, p)
				}
			}
		}
	}
	c.mu.Unlock()
	for _, h := range relay {
		if b := c.pub.gossipCopy(h.msg, h.wire); b != nil {
			c.pub.queueGossip(gossipName(sectionLeases, h.msg.Node), b)
		}
	}
	if joined {
		// A member this agent had not seen: it may have joined through
		// another agent before that one held our state, so it gets our
		// whole state now rather than at the next push/pull.
		node := r.node
		c.req.goTracked(func() { c.pub.sendAll(&node) })
	}
	c.changed()
}

// memberDown handles memberlist's leave event (dead or left) and asks the
// join loop to re-join configured peers.
func (x *members) memberDown(n *memberlist.Node) {
	c := x.c
	if n.Name == c.cfg.NodeName {
		return
	}
	c.mu.Lock()
	r := c.mem.peerLocked(n.Name)
	if r.member {
		c.numMembers.Add(-1)
		r.downSince = time.Now()
	}
	r.member = false
	r.suspectUntil, r.suspectHeard = time.Time{}, false
	// r.pending is kept: a restarted node's state often arrives before
	// memberlist has taken its old boot down and brought the new one up,
	// and memberUp applies it only once memberlist reports that very boot.
	c.mu.Unlock()
	c.changed()
	select {
	case c.rejoinCh <- struct{}{}:
	default:
	}
}

// markSuspect records that this agent's prober could not reach name, and
// tells the others, since memberlist tells only the prober. It shows as
// suspect until memberlist declares it dead, it is heard from again, or
// about two suspicion timeouts pass (then memberlist must have heard it
// refute).
func (x *members) markSuspect(name string) {
	c := x.c
	c.mu.Lock()
	r := c.peers[name]
	ok := r != nil && r.member
	boot := ""
	if ok {
		r.suspectUntil = time.Now().Add(2 * x.suspicionTimeout())
		r.suspectHeard = false
		boot = r.meta.BootID
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	c.changed()
	if boot != "" {
		if b, err := c.codec.encode(msgSuspect, &suspectMsg{Node: name, BootID: boot, By: c.cfg.NodeName, At: time.Now().UnixNano()}); err == nil {
			c.pub.fanout(b)
			c.pub.queueGossip("suspect/"+name, b)
		}
	}
}

// suspicionTimeout is memberlist's: how long a suspect has to refute.
func (x *members) suspicionTimeout() time.Duration {
	n := float64(x.c.numMembers.Load())
	return time.Duration(float64(x.c.cfg.SuspicionMult) * math.Max(1, math.Log10(math.Max(1, n))) * float64(x.c.cfg.ProbeInterval))
}

// applySuspect marks a node suspect because another agent's probe of it
// failed. This agent's own next probe of it clears the mark if it answers,
// as does a newer lease section of it (the node refutes it). A mark that
// is new is gossiped on (wire), so that the node hears of every copy that
// marked an agent, however late it came (refute.go).
func (x *members) applySuspect(m *suspectMsg, wire []byte) {
	c := x.c
	if m.Node == c.cfg.NodeName {
		// memberlist refutes its own suspicion of this node; this one is
		// refuted with a newer lease section.
		c.mem.refuteSuspect(m)
		return
	}
	c.mu.Lock()
	r := c.peers[m.Node]
	ok := r != nil && r.member && r.hasMeta && r.meta.BootID == m.BootID && r.suspectUntil.IsZero()
	if ok {
		r.suspectUntil = time.Now().Add(2 * x.suspicionTimeout())
		r.suspectHeard, r.suspectSeq = true, r.leaseSeq(m.BootID)
	}
	c.mu.Unlock()
	if ok {
		if wire != nil {
			c.pub.queueGossip("suspect/"+m.Node, wire)
		}
		c.changed()
	}
}

// clearSuspect records that name answered.
func (x *members) clearSuspect(name string) {
	c := x.c
	c.mu.Lock()
	r := c.peers[name]
	if r != nil {
		r.heardAt = time.Now()
	}
	was := r != nil && !r.suspectUntil.IsZero()
	if was {
		r.suspectUntil, r.suspectHeard = time.Time{}, false
	}
	c.mu.Unlock()
	if was {
		c.changed()
	}
}

// checkAlive refuses alive messages from nodes that are not dibs agents of
// a compatible wire version (memberlist then ignores them).
func (x *members) checkAlive(n *memberlist.Node) error {
	c := x.c
	meta, err := decodeMeta(n.Meta)
	if err == nil {
		err = meta.compatible(c.protocolRange())
	}
	if err != nil {
		c.stats.dropped.Add(1)
		c.warnOnce("alive/"+n.Name, "gossip: ignoring %s at %s: %v", n.Name, n.Address(), err)
		return fmt.Errorf("refuse %s: %w", n.Name, err)
	}
	return nil
}

// olderBoot reports whether boot a started before boot b (ties broken by id
// so that exactly one of two agents yields).
func olderBoot(a, b nodeMeta) bool {
	if !a.BootedAt.Equal(b.BootedAt) {
		return a.BootedAt.Before(b.BootedAt)
	}
	return a.BootID < b.BootID
}

func (c *Cluster) selfMeta() nodeMeta {
	return nodeMeta{WireMin: minWireVersion, WireMax: wireVersion, BootedAt: c.bootedAt, BootID: c.bootID}
}

func (x *members) duplicateErr(other *memberlist.Node, meta nodeMeta) error {
	c := x.c
	return fmt.Errorf("%w: node name %q is already used by the agent at %s (started %s); give every agent its own name, or stop the other one",
		ErrDuplicateName, c.cfg.NodeName, other.Address(), meta.BootedAt.Format(time.RFC3339))
}

// checkMerge vets a join (ours or another agent's): it is refused when it
// would put two live agents under one name. The one that started later
// records ErrDuplicateName and stops.
func (x *members) checkMerge(peers []*memberlist.Node) error {
	c := x.c
	for _, p := range peers {
		if p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect {
			continue
		}
		meta, err := decodeMeta(p.Meta)
		if err != nil {
			continue // checkAlive refuses it
		}
		if p.Name == c.cfg.NodeName {
			self := c.selfNode.Load()
			if meta.BootID == c.bootID || (self != nil && p.Addr.Equal(self.Addr) && p.Port == self.Port) {
				continue // us, or our earlier boot at our address (a restart)
			}
			if olderBoot(meta, c.selfMeta()) {
				err := c.mem.duplicateErr(p, meta)
				c.fail(err)
				return err
			}
			return fmt.Errorf("refuse join: %q at %s uses this agent's name", p.Name, p.Address())
		}
		c.mu.RLock()
		r := c.peers[p.Name]
		clash := r != nil && r.member && r.hasMeta && r.meta.BootID != meta.BootID &&
			!(r.node.Addr.Equal(p.Addr) && r.node.Port == p.Port)
		var at string
		if clash {
			at = r.node.Address()
		}
		c.mu.RUnlock()
		if clash {
			return fmt.Errorf("refuse join: %q at %s is already the agent at %s", p.Name, p.Address(), at)
		}
	}
	return nil
}

// nameConflict handles memberlist's report of two addresses for one name.
func (x *members) nameConflict(existing, other *memberlist.Node) {
	c := x.c
	if existing.Name != c.cfg.NodeName {
		c.warnOnce("conflict/"+other.Address(), "gossip: %q is claimed by %s and %s; the later one is ignored", existing.Name, existing.Address(), other.Address())
		return
	}
	meta, err := decodeMeta(other.Meta)
	if err == nil && meta.BootID != c.bootID && olderBoot(meta, c.selfMeta()) {
		c.fail(c.mem.duplicateErr(other, meta))
		return
	}
	c.warnOnce("conflict/"+other.Address(), "gossip: the agent at %s uses this node's name %q; it should stop", other.Address(), existing.Name)
}

// warnOnce logs a message once per key.
func (c *Cluster) warnOnce(key, format string, args ...any) {
	c.mu.Lock()
	seen := c.conflict[key]
	if len(c.conflict) >= 1024 {
		clear(c.conflict)
	}
	c.conflict[key] = true
	c.mu.Unlock()
	if !seen {
		c.cfg.Logf(format, args...)
	}
}

// peerView turns a record into a Peer. c.mu is held.
func (r *peerRec) peerView(now time.Time) Peer {
	p := Peer{Name: r.name, HasState: r.hasState, NodeState: r.state, UpdatedAt: r.updatedAt, HeardAt: r.heardAt, DownSince: r.downSince}
	if r.seen {
		p.Addr = r.node.Address()
	}
	switch {
	case r.member && now.Before(r.suspectUntil):
		p.State = StateSuspect
	case r.member:
		p.State = StateAlive
	case r.leftBoot != "" && (r.leftBoot == r.lastBoot() || r.lastBoot() == ""):
		p.State = StateLeft
	default:
		p.State = StateDead
	}
	return p
}

// lastBoot is the node's latest known boot.
func (r *peerRec) lastBoot() string {
	if r.hasMeta {
		return r.meta.BootID
	}
	if r.hasState {
		return r.state.BootID
	}
	return ""
}

func (x *members) selfPeer() Peer {
	c := x.c
	state := StateAlive
	if c.forGood.Load() {
		state = StateLeft
	}
	return Peer{Name: c.cfg.NodeName, Addr: c.localAddr, State: state, HasState: true, NodeState: c.self, UpdatedAt: c.selfAt, HeardAt: c.selfAt}
}

// View returns every node this agent has seen, itself included, sorted by
// name. The NodeStates share memory with the Cluster's view: read them, do
// not modify them.
func (c *Cluster) View() []Peer {
	now := time.Now()
	c.mu.RLock()
	out := make([]Peer, 0, len(c.peers)+1)
	out = append(out, c.mem.selfPeer())
	for _, r := range c.peers {
		if r.seen || r.hasState || r.leftBoot != "" {
			out = append(out, r.peerView(now))
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Peer returns one node of View.
func (c *Cluster) Peer(name string) (Peer, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if name == c.cfg.NodeName {
		return c.mem.selfPeer(), true
	}
	r := c.peers[name]
	if r == nil || !(r.seen || r.hasState || r.leftBoot != "") {
		return Peer{}, false
	}
	return r.peerView(time.Now()), true
}

// target finds the memberlist node to send a request to.
func (x *members) target(name string) (memberlist.Node, error) {
	c := x.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.peers[name]
	if r == nil || !(r.seen || r.hasState) {
		return memberlist.Node{}, fmt.Errorf("%w %q: it has never been a member of this cluster (check the name with `dibs ls`)", ErrUnknownNode, name)
	}
	if !r.member {
		state := r.peerView(time.Now()).State
		return memberlist.Node{}, fmt.Errorf("%w: %s is %s, so no agent can act for it until it is back", ErrNodeDown, name, state)
	}
	return r.node, nil
}
