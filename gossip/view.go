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
func (c *Cluster) peerLocked(name string) *peerRec {
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
func (c *Cluster) applyState(m *stateMsg, wire []byte, relay bool) {
	if m.Node == c.cfg.NodeName {
		// This agent is the authority on its own node; copies of its state
		// (this boot's or an earlier one's) coming back are ignored, and
		// one it did not write is refuted.
		c.stats.duplicates.Add(1)
		c.refuteState(m)
		return
	}
	if !c.applyHeld(m, wire) {
		return
	}
	c.echo(m, wire)
	if relay && m.Section == sectionLeases {
		if b := c.gossipCopy(m, wire); b != nil {
			c.queueGossip(gossipName(sectionLeases, m.Node), b)
		}
	}
	c.changed()
}

// applyHeld applies section m of another node, as it came (wire), and
// says whether it was newer than what this agent held.
func (c *Cluster) applyHeld(m *stateMsg, wire []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applyLocked(c.peerLocked(m.Node), &heldSection{msg: m, wire: wire})
}

// applyLocked applies h to r if it is newer than what r holds. c.mu is held.
func (c *Cluster) applyLocked(r *peerRec, h *heldSection) bool {
	m := h.msg
	i := sectionIndex(m.Section)
	if !c.checkSeq(r, m.Section+" section", m.BootID, m.BootedAt, m.Seq) {
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
func (c *Cluster) applyLeave(m *leaveMsg, wire []byte) {
	if m.Node == c.cfg.NodeName {
		c.refuteLeave(m)
		return
	}
	if !c.recordLeave(m) {
		return
	}
	if wire != nil {
		c.queueGossip(gossipName("leave", m.Node), wire)
	}
	c.changed()
}

// recordLeave records m on its node's record and says whether it was new:
// not a duplicate, a forged leave or an earlier boot's.
func (c *Cluster) recordLeave(m *leaveMsg) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peerLocked(m.Node)
	if r.leftBoot == m.BootID && m.Seq <= r.leftSeq {
		c.stats.duplicates.Add(1)
		return false
	}
	if m.Seq > 0 && !c.checkSeq(r, "leave", m.BootID, m.BootedAt, m.Seq) {
		return false
	}
	seq := m.Seq
	if seq == 0 && r.hasMeta && r.meta.BootID == m.BootID && r.meta.Version >= 3 {
		// Only v0.1.0 (meta version 2) leaves without a sequence; one
		// about a later agent is forged. It would otherwise stand at what
		// is held when it arrives: a copy that reaches a node after the
		// node named refuted it elsewhere, or while it is away (a
		// restart), would make it left.
		c.stats.dropped.Add(1)
		return false
	}
	if seq == 0 {
		// An agent of v0.1.0 does not say its last sequence: the leave
		// stands until a newer section than the one held now.
		seq = r.leaseSeq(m.BootID)
	}
	if r.leaseSeq(m.BootID) > seq {
		// The node published after it said it left: a forged leave,
		// already refuted.
		c.stats.dropped.Add(1)
		return false
	}
	if cur := r.currentBoot(); cur != "" && cur != m.BootID && m.BootedAt < r.meta.BootedAt.UnixNano() {
		// An earlier boot's leave: the node has come back since.
		c.stats.dropped.Add(1)
		return false
	}
	r.leftBoot, r.leftBootedAt, r.leftSeq = m.BootID, m.BootedAt, seq
	return true
}

// memberUp handles memberlist's join and update events.
func (c *Cluster) memberUp(n *memberlist.Node) {
	if n.Name == c.cfg.NodeName {
		return
	}
	node, joined, relay := c.recordUp(n)
	for _, h := range relay {
		if b := c.gossipCopy(h.msg, h.wire); b != nil {
			c.queueGossip(gossipName(sectionLeases, h.msg.Node), b)
		}
	}
	if joined {
		// A member this agent had not seen: it may have joined through
		// another agent before that one held our state, so it gets our
		// whole state now rather than at the next push/pull.
		c.goTracked(func() { c.sendAll(&node) })
	}
	c.changed()
}

// recordUp records n as a member, with the sections held back until
// memberlist reported its boot applied now; it returns the member as
// recorded, whether it was not a member before, and the lease sections
// applied that are to be gossiped on.
func (c *Cluster) recordUp(n *memberlist.Node) (node memberlist.Node, joined bool, relay []*heldSection) {
	meta, err := decodeMeta(n.Meta)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peerLocked(n.Name)
	joined = !r.member
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
				if c.applyLocked(r, p) && p.msg.Section == sectionLeases {
					relay = append(relay, p)
				}
			}
		}
	}
	return r.node, joined, relay
}

