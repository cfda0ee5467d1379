package core

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Claim grants GPUs: on the node named, or (none named, in a cluster) on
// the best node that fits. A claim for another node's GPUs is a request to
// that node's agent, which alone decides. A retried claim (same request
// id) gets the lease the first one made.
func (b *Bound) Claim(ctx context.Context, req api.ClaimRequest) (api.ClaimResponse, error) {
	if err := b.write(); err != nil {
		return api.ClaimResponse{}, err
	}
	claim, err := claimOf(req)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	s := b.s
	v := s.View()
	if claim.CPUsPerGPU > 0 {
		if err := peer.Require(v, peer.ChosenCores); err != nil {
			return api.ClaimResponse{}, err
		}
	}
	if claim.RequestID != "" {
		for _, l := range v.Leases() {
			if l.RequestID == claim.RequestID && l.User == b.c.User {
				return s.granted(l), nil
			}
		}
	}
	var siblings []string
	if claim.Service != nil {
		if siblings, err = b.admitService(v, &claim); err != nil {
			return api.ClaimResponse{}, err
		}
	}
	if err := knownNodes(v, claim.Where); err != nil {
		return api.ClaimResponse{}, err
	}
	target := req.Node
	if target == "" {
		target = s.cfg.Node
		if prev, ok := s.placed.get(b.c.User, claim.RequestID); ok {
			// A retry goes where the first try went, which dedupes it.
			target = prev
		} else if len(claim.GPUs) == 0 && len(v.Nodes) > 1 {
			want := claim.Want(s.cfg.Policy, s.deps.Clock.Now(), v.PoolHeld(s.cfg.Policy.Pools, b.c.User))
			choose := func(cands []lease.Candidate) (string, error) {
				if claim.Service != nil && noGPU(claim) {
					return noGPUNode(cands, want.Tags)
				}
				return lease.ChooseNodeFor(cands, want, s.cfg.Policy.Pools, b.c.User)
			}
			target, err = pickAllowed(claim.Where, v.Candidates(), func(cands []lease.Candidate) (string, error) {
				if len(siblings) > 0 {
					// A replica on a port keeps off its siblings' nodes.
					if cands = withoutNodes(cands, siblings); len(cands) == 0 {
						return "", spreadRefusal(claim, len(siblings))
					}
					if _, err := choose(cands); err != nil {
						return "", spreadRefusal(claim, len(siblings))
					}
				}
				if here := localCandidate(cands); req.PreferHere && here != nil {
					if _, err := choose(here); err == nil {
						cands = here
					} // else it does not fit here: the best node anywhere
				}
				return choose(cands)
			})
			if err != nil {
				return api.ClaimResponse{}, err
			}
		}
		s.placed.put(b.c.User, claim.RequestID, target, s.deps.Clock.Now())
	}
	if slices.Contains(siblings, target) {
		return api.ClaimResponse{}, spreadRefusal(claim, len(siblings))
	}
	if !claim.Where.Allows(target) {
		return api.ClaimResponse{}, refusal.Invalidf("its --nodelist/--exclude keep it off %s (%s), the node it would be granted on: name GPUs on a node they allow, or change them", target, claim.Where)
	}
	if target == s.cfg.Node {
		l, err := b.grantHere(ctx, v, claim)
		return s.granted(l), err
	}
	who, err := b.actor(target)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	// The claim made at the edge is the request, as is.
	r, err := peer.Call(ctx, s.deps.Peers, target, peer.Claim, who, claim)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	s.awaitVisible(ctx, r.Lease.ID)
	return s.granted(r.Lease), nil
}

// localCandidate is this node alone among cands, or nil when it is not one.
func localCandidate(cands []lease.Candidate) []lease.Candidate {
	for _, c := range cands {
		if c.Local {
			return []lease.Candidate{c}
		}
	}
	return nil
}

// grantHere is a claim decided by this node's single writer.
func (b *Bound) grantHere(ctx context.Context, v queue.ClusterView, claim lease.Claim) (lease.Lease, error) {
	n := claim.Count
	if n == 0 {
		n = len(claim.GPUs)
	}
	if claim.MIG != "" || claim.MemMiB > 0 {
		n = 1
	}
	weight := float64(n)
	if self := v.Local(); self != nil {
		weight = lease.ClaimWeight(self.Snap, claim) // pools and quotas count a part's share
		if err := v.PoolQuota(b.s.cfg.Policy.Pools, self.Snap.Host.Tags, b.c.User, weight); err != nil {
			return lease.Lease{}, err
		}
	}
	borrows := v.Borrows(b.s.cfg.Sched, b.c.User, weight)
	if claim.Service != nil {
		// A service withdraws its GPUs for good: it never borrows beyond
		// its owner's quota. One started --preemptible counts as
		// borrowed, so quota preemption may take it for someone within
		// theirs.
		if borrows && !claim.Service.Preemptible {
			return lease.Lease{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("service %s would take you past your quota ([queue] quotas), and a service never borrows: ask for fewer GPUs, or start it --preemptible", claim.Service.Name)}
		}
		borrows = claim.Service.Preemptible
	}
	return b.s.deps.Node.Grant(ctx, b.c, node.Grant{Claim: claim, Borrowed: borrows})
}

// granted is a claim's answer: the lease, and a notice when its time limit
// was cut to end before a booking.
func (s *Service) granted(l lease.Lease) api.ClaimResponse {
	r := s.leaseResponse(l)
	if l.ID == "" {
		return r
	}
	var notes []string
	if b, ok := lease.CutBy(l, s.bookingsOf(l.Node)); ok {
		r.CutBy = b.ID
		notes = append(notes, fmt.Sprintf("the time limit ends at %s, when %s's booking %s of %s begins: save your work by then, or claim other GPUs for longer (`dibs ls` shows which are free); `dibs extend` cannot move it past the booking", l.ExpiresAt.Local().Format("Mon 15:04"), b.User, b.ID, gpuWord(b.GPUs)))
	}
	if len(l.CPUs) > 0 {
		if note := lease.SharedCoresNotice(l, s.View().Leases()); note != "" {
			notes = append(notes, note)
		}
	}
	if l.Borrowed {
		notes = append(notes, "this lease is borrowed: it takes you beyond your quota, so it may be preempted (with a warning and a grace) when someone within theirs waits")
	}
	r.Notice = strings.Join(notes, "; ")
	return r
}
