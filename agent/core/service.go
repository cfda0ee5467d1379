package core

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// admitService is the edge's part of `dibs serve`: every node must run
// services (the protocol gate), the name is the caller's only one of that
// name across the cluster, and the policy's bounds hold. Each refusal is
// one line naming the limit. It may add the one pool services run in to
// the claim's pools.
func (b *Bound) admitService(v queue.ClusterView, c *lease.Claim) error {
	if err := peer.Require(v, peer.Services); err != nil {
		return err
	}
	p := b.s.cfg.Policy
	name := c.Service.Name
	mine, total, count := 0, 0, 0
	for _, l := range v.Leases() {
		if !l.IsService() || b.s.lostNode(v, l.Node) {
			// A service of a node lost past the grace is being moved
			// (agent/svcmove.go): its copy there has stopped itself.
			continue
		}
		total += len(l.GPUs)
		if l.User != b.c.User {
			continue
		}
		if l.Service.Name == name {
			return &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("you already run a service named %s (on %s): dibs stop %s first, or pick another name", name, l.Node, name)}
		}
		mine += len(l.GPUs)
		count++
	}
	if count >= service.MaxPerUser {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("you run %d services, the most one person may (every node holds their definitions): dibs stop one first", count)}
	}
	want := c.Count + len(c.GPUs)
	if c.MIG != "" || c.MemMiB > 0 {
		want = 1
	}
	perUser := p.ServiceGPUsPerUser
	if perUser == 0 {
		perUser = lease.DefaultServiceGPUsPerUser
	}
	if perUser < 0 {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: "services are off on this cluster (leases.service_gpus_per_user = -1)"}
	}
	if mine+want > perUser {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("services may hold at most %d GPUs per person (leases.service_gpus_per_user) and yours hold %d: ask for %d or fewer", perUser, mine, max(perUser-mine, 0))}
	}
	clusterMax := p.ServiceGPUs
	if clusterMax == 0 {
		clusterMax = max(clusterGPUs(v)/4, 1)
	}
	if total+want > clusterMax {
		return &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("services may hold at most %d GPUs of the cluster (leases.service_gpus) and hold %d already", clusterMax, total)}
	}
	if len(p.ServicePools) > 0 && !slices.ContainsFunc(c.Tags, func(t string) bool { return slices.Contains(p.ServicePools, t) }) {
		if len(p.ServicePools) > 1 {
			return refusal.Invalidf("services run only in pools %s (leases.service_pools): add --pool with one of them", strings.Join(p.ServicePools, ", "))
		}
		c.Tags = append(slices.Clone(c.Tags), p.ServicePools[0])
	}
	port, err := b.s.proxyPort(v, c.Service, b.c.User)
	if err != nil {
		return err
	}
	spec := *c.Service
	spec.ProxyPort = port
	c.Service = &spec
	return nil
}

// proxyPort is the port of the agents' proxy (agent config [services]
// proxy_ports) for the service spec of user, 0 when the proxy is off here
// or the service has no port to forward to. A service keeps the port its
// other leases carry (its replicas, and the copy on a lost node that a
// move replaces), so the address stays through moves; else the port a
// move asks for when it is free; else the lowest of the range that no
// service in the view holds. The client never chooses it: what a claim
// carries is only a hint. A full range is a one-line refusal.
func (s *Service) proxyPort(v queue.ClusterView, spec *service.Spec, user string) (int, error) {
	r := s.cfg.ProxyPorts
	if r.IsZero() || spec.Port == 0 {
		return 0, nil
	}
	used := map[int]bool{}
	for _, l := range v.Leases() {
		if !l.IsService() || l.Service.ProxyPort == 0 {
			continue
		}
		if l.User == user && l.Service.Name == spec.Name {
			return l.Service.ProxyPort, nil
		}
		used[l.Service.ProxyPort] = true
	}
	if r.Holds(spec.ProxyPort) && !used[spec.ProxyPort] {
		return spec.ProxyPort, nil
	}
	port, ok := r.Pick(used)
	if !ok {
		return 0, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("every port of the services proxy (services.proxy_ports %s) is taken by another service: dibs stop one, or ask an admin to widen the range", r)}
	}
	return port, nil
}

// clusterGPUs counts the GPUs of the nodes the view knows.
func clusterGPUs(v queue.ClusterView) int {
	n := 0
	for i := range v.Nodes {
		n += len(v.Nodes[i].Snap.GPUs)
	}
	return n
}

// lostNode reports whether node has been away past the grace
// (queue.lost_after), so its services are moved and no longer count.
func (s *Service) lostNode(v queue.ClusterView, node string) bool {
	n, ok := v.Node(node)
	return ok && n.Lost(v.Now, s.cfg.Sched.LostAfter)
}
