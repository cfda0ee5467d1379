package queue

import (
	"cmp"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Membership states of a node as a view holds them. Only an alive node's
// GPUs can be free; the others' are unknown.
const (
	NodeAlive   = "alive"
	NodeSuspect = "suspect"
	NodeDead    = "dead"
	NodeLeft    = "left"
	// NodeRestarting is how a node that is away but within the grace
	// (SchedConfig.LostAfter) is shown: its agent is restarting, or has
	// been silent for less than the grace, so its leases, ranks and gangs
	// hold. It is never a membership state, only what people see
	// (NodeView.Shown).
	NodeRestarting = "restarting"
)

// NodeView is one node as one agent knows it: its own node from its live
// table, the others from what gossip last said.
type NodeView struct {
	Name  string
	State string
	// Addr is where its agent gossips; empty when unknown or alone.
	Addr string
	// Self marks the node of the agent that built the view.
	Self bool
	// HasState: something was heard from the node (its own always has).
	HasState bool
	// Since is when State last changed (zero: unknown, or always so).
	Since   time.Time
	Version uint64
	Snap    nodeprobe.Snapshot
	Leases  []lease.Lease
	// Bookings are the node's bookings not started yet (never in Leases).
	Bookings []lease.Lease
	Judged   map[int]lease.Judgement
	Idle     *lease.IdleTracker
	Queue    []QueueEntry
	Ended    []lease.EndedRun
	Usage    map[string]float64
	Protocol int
	Software string
}

// ServiceStopped reports whether some node recorded a stop of l's
// service replica (lease.ServiceStop) under any copy of it: a copy on a
// node that was away when the stop came is stopped too, never moved.
func (v ClusterView) ServiceStopped(l lease.Lease) bool {
	root := l.ServiceRoot()
	for i := range v.Nodes {
		if lease.ServiceStopped(v.Nodes[i].Ended, root) {
			return true
		}
	}
	return false
}

// Alive reports whether the node is up and has said what it holds: the only
// nodes whose GPUs can be placed on.
func (n *NodeView) Alive() bool { return n.Self || n.State == NodeAlive && n.HasState }

// Lost reports whether the node has been away for the whole grace: left
// for good, or silent since Since for grace or longer. Its leases are then
// counted lost; before that they hold, as an agent's restart leaves its
// sessions running.
func (n *NodeView) Lost(now time.Time, grace time.Duration) bool {
	if n.Alive() {
		return false
	}
	return n.State == NodeLeft || !n.Since.IsZero() && now.Sub(n.Since) >= grace
}

// Shown is the state people see for the node: NodeRestarting while it is
// down but within the grace (its agent restarting, or silent for less than
// grace), else its membership state.
func (n *NodeView) Shown(now time.Time, grace time.Duration) string {
	if n.Self || n.State != NodeDead || n.Lost(now, grace) {
		return n.State
	}
	return NodeRestarting
}

// Heard reports whether this agent has heard the state of every node that
// memberlist says is alive. An agent that has just started holds its
// verdicts about others' ranks until then: a peer it has not heard yet
// holds leases it cannot see.
func (v ClusterView) Heard() bool {
	for i := range v.Nodes {
		if n := &v.Nodes[i]; n.State == NodeAlive && !n.HasState {
			return false
		}
	}
	return true
}

// ClusterView is the whole cluster as one agent sees it at one moment: built
// once per pass (a claim's placement, a scheduling pass, a board) and read
// by the pure functions here, so no caller merges "this node plus the
// others" by hand.
type ClusterView struct {
	// Self is the name of the node whose agent built the view.
	Self string
	// Now is when it was built.
	Now time.Time
	// Nodes are sorted by name, Self among them.
	Nodes []NodeView
}

// NewClusterView builds a view from this node and its peers (a peer with
// this node's name is ignored: this node's own state is the truth).
func NewClusterView(self NodeView, peers []NodeView, now time.Time) ClusterView {
	self.Self, self.HasState = true, true
	if self.State == "" {
		self.State = NodeAlive
	}
	v := ClusterView{Self: self.Name, Now: now, Nodes: make([]NodeView, 0, len(peers)+1)}
	v.Nodes = append(v.Nodes, self)
	for _, p := range peers {
		if p.Name == self.Name {
			if v.Nodes[0].Addr == "" {
				v.Nodes[0].Addr = p.Addr
			}
			continue
		}
		p.Self = false
		v.Nodes = append(v.Nodes, p)
	}
	slices.SortFunc(v.Nodes, func(a, b NodeView) int { return cmp.Compare(a.Name, b.Name) })
	return v
}

// Node returns the named node.
func (v ClusterView) Node(name string) (*NodeView, bool) {
	for i := range v.Nodes {
		if v.Nodes[i].Name == name {
			return &v.Nodes[i], true
		}
	}
	return nil, false
}

// Local is this agent's own node.
func (v ClusterView) Local() *NodeView {
	n, _ := v.Node(v.Self)
	return n
}

// Leases lists every lease the view knows, node by node.
func (v ClusterView) Leases() []lease.Lease {
	var out []lease.Lease
	for i := range v.Nodes {
		out = append(out, v.Nodes[i].Leases...)
	}
	return out
}

// Bookings lists every booking the view knows, node by node.
func (v ClusterView) Bookings() []lease.Lease {
	var out []lease.Lease
	for i := range v.Nodes {
		out = append(out, v.Nodes[i].Bookings...)
	}
	return out
}

// FindLease returns the lease with id, wherever it lives.
func (v ClusterView) FindLease(id string) (lease.Lease, bool) {
	node, ok := lease.NodeOfID(id)
	if !ok {
		return lease.Lease{}, false
	}
	n, ok := v.Node(node)
	if !ok {
		return lease.Lease{}, false
	}
	for _, l := range n.Leases {
		if l.ID == id {
			return l, true
		}
	}
	return lease.Lease{}, false
}

// Entries is the cluster's queue: every node's own entries.
func (v ClusterView) Entries() []QueueEntry {
	var out []QueueEntry
	for i := range v.Nodes {
		out = append(out, v.Nodes[i].Queue...)
	}
	return out
}

// Scheduler names the agent that runs the scheduler: the lowest-named live
// member that has said what it holds. Every agent computes it from the same
// membership, so exactly one schedules once membership agrees.
func (v ClusterView) Scheduler() string {
	for i := range v.Nodes {
		if v.Nodes[i].Alive() {
			return v.Nodes[i].Name
		}
	}
	return v.Self
}

// SchedNodes is the cluster as the scheduler's rules read it.
func (v ClusterView) SchedNodes() []lease.SchedNode {
	out := make([]lease.SchedNode, 0, len(v.Nodes))
	for i := range v.Nodes {
		n := &v.Nodes[i]
		out = append(out, lease.SchedNode{Name: n.Name, Alive: n.Alive(), Snap: n.Snap, Leases: n.Leases, Idle: n.Idle, Bookings: n.Bookings})
	}
	return out
}

// Candidates are the live nodes a claim with no node named may land on.
func (v ClusterView) Candidates() []lease.Candidate {
	var out []lease.Candidate
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Alive() {
			out = append(out, lease.Candidate{Node: n.Name, Snap: n.Snap, Leases: n.Leases, Bookings: n.Bookings, Local: n.Self})
		}
	}
	return out
}

// Usage sums every node's published decayed usage.
func (v ClusterView) Usage() Usage {
	out := Usage{}
	for i := range v.Nodes {
		for u, s := range v.Nodes[i].Usage {
			out[u] += s
		}
	}
	return out
}

// Borrows reports whether n more GPUs take user beyond their quota, counting
// what they (and their group) hold cluster-wide: the one rule for a direct
// claim and a scheduled start.
func (v ClusterView) Borrows(cfg SchedConfig, user string, n float64) bool {
	if len(cfg.Quotas) == 0 && len(cfg.GroupQuotas) == 0 {
		return false
	}
	used, groupUsed := cfg.QuotaUse(user, v.Leases())
	return cfg.Borrows(user, n, used, groupUsed)
}
