package gossip

import (
	"fmt"
	"math"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// validNodeName reports whether s may name a node: a host name, in short
// or dotted form, with underscores allowed.
func validNodeName(s string) bool {
	if len(s) == 0 || len(s) > maxNodeName || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return false
		}
	}
	return true
}

// validToken reports whether s is a short printable token without spaces:
// boot ids, ops, error codes.
func validToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func (m *stateMsg) validate() error {
	if !validNodeName(m.Node) {
		return wireErrorf("state: bad node name %q", trunc(m.Node))
	}
	if !validToken(m.BootID, maxBootID) {
		return wireErrorf("state of %s: bad boot id %q", m.Node, trunc(m.BootID))
	}
	if m.Seq == 0 {
		return wireErrorf("state of %s: sequence 0", m.Node)
	}
	switch m.Section {
	case sectionLeases:
		if m.Leases == nil || m.Telemetry != nil {
			return wireErrorf("state of %s: a leases section must carry leases only", m.Node)
		}
		return m.Leases.validate(m.Node)
	case sectionTelemetry:
		if m.Telemetry == nil || m.Leases != nil {
			return wireErrorf("state of %s: a telemetry section must carry telemetry only", m.Node)
		}
		if m.Partial {
			return wireErrorf("state of %s: telemetry is never partial", m.Node)
		}
		return m.Telemetry.validate(m.Node)
	}
	return wireErrorf("state of %s: unknown section %q", m.Node, trunc(m.Section))
}

func (s *leaseSection) validate(node string) error {
	if len(s.Leases) > maxLeases {
		return wireErrorf("state of %s: %d leases, over %d", node, len(s.Leases), maxLeases)
	}
	seen := make(map[string]bool, len(s.Leases))
	for i := range s.Leases {
		if err := validateLease(node, &s.Leases[i], seen); err != nil {
			return err
		}
	}
	if len(s.Queue) > maxEntries || len(s.Ended) > maxEntries || len(s.QuietSince) > maxGPUs {
		return wireErrorf("state of %s: %d queue entries, %d ended runs, %d quiet GPUs", node, len(s.Queue), len(s.Ended), len(s.QuietSince))
	}
	for i := range s.Queue {
		if err := validateEntry(node, &s.Queue[i]); err != nil {
			return err
		}
	}
	for i := range s.Ended {
		if err := s.Ended[i].Validate(); err != nil {
			return wireErrorf("state of %s: %v", node, err)
		}
	}
	for g := range s.QuietSince {
		if g < 0 || g >= maxGPUIndex {
			return wireErrorf("state of %s: quiet GPU index %d", node, g)
		}
	}
	return nil
}

// validateEntry checks one queue entry of node's state: it must be node's
// own, and hold only what a person could have submitted.
func validateEntry(node string, e *queue.QueueEntry) error {
	if e.Origin != node {
		return wireErrorf("state of %s: queue entry %s belongs to %q", node, trunc(e.ID), trunc(e.Origin))
	}
	if err := e.Validate(); err != nil {
		return wireErrorf("state of %s: %v", node, err)
	}
	return nil
}

// validateLease checks one lease of node's state; seen holds the ids of the
// leases before it.
func validateLease(node string, l *lease.Lease, seen map[string]bool) error {
	if !validToken(l.ID, maxShortString) {
		return wireErrorf("state of %s: a lease has a bad id %q", node, trunc(l.ID))
	}
	if seen[l.ID] {
		return wireErrorf("state of %s: lease %s appears twice", node, l.ID)
	}
	seen[l.ID] = true
	if l.Node != node {
		return wireErrorf("state of %s: lease %s belongs to node %q", node, l.ID, trunc(l.Node))
	}
	// A service may hold no GPU (dibs serve -g 0); agents before
	// protocol 8 refuse such a lease (and the state that carries it).
	if len(l.GPUs) == 0 && !l.IsService() || len(l.GPUs) > maxGPUs {
		return wireErrorf("state of %s: lease %s holds %d GPUs", node, l.ID, len(l.GPUs))
	}
	gpus := make(map[int]bool, len(l.GPUs))
	for _, g := range l.GPUs {
		if g < 0 || g >= maxGPUIndex {
			return wireErrorf("state of %s: lease %s holds GPU index %d", node, l.ID, g)
		}
		if gpus[g] {
			return wireErrorf("state of %s: lease %s holds GPU %d twice", node, l.ID, g)
		}
		gpus[g] = true
	}
	if len(l.User) > maxShortString || len(l.Kind) > maxShortString || len(l.Session) > maxShortString {
		return wireErrorf("state of %s: lease %s has an overlong user, kind or session", node, l.ID)
	}
	if len(l.Note) > maxWireNote {
		return wireErrorf("state of %s: lease %s has a %d-byte note", node, l.ID, len(l.Note))
	}
	if err := l.CheckText(); err != nil {
		return wireErrorf("state of %s: lease %s: %v", node, l.ID, err)
	}
	// The rest of a lease's shape (names, MIG, shares, a booking's job) as
	// the agent itself checks it.
	if err := l.Validate(); err != nil {
		return wireErrorf("state of %s: %v", node, err)
	}
	return nil
}

// maxCPUList bounds a GPU's local-cores list on the wire: a machine's
// every CPU, in the kernel's ranges, takes far less.
const maxCPUList = 4096