// memberDown handles memberlist's leave event (dead or left) and asks the
// join loop to re-join configured peers.
func (c *Cluster) memberDown(n *memberlist.Node) {
	if n.Name == c.cfg.NodeName {
		return
	}
	c.recordDown(n.Name)
	c.changed()
	select {
	case c.rejoinCh <- struct{}{}:
	default:
	}
}

// recordDown records that name is no longer a member.
func (c *Cluster) recordDown(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peerLocked(name)
	if r.member {
		c.numMembers.Add(-1)
		r.downSince = time.Now()
	}
	r.member = false
	r.suspectUntil, r.suspectHeard = time.Time{}, false
	// r.pending is kept: a restarted node's state often arrives before
	// memberlist has taken its old boot down and brought the new one up,
	// and memberUp applies it only once memberlist reports that very boot.
}

// markSuspect records that this agent's prober could not reach name, and
// tells the others, since memberlist tells only the prober. It shows as
// suspect until memberlist declares it dead, it is heard from again, or
// about two suspicion timeouts pass (then memberlist must have heard it
// refute).
func (c *Cluster) markSuspect(name string) {
	boot, ok := c.recordSuspect(name)
	if !ok {
		return
	}
	c.changed()
	if boot != "" {
		if b, err := c.codec.encode(msgSuspect, &suspectMsg{Node: name, BootID: boot, By: c.cfg.NodeName, At: time.Now().UnixNano()}); err == nil {
			c.fanout(b)
			c.queueGossip("suspect/"+name, b)
		}
	}
}

// recordSuspect marks name suspect on this agent's own word, if it is a
// member; boot is its boot as memberlist reports it (empty: unknown).
func (c *Cluster) recordSuspect(name string) (boot string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peers[name]
	if r == nil || !r.member {
		return "", false
	}
	r.suspectUntil = time.Now().Add(2 * c.suspicionTimeout())
	r.suspectHeard = false
	return r.meta.BootID, true
}

// suspicionTimeout is memberlist's: how long a suspect has to refute.
func (c *Cluster) suspicionTimeout() time.Duration {
	n := float64(c.numMembers.Load())
	return time.Duration(float64(c.cfg.SuspicionMult) * math.Max(1, math.Log10(math.Max(1, n))) * float64(c.cfg.ProbeInterval))
}

// applySuspect marks a node suspect because another agent's probe of it
// failed. This agent's own next probe of it clears the mark if it answers,
// as does a newer lease section of it (the node refutes it). A mark that
// is new is gossiped on (wire), so that the node hears of every copy that
// marked an agent, however late it came (refute.go).
func (c *Cluster) applySuspect(m *suspectMsg, wire []byte) {
	if m.Node == c.cfg.NodeName {
		// memberlist refutes its own suspicion of this node; this one is
		// refuted with a newer lease section.
		c.refuteSuspect(m)
		return
	}
	if c.recordSuspectHeard(m) {
		if wire != nil {
			c.queueGossip("suspect/"+m.Node, wire)
		}
		c.changed()
	}
}

// recordSuspectHeard marks m's node suspect on another agent's word, if
// it is a member of that boot not marked yet; it says whether it marked it.
func (c *Cluster) recordSuspectHeard(m *suspectMsg) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peers[m.Node]
	if r == nil || !r.member || !r.hasMeta || r.meta.BootID != m.BootID || !r.suspectUntil.IsZero() {
		return false
	}
	r.suspectUntil = time.Now().Add(2 * c.suspicionTimeout())
	r.suspectHeard, r.suspectSeq = true, r.leaseSeq(m.BootID)
	return true
}

// clearSuspect records that name answered.
func (c *Cluster) clearSuspect(name string) {
	if c.recordHeard(name) {
		c.changed()
	}
}

