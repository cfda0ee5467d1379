package core

import (
	"context"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Board is the cluster as the caller sees it: this node from its live
// table, the others from what gossip last said. GPUs of a node that is not
// alive are marked unknown, never free.
func (b *Bound) Board(context.Context) (api.Board, error) {
	v := b.s.View()
	live := map[string]bool{}
	for _, l := range v.Leases() {
		live[l.ID] = true
	}
	notices := b.s.deps.Node.Notices(b.c.UID, func(id string) bool { return live[id] })
	out := api.Board{Self: b.s.cfg.Node, You: b.c, GeneratedAt: v.Now.Round(0), Notices: notices}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		bn := api.Node{Name: n.Name, State: b.s.shown(n, v.Now), Addr: n.Addr, Host: n.Snap.Host, TelemetryAt: n.Snap.TakenAt}
		for _, l := range n.Bookings {
			// A booked run's command only for its holder and admins.
			bn.Bookings = append(bn.Bookings, l.ShownTo(b.c))
		}
		judged := n.Judged
		if !n.Self {
			judged = lease.Judge(n.Snap, n.Leases, n.Idle, v.Now, b.s.cfg.Policy)
		}
		bn.GPUs = gpusFor(n.Snap, n.Leases, judged)
		for j := range bn.GPUs {
			// A service's command travels to every node, and shows only
			// to its owner and admins.
			if l := bn.GPUs[j].Lease; l != nil && l.Job.Private() {
				shown := l.ShownTo(b.c)
				bn.GPUs[j].Lease = &shown
			}
			for k, l := range bn.GPUs[j].Shares {
				bn.GPUs[j].Shares[k] = l.ShownTo(b.c)
			}
		}
		for _, l := range n.Leases {
			if l.IsService() {
				out.Services = append(out.Services, l.ShownTo(b.c))
			}
		}
		if !n.Self && n.State != queue.NodeAlive {
			for j := range bn.GPUs {
				bn.GPUs[j].Flags = append(bn.GPUs[j].Flags, api.FlagUnknown)
			}
		}
		out.Nodes = append(out.Nodes, bn)
	}
	out.Services = b.s.movingServices(v, out.Services)
	return out, nil
}

// movingServices shows a service whose node is lost past the grace as
// moving (the scheduler is placing it again, agent/svcmove.go) and leaves
// it out once it runs on a live node: one row per replica.
func (s *Service) movingServices(v queue.ClusterView, svcs []lease.Lease) []lease.Lease {
	type key struct {
		uid     int
		name    string
		replica int
	}
	placed := map[key]bool{}
	for _, l := range svcs {
		if l.Service != nil && !s.lostNode(v, l.Node) {
			placed[key{l.UID, l.Service.Name, l.Service.Replica}] = true
		}
	}
	out := svcs[:0]
	for _, l := range svcs {
		if l.Service != nil && s.lostNode(v, l.Node) {
			if placed[key{l.UID, l.Service.Name, l.Service.Replica}] || v.ServiceStopped(l) {
				// Placed again, or stopped on another copy while its
				// node was away (it ends there when the node returns).
				continue
			}
			svc := *l.Service
			svc.State = service.Moving
			l.Service = &svc
		}
		out = append(out, l)
	}
	return out
}

func gpusFor(snap nodeprobe.Snapshot, leases []lease.Lease, judged map[int]lease.Judgement) []api.GPU {
	holder := make(map[int]*lease.Lease)
	shares := make(map[int][]lease.Lease)
	for i := range leases {
		for _, g := range leases[i].GPUs {
			if leases[i].Partial() {
				shares[g] = append(shares[g], leases[i])
			} else {
				holder[g] = &leases[i]
			}
		}
	}
	out := make([]api.GPU, len(snap.GPUs))
	for i, g := range snap.GPUs {
		j := judged[g.Index]
		out[i] = api.GPU{GPU: g, Flags: j.Flags, Lease: holder[g.Index], Shares: shares[g.Index], OverBudget: j.OverBudget}
		if out[i].Flags == nil {
			out[i].Flags = []lease.Flag{}
		}
		if out[i].Processes == nil {
			out[i].Processes = []nodeprobe.Process{}
		}
	}
	return out
}

// Watch streams the board: now, then after every change anywhere. Bursts
// are coalesced, so a slow reader is never handed stale boards.
func (b *Bound) Watch(ctx context.Context) (<-chan api.Board, func() error) {
	ch := make(chan api.Board, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for {
			changed := b.s.Changes()
			board, _ := b.Board(ctx)
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- board:
			case <-ctx.Done():
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return ch, func() error { <-done; return nil }
}
