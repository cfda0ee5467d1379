package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// remoteNode is another node as the cluster last heard of it.
type remoteNode struct {
	Name      string
	Addr      string
	State     string
	Version   uint64
	Snapshot  nodeprobe.Snapshot
	Leases    []lease.Lease
	HasState  bool
	UpdatedAt time.Time
	// Idle is the node's own idle history, nil when it published none.
	Idle *lease.IdleTracker
	// Extra is what the node published beyond leases: its queue, how its
	// queued leases ended. Nil when none.
	Extra *extraState
	// Usage is the node's published decayed usage (GPU-seconds per user).
	Usage map[string]float64
}

// Board builds the board for a caller: this node from the live table, the
// others from what gossip last said. GPUs of a node that is not alive are
// marked unknown, never free.
func (a *Agent) Board(c lease.Caller) api.Board {
	a.mu.Lock()
	now := a.now()
	self := api.Node{
		Name:        a.cfg.NodeName,
		State:       api.NodeAlive,
		Host:        a.snap.Host,
		TelemetryAt: a.snap.TakenAt,
		GPUs:        gpusFor(a.snap, a.table.List(), a.judged),
	}
	var notes []string
	for i := len(a.notices[c.UID]) - 1; i >= 0; i-- {
		n := a.notices[c.UID][i]
		if now.Sub(n.at) < 30*time.Minute {
			notes = append(notes, n.at.Local().Format("15:04")+" "+n.text)
		}
	}
	a.mu.Unlock()
	b := api.Board{Self: a.cfg.NodeName, You: c, GeneratedAt: now.Round(0), Notices: notes}
	b.Nodes = append(b.Nodes, self)
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName {
			b.Nodes[0].Addr = r.Addr
			continue
		}
		n := api.Node{Name: r.Name, State: r.State, Addr: r.Addr, Host: r.Snapshot.Host, TelemetryAt: r.Snapshot.TakenAt}
		judged := lease.Judge(r.Snapshot, r.Leases, r.Idle, now, a.cfg.Policy)
		n.GPUs = gpusFor(r.Snapshot, r.Leases, judged)
		if r.State != api.NodeAlive {
			for i := range n.GPUs {
				n.GPUs[i].Flags = append(n.GPUs[i].Flags, api.FlagUnknown)
			}
		}
		b.Nodes = append(b.Nodes, n)
	}
	slices.SortFunc(b.Nodes, func(x, y api.Node) int { return strings.Compare(x.Name, y.Name) })
	return b
}

func gpusFor(snap nodeprobe.Snapshot, leases []lease.Lease, judged map[int]lease.Judgement) []api.GPU {
	holder := make(map[int]*lease.Lease)
	for i := range leases {
		for _, g := range leases[i].GPUs {
			holder[g] = &leases[i]
		}
	}
	out := make([]api.GPU, len(snap.GPUs))
	for i, g := range snap.GPUs {
		out[i] = api.GPU{GPU: g, Flags: judged[g.Index].Flags, Lease: holder[g.Index]}
		if out[i].Flags == nil {
			out[i].Flags = []lease.Flag{}
		}
		if out[i].Processes == nil {
			out[i].Processes = []nodeprobe.Process{}
		}
	}
	return out
}

// placeClaim picks the node for a claim with no node named.
func (a *Agent) placeClaim(req api.ClaimRequest) (string, error) {
	if len(req.GPUs) > 0 {
		return a.cfg.NodeName, nil
	}
	a.mu.Lock()
	cands := []lease.Candidate{{Node: a.cfg.NodeName, Snap: a.snap, Leases: a.table.List(), Local: true}}
	a.mu.Unlock()
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName || r.State != api.NodeAlive || !r.HasState {
			continue
		}
		cands = append(cands, lease.Candidate{Node: r.Name, Snap: r.Snapshot, Leases: r.Leases})
	}
	return lease.ChooseNode(cands, req.Count)
}
