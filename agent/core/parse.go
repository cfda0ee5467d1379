package core

import (
	"strings"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// A request's words read once, at the edge: what a claim, a run or a
// booking asks for, checked before anything is granted or queued.

// claimOf makes the one typed claim of a request, at the edge, and checks
// it once (checkClaim): from here it is carried as is, to this node's
// single writer or in the claim request to the node that owns the GPUs.
// The kind is read as a word (none is interactive); the time limit is
// left as asked, zero when none was: the granting node applies its
// policy's default (lease.Claim.Limit).
func claimOf(req api.ClaimRequest) (lease.Claim, error) {
	c := lease.Claim{Count: req.Count, GPUs: req.GPUs, Note: req.Note, Force: req.Force, Run: req.Run,
		RequestID: req.RequestID, MIG: req.MIG, Model: req.Model, Tags: req.Tags, CPUsPerGPU: req.CPUsPerGPU}
	var err error
	switch strings.ToLower(strings.TrimSpace(req.CPUs)) {
	case "", "local":
	case "any", "none":
		c.AnyCPU = true
	default:
		return lease.Claim{}, refusal.Invalidf("--cpus %s: want local (the cores close to the GPUs, the default) or any", words.QuoteInput(req.CPUs))
	}
	if c.Where, err = whereOf(req.Node, req.NodeChoice); err != nil {
		return lease.Claim{}, err
	}
	if c.Kind, err = lease.ParseKind(req.Kind); err != nil {
		return lease.Claim{}, err
	}
	if req.Service != nil {
		svc := *req.Service
		c.Service, c.Kind = &svc, lease.KindService
	}
	if req.Duration != "" {
		if c.Duration, err = words.ParseDuration(req.Duration); err != nil {
			return lease.Claim{}, err
		}
	}
	if req.Mem != "" {
		if c.MemMiB, err = lease.ParseMem(req.Mem); err != nil {
			return lease.Claim{}, err
		}
	}
	if err := checkClaim(c); err != nil {
		return lease.Claim{}, err
	}
	return c, nil
}

// checkClaim is every check a claim gets before a node plans it: its
// bounds (lease.Claim.Validate) and a session name tmux keeps as given.
// The edge runs it on the claim it made; the owning node runs the session
// name's part on a claim the network brought (agent/peer has validated
// the rest).
func checkClaim(c lease.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return checkSession(c.Run)
}

// checkSession refuses a run whose session name tmux would rewrite (a
// mangled name breaks every later lookup by it): the launcher's rule,
// beside the run's bounds (job.RunSpec.Check).
func checkSession(r *job.RunSpec) error {
	if r == nil || r.Name == "" {
		return nil
	}
	if err := launch.CheckName(r.Name); err != nil {
		return refusal.Wrap(refusal.CodeInvalid, err)
	}
	return nil
}

// checkRun is every check a session's spec gets before anything is
// granted or queued: its bounds, its size as the agents send it, and its
// session name.
func checkRun(r *job.RunSpec) error {
	if err := r.Check(); err != nil {
		return err
	}
	return checkSession(r)
}

// whereOf is the --nodelist and --exclude of a request that may also name
// one --node (a nodelist of one): the two are not given together, and a
// node named is not excluded. The lists' own bounds are
// lease.NodeChoice.Check's, which the claim's Validate runs.
func whereOf(node string, nc lease.NodeChoice) (lease.NodeChoice, error) {
	switch {
	case node != "" && len(nc.Only) > 0:
		return nc, refusal.Invalidf("--node %s and --nodelist both say where: --node X is --nodelist X, give one", node)
	case node != "" && !nc.Allows(node):
		return nc, refusal.Invalidf("--node %s is in --exclude: drop it from one", node)
	}
	return nc, nil
}

// knownNodes refuses --nodelist or --exclude naming a node the cluster
// (as v shows it) does not have: a typo would narrow or widen the request
// in silence.
func knownNodes(v queue.ClusterView, where lease.NodeChoice) error {
	if where.IsZero() {
		return nil
	}
	known := make([]string, len(v.Nodes))
	for i := range v.Nodes {
		known[i] = v.Nodes[i].Name
	}
	return where.Unknown(known)
}

// pickAllowed is the node a request without --node goes to, chosen by
// choose among the candidates its --nodelist/--exclude allow (all when it
// has neither), or the refusal when they allow none.
func pickAllowed(where lease.NodeChoice, cands []lease.Candidate, choose func([]lease.Candidate) (string, error)) (string, error) {
	if cands = where.Filter(cands); len(cands) == 0 {
		return "", where.NoNodeLeft(1, 0)
	}
	return choose(cands)
}
