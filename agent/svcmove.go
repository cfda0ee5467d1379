package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Moves of services (issue 33): a service's replica whose node is lost
// past the grace is placed again on a live node that fits, from the
// definition its lease carries to every node; a node that comes back and
// finds its service running elsewhere ends its own copy. Both run in the
// origin's pass (before every scheduling pass, on every node).

// svcKey names a service's replica: one owner's name and the replica's
// index, unique across the cluster (but for a rolling update's moment).
type svcKey struct {
	uid     int
	name    string
	replica int
}

// moveServices re-places the services of lost nodes. Only the scheduler
// (the lowest-named live member that has said what it holds) moves them:
// every agent computes it from the same membership, so exactly one node
// places each replica once membership agrees, and it is the node whose
// view of the cluster's free GPUs the scheduler already trusts. Only a
// node in touch with the cluster (fence.go) moves: of a partition's two
// sides, the one whose replicas fence themselves moves nothing. A
// service already running on a live node is never placed again.
func (a *Agent) moveServices(ctx context.Context, v queue.ClusterView, grace time.Duration) {
	if v.Scheduler() != v.Self || !v.Heard() {
		return
	}
	if _, in := a.touch(a.heardView(v)); !in {
		// Cut off: the side in touch moves, this one fences. Judged as
		// the fence judges it: a node cut off alone, whose memberlist
		// calls its peers dead one after the other, took itself for in
		// touch in between and placed a live node's service on itself.
		return
	}
	live := map[svcKey]bool{}
	var lost []lease.Lease
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, l := range n.Leases {
			if !l.IsService() {
				continue
			}
			k := svcKey{l.UID, l.Service.Name, l.Service.Replica}
			switch {
			case n.Alive():
				live[k] = true
			case n.Lost(v.Now, grace):
				lost = append(lost, l)
			default:
				live[k] = true // within the grace: its agent may be restarting
			}
		}
	}
	for _, l := range lost {
		k := svcKey{l.UID, l.Service.Name, l.Service.Replica}
		if live[k] {
			continue
		}
		live[k] = true // once per pass, even when the claim fails
		if v.ServiceStopped(l) {
			continue // stopped while its node was away: it stays stopped
		}
		if err := a.moveService(ctx, v, l); err != nil {
			a.moveLog.Log(a.log, slog.LevelWarn, l.ID, "move service", "service", l.Service.Name, "user", l.User, "from", l.Node, "err", err)
		}
	}
}

// moveService claims l's service again as its owner, on the best live
// node that fits, from the definition its lease holds and as its owner
// asked: the same share (whole GPUs, a MIG instance of the same profile,
// the same memory budget), pools, model and cores.
func (a *Agent) moveService(ctx context.Context, v queue.ClusterView, l lease.Lease) error {
	if l.Job == nil || l.Job.Kept {
		return fmt.Errorf("its lease holds no definition")
	}
	spec := l.Service.Spec
	spec.Replaces = "" // an update's moment is over: this replica is the one
	spec.Root = l.ServiceRoot()
	req, err := movedClaim(v, l)
	if err != nil {
		return err
	}
	req.Service = &spec
	req.Run = &api.RunSpec{Command: l.Job.Command, Dir: l.Job.Dir, Env: l.Job.Env}
	req.RequestID = node.MovePrefix + l.ID // its grant tells it as svc-moved
	r, err := a.svc.ForUID(l.UID).Claim(ctx, req)
	if err != nil {
		return err
	}
	a.log.Info("service moved", "service", l.Service.Name, "user", l.User, "from", l.Node, "to", r.Node, "lease", r.ID)
	return nil
}

// movedClaim is what l holds and where it may run, as a claim asks for
// it: a memory budget as a size, a MIG instance by its profile (the lost
// node's last snapshot names it, else the profile admission recorded; the
// instance itself is gone with its node), else as many whole GPUs (none
// for a -g 0 service); the pools, model and cores per GPU its admission
// recorded (service.Placement), within its --nodelist and --exclude, and
// --cpus any.
func movedClaim(v queue.ClusterView, l lease.Lease) (api.ClaimRequest, error) {
	var req api.ClaimRequest
	switch {
	case l.MemMiB > 0:
		req.Mem = fmt.Sprintf("%dM", l.MemMiB)
	case l.MIG != "":
		req.MIG = migProfile(v, l.Node, l.MIG)
		if req.MIG == "" && l.Service.Place != nil {
			req.MIG = l.Service.Place.MIG
		}
		if req.MIG == "" {
			return req, fmt.Errorf("the profile of its MIG instance %s is not known: its node's last snapshot does not show it", l.MIG)
		}
	default:
		req.Count = len(l.GPUs)
	}
	if l.AnyCPU {
		req.CPUs = "any"
	}
	if p := l.Service.Place; p != nil {
		req.Tags, req.Model, req.CPUsPerGPU = slices.Clone(p.Tags), p.Model, p.CPUsPerGPU
		req.NodeChoice = lease.NodeChoice{Only: slices.Clone(p.Nodelist), Exclude: slices.Clone(p.Exclude)}
	}
	return req, nil
}

// migProfile is the profile of MIG instance uuid on node, as the view
// last heard of it; empty when it shows none.
func migProfile(v queue.ClusterView, node, uuid string) string {
	for i := range v.Nodes {
		if v.Nodes[i].Name != node {
			continue
		}
		for _, g := range v.Nodes[i].Snap.GPUs {
			for _, d := range g.MIGDevices {
				if d.UUID == uuid {
					return d.Profile
				}
			}
		}
	}
	return ""
}

// endMovedServices ends this node's copy of a service that runs on
// another live node under a newer lease: this node was lost past the
// grace, its service was placed elsewhere, and it is back. Its replica
// stopped itself (fencing) or is stopped here, so only one copy runs.
func (a *Agent) endMovedServices(ctx context.Context, v queue.ClusterView) {
	self := v.Local()
	if self == nil {
		return
	}
	for _, mine := range self.Leases {
		if !mine.IsService() {
			continue
		}
		if v.ServiceStopped(mine) {
			// Its replica was stopped (or crash-looped) on another copy
			// while this node was away or cut off: the stop holds.
			a.log.Info("service was stopped while this node was away; ending this copy", "service", mine.Service.Name, "user", mine.User, "lease", mine.ID)
			if err := a.node.EndServiceCopy(ctx, mine, lease.EndReleased); err != nil {
				a.log.Warn("end stopped service", "lease", mine.ID, "err", err)
			}
			continue
		}
		for i := range v.Nodes {
			n := &v.Nodes[i]
			if n.Self || !n.Alive() || !newerCopy(n.Leases, mine) {
				continue
			}
			a.log.Info("service runs elsewhere since this node was lost; ending this copy", "service", mine.Service.Name, "user", mine.User, "lease", mine.ID, "on", n.Name)
			if err := a.node.EndServiceCopy(ctx, mine, lease.EndMovedAway); err != nil {
				a.log.Warn("end moved service", "lease", mine.ID, "err", err)
			}
			break
		}
	}
}

// newerCopy reports whether leases hold mine's replica under a lease
// started after it, other than a rolling update's new replica started
// beside mine (the update stops mine once that one is healthy).
func newerCopy(leases []lease.Lease, mine lease.Lease) bool {
	for _, l := range leases {
		if l.IsService() && l.UID == mine.UID && l.Service.Name == mine.Service.Name && l.Service.Replica == mine.Service.Replica &&
			l.Service.Replaces != mine.ID && l.StartedAt.After(mine.StartedAt) {
			return true
		}
	}
	return false
}