func (s *telemetrySection) validate(node string) error {
	snap := &s.Snapshot
	if len(snap.GPUs) > maxGPUs {
		return wireErrorf("state of %s: %d GPUs, over %d", node, len(snap.GPUs), maxGPUs)
	}
	if snap.Host.CPUs < 0 {
		return wireErrorf("state of %s: %d CPUs", node, snap.Host.CPUs)
	}
	// A node's tags are its pools: every board lists them and claims
	// match them, so they are bounded in count and length, and plain.
	if err := lease.CheckTags(snap.Host.Tags); err != nil {
		return wireErrorf("state of %s: %v", node, err)
	}
	seen := make(map[int]bool, len(snap.GPUs))
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.Index < 0 || g.Index >= maxGPUIndex {
			return wireErrorf("state of %s: GPU index %d", node, g.Index)
		}
		if seen[g.Index] {
			return wireErrorf("state of %s: GPU %d appears twice", node, g.Index)
		}
		seen[g.Index] = true
		if len(g.Processes) > maxProcesses || len(g.MIGDevices) > maxMIGDevices || len(g.Links) > maxLinks {
			return wireErrorf("state of %s: GPU %d lists too many processes, MIG devices or links", node, g.Index)
		}
		// Every board and every claim with --cpus-per-gpu reads a GPU's
		// local cores: they must be a CPU list, and a short one.
		if len(g.CPUs) > maxCPUList {
			return wireErrorf("state of %s: GPU %d has a %d-byte CPU list", node, g.Index, len(g.CPUs))
		}
		if _, err := nodeprobe.ParseCPUList(g.CPUs); err != nil {
			return wireErrorf("state of %s: GPU %d: %v", node, g.Index, err)
		}
		for _, l := range g.Links {
			if l.Peer < 0 || l.Peer >= maxGPUIndex {
				return wireErrorf("state of %s: GPU %d links to GPU index %d", node, g.Index, l.Peer)
			}
		}
		if g.UtilizationPct != nil && (*g.UtilizationPct < 0 || *g.UtilizationPct > 100) {
			return wireErrorf("state of %s: GPU %d at %d%% utilisation", node, g.Index, *g.UtilizationPct)
		}
		for _, f := range []*float64{g.PowerDrawW, g.PowerLimitW} {
			if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0)) {
				return wireErrorf("state of %s: GPU %d has a non-finite power reading", node, g.Index)
			}
		}
	}
	if len(s.Usage) > maxUsers {
		return wireErrorf("state of %s: usage of %d users, over %d", node, len(s.Usage), maxUsers)
	}
	for user, secs := range s.Usage {
		if len(user) > maxShortString || math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0 {
			return wireErrorf("state of %s: bad usage entry %q: %v", node, trunc(user), secs)
		}
		if err := termsafe.Check(user); err != nil {
			return wireErrorf("state of %s: usage user %q holds %v", node, trunc(user), err)
		}
	}
	return nil
}

// escapeText escapes, in place, the text a state carries as its node found
// it: the snapshot's process commands and users (anyone can name a
// process), GPU models, UUIDs, errors and host facts. Call it after
// validate, on a message this agent decoded and owns.
func (m *stateMsg) escapeText() {
	if m.Telemetry != nil {
		m.Telemetry.Snapshot.EachString(func(_ string, p *string) { *p = termsafe.String(*p) })
	}
}

func (m *suspectMsg) validate() error {
	if !validNodeName(m.Node) || !validNodeName(m.By) {
		return wireErrorf("suspect: bad node names %q, %q", trunc(m.Node), trunc(m.By))
	}
	if !validToken(m.BootID, maxBootID) {
		return wireErrorf("suspect of %s: bad boot id %q", m.Node, trunc(m.BootID))
	}
	return nil
}

func (m *leaveMsg) validate() error {
	if !validNodeName(m.Node) {
		return wireErrorf("leave: bad node name %q", trunc(m.Node))
	}
	if !validToken(m.BootID, maxBootID) {
		return wireErrorf("leave of %s: bad boot id %q", m.Node, trunc(m.BootID))
	}
	return nil
}

func (m *requestMsg) validate() error {
	if m.ID == 0 {
		return wireErrorf("request with id 0")
	}
	if !validNodeName(m.From) {
		return wireErrorf("request %d: bad sender %q", m.ID, trunc(m.From))
	}
	if !validToken(m.Reply, maxShortString) {
		return wireErrorf("request %d from %s: bad reply address %q", m.ID, m.From, trunc(m.Reply))
	}
	if !validToken(m.Op, maxShortString) {
		return wireErrorf("request %d from %s: bad op %q", m.ID, m.From, trunc(m.Op))
	}
	if m.TimeoutMS < 0 {
		return wireErrorf("request %d from %s: negative timeout", m.ID, m.From)
	}
	return nil
}

func (m *responseMsg) validate() error {
	if m.ID == 0 {
		return wireErrorf("response with id 0")
	}
	if !validNodeName(m.From) {
		return wireErrorf("response %d: bad sender %q", m.ID, trunc(m.From))
	}
	if m.ErrCode != "" && !validToken(string(m.ErrCode), maxShortString) {
		return wireErrorf("response %d from %s: bad error code %q", m.ID, m.From, trunc(string(m.ErrCode)))
	}
	if m.ErrCode == "" && m.ErrMsg != "" {
		return wireErrorf("response %d from %s: an error message without a code", m.ID, m.From)
	}
	return nil
}

func (m *pushPullMsg) validate() error {
	if !validNodeName(m.From) {
		return wireErrorf("push/pull: bad sender %q", trunc(m.From))
	}
	if len(m.States) > maxStates || len(m.Left) > maxStates {
		return wireErrorf("push/pull from %s: %d states and %d leaves, over %d", m.From, len(m.States), len(m.Left), maxStates)
	}
	for i := range m.Left {
		if err := m.Left[i].validate(); err != nil {
			return fmt.Errorf("push/pull from %s: %w", m.From, err)
		}
	}
	return nil
}

// trunc shortens a string for an error message (quoted with %q, which
// escapes what a terminal must not see), on a rune boundary.
func trunc(s string) string {
	if len(s) > 40 {
		cut := 40
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}
