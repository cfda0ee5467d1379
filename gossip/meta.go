package gossip

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// nodeMeta is what an agent puts in memberlist's node meta: who it is (which
// boot) and which versions it speaks. It travels in every alive message, so
// it holds identity and versions only; state travels in our own messages.
//
//	[magic 'd'] [meta version] [wire min] [wire max] [booted at: int64 unix ns, big endian]
//	[boot id length: 1 byte] [boot id] [agent protocol: 1 byte, version 2 on]
//	[agent protocol max: 1 byte, version 3 on]
//
// A later meta version may append fields; readers of an earlier one ignore
// them. That is how version 3 stays readable by the first release (v0.1.0,
// meta version 2): the byte that release reads as "the" agent protocol, and
// requires to equal its own, is the oldest protocol this agent still
// speaks, and the newest follows it, unread by that release.
type nodeMeta struct {
	// Version is the meta's own version: 2 from v0.1.0, 3 from every
	// agent since, all of whose leaves carry a sequence (see recordLeave).
	Version  uint8
	WireMin  uint8
	WireMax  uint8
	BootedAt time.Time
	BootID   string
	// Protocol is the oldest agents' request protocol this agent speaks
	// (Config.ProtocolMin, or Config.Protocol when that is unset); 0 when
	// the meta is of version 1 or the agent set none.
	Protocol uint8
	// ProtocolMax is the newest it speaks (Config.Protocol); for a meta of
	// version 2 it equals Protocol.
	ProtocolMax uint8
}

const (
	metaMagic   = 'd'
	metaVersion = 3
	metaFixed   = 13
)

func (m nodeMeta) encode() []byte {
	b := make([]byte, metaFixed, metaFixed+len(m.BootID)+2)
	b[0], b[1], b[2], b[3] = metaMagic, metaVersion, m.WireMin, m.WireMax
	binary.BigEndian.PutUint64(b[4:12], uint64(m.BootedAt.UnixNano()))
	b[12] = byte(len(m.BootID))
	b = append(b, m.BootID...)
	return append(b, m.Protocol, m.ProtocolMax)
}

// decodeMeta reads and validates node meta.
func decodeMeta(b []byte) (nodeMeta, error) {
	if len(b) > memberlist.MetaMaxSize {
		return nodeMeta{}, wireErrorf("node meta is %d bytes, over %d", len(b), memberlist.MetaMaxSize)
	}
	if len(b) < metaFixed {
		return nodeMeta{}, wireErrorf("node meta is %d bytes: not a dibs agent", len(b))
	}
	if b[0] != metaMagic || b[1] == 0 {
		return nodeMeta{}, wireErrorf("node meta does not start with a dibs header: not a dibs agent")
	}
	m := nodeMeta{
		Version:  b[1],
		WireMin:  b[2],
		WireMax:  b[3],
		BootedAt: time.Unix(0, int64(binary.BigEndian.Uint64(b[4:12]))),
	}
	if m.WireMin == 0 || m.WireMin > m.WireMax {
		return nodeMeta{}, wireErrorf("node meta has wire versions %d to %d", m.WireMin, m.WireMax)
	}
	n := int(b[12])
	if len(b) < metaFixed+n {
		return nodeMeta{}, wireErrorf("node meta is truncated")
	}
	m.BootID = string(b[metaFixed : metaFixed+n])
	rest := b[metaFixed+n:]
	if b[1] >= 2 && len(rest) > 0 {
		m.Protocol = rest[0]
	}
	m.ProtocolMax = m.Protocol
	if b[1] >= 3 && len(rest) > 1 {
		m.ProtocolMax = rest[1]
		if m.ProtocolMax < m.Protocol {
			return nodeMeta{}, wireErrorf("node meta has agent protocols %d to %d", m.Protocol, m.ProtocolMax)
		}
	}
	if !validToken(m.BootID, maxBootID) {
		return nodeMeta{}, wireErrorf("node meta has a bad boot id %q", trunc(m.BootID))
	}
	return m, nil
}

// compatible says whether an agent with this meta and one speaking agent
// protocols lo to hi can work together: their wire version ranges and
// their protocol ranges must overlap. A release speaks its own protocol and
// the one before it, so nodes one release apart overlap and a rolling
// upgrade never splits the cluster; nodes two releases apart do not, and
// are refused with what to do.
func (m nodeMeta) compatible(lo, hi uint8) error {
	if m.WireMin > wireVersion || m.WireMax < minWireVersion {
		return fmt.Errorf("it speaks gossip wire versions %d to %d and this agent %d to %d: nodes may be at most one dibs release apart; upgrade the older one",
			m.WireMin, m.WireMax, minWireVersion, wireVersion)
	}
	if m.Protocol > hi || m.ProtocolMax < lo {
		return fmt.Errorf("it speaks agent protocols %s and this agent %s: nodes may be at most one dibs release apart; upgrade the older one",
			protocolRange(m.Protocol, m.ProtocolMax), protocolRange(lo, hi))
	}
	return nil
}

func protocolRange(lo, hi uint8) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// protocolRange is the agent protocols this agent speaks, as its meta says.
func (c *Cluster) protocolRange() (lo, hi uint8) {
	lo, hi = c.cfg.ProtocolMin, c.cfg.Protocol
	if lo == 0 || lo > hi {
		lo = hi
	}
	return lo, hi
}

// Protocols says which agent protocols the agent now running on node
// speaks, as its node meta says: ok is false when node is not a live
// member (nothing can be sent to it then) or said nothing. For this node
// it is this agent's own range. The peer protocol reads it before every
// call, to speak the newest dialect both ends know.
func (c *Cluster) Protocols(node string) (lo, hi uint8, ok bool) {
	if node == c.cfg.NodeName {
		lo, hi = c.protocolRange()
		return lo, hi, true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.peers[node]
	if r == nil || !r.member || !r.hasMeta || r.meta.ProtocolMax == 0 {
		return 0, 0, false
	}
	return r.meta.Protocol, r.meta.ProtocolMax, true
}

// MemberProtocols is the newest agent protocol of every live member, this
// node included: what a feature gate reads to know whether every node has
// a feature (the oldest live member decides).
func (c *Cluster) MemberProtocols() map[string]uint8 {
	_, hi := c.protocolRange()
	out := map[string]uint8{c.cfg.NodeName: hi}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, r := range c.peers {
		if r.member && r.hasMeta {
			out[name] = r.meta.ProtocolMax
		}
	}
	return out
}

// LastProtocols is the newest agent protocol of every other node whose
// node meta this agent has seen, as its latest boot's meta said, member or
// not: what a judgement about a node that has gone reads (a leave notice
// meant a restart before protocol 7). MemberProtocols, not this, is what a
// feature gate reads.
func (c *Cluster) LastProtocols() map[string]uint8 {
	out := map[string]uint8{}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, r := range c.peers {
		if r.hasMeta && r.meta.ProtocolMax != 0 {
			out[name] = r.meta.ProtocolMax
		}
	}
	return out
}

func (m nodeMeta) withProtocols(lo, hi uint8) nodeMeta {
	m.Protocol, m.ProtocolMax = lo, hi
	return m
}
