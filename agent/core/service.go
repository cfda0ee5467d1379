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
// services (the protocol gate), the name and replica index are the
// caller's only ones across the cluster (a rolling update's new replica
// may share them with the live replica it replaces), and the policy's
// bounds hold: every replica's GPUs count, and the count of services per
// person counts names, not replicas. Each refusal is one line naming the
// limit. It may add the one pool services run in to the claim's pools.
// It returns the nodes the new replica must keep off: those of its
// siblings on the same port (two cannot bind one port on one node).
func (b *Bound) admitService(v queue.ClusterView, c *lease.Claim) (siblings []string, err error) {
	if err := peer.Require(v, peer.Services); err != nil {
		return nil, err
	}
	p := b.s.cfg.Policy
	spec := c.Service
	mine, total, same := 0, 0, 0
	names := map[string]bool{}
	replaced, dup := false, "" // dup: the node of a live replica of the same index
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
		mine += len(l.GPUs)
		names[l.Service.Name] = true
		if l.Service.Name != spec.Name {
			continue
		}
		switch {
		case spec.Replaces != "" && l.ID == spec.Replaces:
			replaced = true
		case l.Service.Replica == spec.Replica:
			if dup == "" {
				dup = l.Node
			}
		default:
			same += len(l.GPUs)
		}
		if spec.Port > 0 && l.Service.Port == spec.Port && !slices.Contains(siblings, l.Node) {
			siblings = append(siblings, l.Node)
		}
	}
	if spec.Replaces != "" && !replaced {
		return nil, refusal.Invalidf("lease %s is no live replica of your service %s, so there is nothing to replace: dibs services lists them", spec.Replaces, spec.Name)
	}
	if dup != "" && spec.Replicas <= 1 && spec.Replica == 0 {
		return nil, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("you already run a service named %s (on %s): dibs stop %s first, or pick another name", spec.Name, dup, spec.Name)}
	}
	if dup != "" {
		return nil, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("you already run replica %s (on %s): dibs stop %s first, or update it with dibs serve %s --update", spec.Label(), dup, spec.Name, spec.Name)}
	}
	delete(names, spec.Name)
	if len(names) >= service.MaxPerUser {
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("you run %d services, the most one person may (every node holds their definitions): dibs stop one first", len(names))}
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
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: "services are off on this cluster (leases.service_gpus_per_user = -1)"}
	}
	if mine+want > perUser {
		if k := spec.Replicas; k > 1 && spec.Replaces == "" {
			return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("services may hold at most %d GPUs per person (leases.service_gpus_per_user): --replicas %d of %d GPU%s each take %d, and your other services hold %d", perUser, k, want, plural(want), k*want, mine-same)}
		}
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("services may hold at most %d GPUs per person (leases.service_gpus_per_user) and yours hold %d: ask for %d or fewer", perUser, mine, max(perUser-mine, 0))}
	}
	clusterMax := p.ServiceGPUs
	if clusterMax == 0 {
		clusterMax = max(clusterGPUs(v)/4, 1)
	}
	if total+want > clusterMax {
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("services may hold at most %d GPUs of the cluster (leases.service_gpus) and hold %d already", clusterMax, total)}
	}
	if len(p.ServicePools) > 0 && !slices.ContainsFunc(c.Tags, func(t string) bool { return slices.Contains(p.ServicePools, t) }) {
		if len(p.ServicePools) > 1 {
			return nil, refusal.Invalidf("services run only in pools %s (leases.service_pools): add --pool with one of them", strings.Join(p.ServicePools, ", "))
		}
		c.Tags = append(slices.Clone(c.Tags), p.ServicePools[0])
	}
	port, err := b.s.proxyPort(v, c.Service, b.c.User)
	if err != nil {
		return nil, err
	}
	withPort := *c.Service
	withPort.ProxyPort = port
	withPort.Place = placementOf(*c)
	c.Service = &withPort
	return siblings, nil
}

// placementOf is the part of c that says where it may run and that its
// lease will not keep (the pools, with the service pool admission added;
// the model; the cores per GPU; the MIG profile; --nodelist and
// --exclude), so a move or an update places the replica under the same
// asks. Nil when c asks for none of them.
func placementOf(c lease.Claim) *service.Placement {
	p := &service.Placement{Tags: slices.Clone(c.Tags), Model: c.Model, CPUsPerGPU: c.CPUsPerGPU,
		Nodelist: slices.Clone(c.Where.Only), Exclude: slices.Clone(c.Where.Exclude)}
	if c.MIG != "" && !strings.HasPrefix(c.MIG, "MIG-") && !strings.Contains(c.MIG, ":") {
		p.MIG = c.MIG // a profile, not one instance
	}
	if p.IsZero() {
		return nil
	}
	return p
}

// spreadRefusal is the refusal of a replica with a port that no node
// without a sibling takes: replicas on one port each need a node of
// their own, and only the siblings' nodes (fit) have held one.
func spreadRefusal(c lease.Claim, fit int) error {
	k := max(c.Service.Replicas, fit+1)
	what := "no GPU"
	switch n := c.Count + len(c.GPUs); {
	case c.MIG != "":
		what = "a " + c.MIG + " instance"
	case c.MemMiB > 0:
		what = fmt.Sprintf("%d MiB on a shared GPU", c.MemMiB)
	case n > 0:
		what = fmt.Sprintf("%d GPU%s", n, plural(n))
	}
	if c.Service.Replaces != "" {
		return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("a new replica beside the old needs a node with %s free that holds no replica of %s (replicas on port %d each need a node of their own); none fits", what, c.Service.Name, c.Service.Port)}
	}
	return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("--replicas %d needs %d nodes with %s free (replicas on port %d each need a node of their own); %d fit", k, k, what, c.Service.Port, fit)}
}

// withoutNodes is cands less the nodes named.
func withoutNodes(cands []lease.Candidate, nodes []string) []lease.Candidate {
	if len(nodes) == 0 {
		return cands
	}
	var out []lease.Candidate
	for _, c := range cands {
		if !slices.Contains(nodes, c.Node) {
			out = append(out, c)
		}
	}
	return out
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

// plural is "s" unless n is 1, for a refusal's count of GPUs.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// noGPU reports whether c holds no GPU (a service started with -g 0).
func noGPU(c lease.Claim) bool {
	return c.Count == 0 && len(c.GPUs) == 0 && c.MIG == "" && c.MemMiB == 0
}

// noGPUNode is where a service without a GPU goes when no node is named:
// the node asked from when it is among cands, else the first by name, in
// the pools asked for.
func noGPUNode(cands []lease.Candidate, tags []string) (string, error) {
	var best *lease.Candidate
	for i := range cands {
		c := &cands[i]
		if !lease.HasTags(c.Snap.Host.Tags, tags) {
			continue
		}
		if best == nil || c.Local && !best.Local || c.Local == best.Local && c.Node < best.Node {
			best = c
		}
	}
	if best == nil {
		return "", refusal.Invalidf("no node that is up is in pool %s: ask for another (dibs ls shows the pools)", strings.Join(tags, "+"))
	}
	return best.Node, nil
}
