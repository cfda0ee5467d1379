package gossip

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// nodeMeta is what an agent puts in memberlist's node meta: who it is (which
// boot) and which wire versions it speaks. It travels in every alive message,
// so it holds identity and version only; state travels in our own messages.
//
//	[magic 'd'] [meta version] [wire min] [wire max] [booted at: int64 unix ns, big endian]
//	[boot id length: 1 byte] [boot id] [agent protocol: 1 byte, version 2 on]
//
// A later meta version may append fields; readers of an earlier one ignore
// them.
type nodeMeta struct {
	WireMin  uint8
	WireMax  uint8
	BootedAt time.Time
	BootID   string
	// Protocol is the agents' request protocol (Config.Protocol); 0 when
	// the meta is of version 1 or the agent set none.
	Protocol uint8
}

const (
	metaMagic   = 'd'
	metaVersion = 2
	metaFixed   = 13
)

func (m nodeMeta) encode() []byte {
	b := make([]byte, metaFixed, metaFixed+len(m.BootID)+1)
	b[0], b[1], b[2], b[3] = metaMagic, metaVersion, m.WireMin, m.WireMax
	binary.BigEndian.PutUint64(b[4:12], uint64(m.BootedAt.UnixNano()))
	b[12] = byte(len(m.BootID))
	b = append(b, m.BootID...)
	return append(b, m.Protocol)
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
	if b[1] >= 2 && len(b) > metaFixed+n {
		m.Protocol = b[metaFixed+n]
	}
	if !validToken(m.BootID, maxBootID) {
		return nodeMeta{}, wireErrorf("node meta has a bad boot id %q", trunc(m.BootID))
	}
	return m, nil
}

// compatible says whether an agent with this meta and we can read each
// other: the wire version ranges must overlap. (Today both write
// wireVersion; the range is there so a later version can keep reading this
// one during a rolling upgrade.)
func (m nodeMeta) compatible(protocol uint8) error {
	if m.WireMin > wireVersion || m.WireMax < minWireVersion {
		return fmt.Errorf("it speaks gossip wire versions %d to %d and this agent %d to %d: run the same dibs version on every node",
			m.WireMin, m.WireMax, minWireVersion, wireVersion)
	}
	if m.Protocol != protocol {
		return fmt.Errorf("it speaks agent protocol %d and this agent %d: run the same dibs version on every node", m.Protocol, protocol)
	}
	return nil
}