// recordHeard records that name answered now, and says whether that
// cleared a suspicion of it.
func (c *Cluster) recordHeard(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.peers[name]
	if r == nil {
		return false
	}
	r.heardAt = time.Now()
	if r.suspectUntil.IsZero() {
		return false
	}
	r.suspectUntil, r.suspectHeard = time.Time{}, false
	return true
}

// checkAlive refuses alive messages from nodes that are not dibs agents of
// a compatible wire version (memberlist then ignores them).
func (c *Cluster) checkAlive(n *memberlist.Node) error {
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

func (c *Cluster) duplicateErr(other *memberlist.Node, meta nodeMeta) error {
	return fmt.Errorf("%w: node name %q is already used by the agent at %s (started %s); give every agent its own name, or stop the other one",
		ErrDuplicateName, c.cfg.NodeName, other.Address(), meta.BootedAt.Format(time.RFC3339))
}

// checkMerge vets a join (ours or another agent's): it is refused when it
// would put two live agents under one name. The one that started later
// records ErrDuplicateName and stops.
func (c *Cluster) checkMerge(peers []*memberlist.Node) error {
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
				err := c.duplicateErr(p, meta)
				c.fail(err)
				return err
			}
			return fmt.Errorf("refuse join: %q at %s uses this agent's name", p.Name, p.Address())
		}
		if at, clash := c.clash(p, meta); clash {
			return fmt.Errorf("refuse join: %q at %s is already the agent at %s", p.Name, p.Address(), at)
		}
	}
	return nil
}

// clash says whether p (of boot meta) is another agent than the member of
// its name this agent knows, at another address; at is that member's.
func (c *Cluster) clash(p *memberlist.Node, meta nodeMeta) (at string, clash bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.peers[p.Name]
	if r == nil || !r.member || !r.hasMeta || r.meta.BootID == meta.BootID ||
		(r.node.Addr.Equal(p.Addr) && r.node.Port == p.Port) {
		return "", false
	}
	return r.node.Address(), true
}

// nameConflict handles memberlist's report of two addresses for one name.
func (c *Cluster) nameConflict(existing, other *memberlist.Node) {
	if existing.Name != c.cfg.NodeName {
		c.warnOnce("conflict/"+other.Address(), "gossip: %q is claimed by %s and %s; the later one is ignored", existing.Name, existing.Address(), other.Address())
		return
	}
	meta, err := decodeMeta(other.Meta)
	if err == nil && meta.BootID != c.bootID && olderBoot(meta, c.selfMeta()) {
		c.fail(c.duplicateErr(other, meta))
		return
	}
	c.warnOnce("conflict/"+other.Address(), "gossip: the agent at %s uses this node's name %q; it should stop", other.Address(), existing.Name)
}

// warnOnce logs a message once per key.
func (c *Cluster) warnOnce(key, format string, args ...any) {
	if c.firstWarning(key) {
		c.cfg.Logf(format, args...)
	}
}

// firstWarning records a warning of key and says whether it is the first.
func (c *Cluster) firstWarning(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.conflict[key]
	if len(c.conflict) >= 1024 {
		clear(c.conflict)
	}
	c.conflict[key] = true
	return !seen
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

func (c *Cluster) selfPeer() Peer {
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
	out := c.peerViews(time.Now())
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// peerViews is every node this agent has seen, itself first, as of now.
func (c *Cluster) peerViews(now time.Time) []Peer {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Peer, 0, len(c.peers)+1)
	out = append(out, c.selfPeer())
	for _, r := range c.peers {
		if r.seen || r.hasState || r.leftBoot != "" {
			out = append(out, r.peerView(now))
		}
	}
	return out
}

// Peer returns one node of View.
func (c *Cluster) Peer(name string) (Peer, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if name == c.cfg.NodeName {
		return c.selfPeer(), true
	}
	r := c.peers[name]
	if r == nil || !(r.seen || r.hasState || r.leftBoot != "") {
		return Peer{}, false
	}
	return r.peerView(time.Now()), true
}

// target finds the memberlist node to send a request to.
func (c *Cluster) target(name string) (memberlist.Node, error) {
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
