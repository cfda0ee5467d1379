package nemesis

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/gossip"
)

// network is the cluster's wire as the nemesis bends it: which nodes can
// reach which, and how much of the traffic is lost, late or doubled. Each
// agent sends through its own view of it (For), a gossip.Faults.
type network struct {
	mu sync.Mutex
	// node names each agent's gossip address.
	node map[string]string
	// apart lists the pairs (from, to) that cannot talk.
	apart map[[2]string]bool
	// cut are nodes nothing reaches and that reach nothing (paused).
	cut                    map[string]bool
	loss, dup              float64
	delayMin, delayMax     time.Duration
	rng                    *rand.Rand
	dropped, late, doubled int
}

func newNetwork(seed uint64) *network {
	return &network{
		node:  map[string]string{},
		apart: map[[2]string]bool{},
		cut:   map[string]bool{},
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// name records that node gossips at addr.
func (n *network) name(addr, node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.node[addr] = node
}

// For is node's view of the network.
func (n *network) For(node string) gossip.Faults { return nodeNet{n: n, from: node} }

// partition makes side and the rest unable to reach each other.
func (n *network) partition(side, all []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := map[string]bool{}
	for _, s := range side {
		in[s] = true
	}
	for _, a := range all {
		for _, b := range all {
			if in[a] != in[b] {
				n.apart[[2]string{a, b}] = true
			}
		}
	}
}

// oneWay stops what from sends to to, and nothing else: to's requests
// reach from, from's answers are lost.
func (n *network) oneWay(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.apart[[2]string{from, to}] = true
}

// isolate cuts node off entirely (a paused process), or lets it back.
func (n *network) isolate(node string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cut {
		n.cut[node] = true
	} else {
		delete(n.cut, node)
	}
}

// lossy sets the fraction of packets lost and doubled and how late they
// arrive.
func (n *network) lossy(loss, dup float64, delayMin, delayMax time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.loss, n.dup, n.delayMin, n.delayMax = loss, dup, delayMin, delayMax
}

// heal lets every node reach every other, on a perfect wire.
func (n *network) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.apart)
	n.loss, n.dup, n.delayMin, n.delayMax = 0, 0, 0, 0
}

// blocked reports whether from cannot reach the node at addr.
func (n *network) blocked(from, addr string) bool {
	to, known := n.node[addr]
	if !known {
		return false
	}
	return n.cut[from] || n.cut[to] || n.apart[[2]string{from, to}]
}

type nodeNet struct {
	n    *network
	from string
}

// Packet implements gossip.Faults.
func (v nodeNet) Packet(addr string) gossip.PacketFate {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.blocked(v.from, addr) {
		return gossip.PacketFate{Drop: true}
	}
	var f gossip.PacketFate
	if n.loss > 0 && n.rng.Float64() < n.loss {
		n.dropped++
		f.Drop = true
		return f
	}
	if n.dup > 0 && n.rng.Float64() < n.dup {
		n.doubled++
		f.Duplicate = true
	}
	if n.delayMax > 0 {
		n.late++
		f.Delay = n.delayMin + time.Duration(n.rng.Int64N(int64(n.delayMax-n.delayMin)+1))
	}
	return f
}

// Stream implements gossip.Faults: a stream across a partition is refused
// as an unreachable host's would be; on a slow network it opens late.
func (v nodeNet) Stream(addr string) error {
	n := v.n
	n.mu.Lock()
	if n.blocked(v.from, addr) {
		n.mu.Unlock()
		return fmt.Errorf("dial %s: no route to host (nemesis partition)", addr)
	}
	var delay time.Duration
	if n.delayMax > 0 {
		delay = n.delayMin + time.Duration(n.rng.Int64N(int64(n.delayMax-n.delayMin)+1))
	}
	n.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	return nil
}
