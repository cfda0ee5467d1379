package queue

import (
	"cmp"
	"fmt"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// A queued request and the claim it was made from. The edge makes one
// lease.Claim of a request's words and checks it once (agent/core's
// claimOf); a submit queues that claim as an entry (NewEntry), and the node
// that grants a rank of it gets the claim back (QueueEntry.RankClaim). These
// are the only two places the entry's fields are read from a claim or made
// into one. The entry keeps its own shape rather than embedding the claim:
// it is stored and gossiped, and the previous release's strict decoder reads
// it (`job`, not `run`; `duration`, `kind`, `nodes` and `gpus_per_node`
// always present), so its JSON cannot change.

// Ask is what a submit adds to the claim it queues: the gang's shape,
// where it may run, its launcher, and what becomes of a failed or
// preempted run: the part of api.SubmitRequest beside the claim that the
// entry keeps as it is (an array and dependencies are parsed apart, by
// agent/core's sweep).
type Ask struct {
	// Nodes × GPUsPerNode GPUs. On one node, zero GPUsPerNode takes the
	// claim's count (one for a MIG instance or a memory budget).
	Nodes, GPUsPerNode int
	// Node pins a single-node request to one node; empty means anywhere.
	Node string
	// Model, when set, takes the place of the claim's model filter.
	Model string
	// Requeue, MaxRestarts and NoRequeue are QueueEntry's.
	Requeue     bool
	MaxRestarts int
	NoRequeue   bool
	// Torchrun and PerGPU are the job's launcher (job.Job); they mean
	// nothing without a run.
	Torchrun, PerGPU bool
}

// NewEntry is the entry that queues claim c for who at node origin, shaped
// by a: the one conversion of a claim into an entry. The claim is the one
// the edge made and checked; the entry's own rules and the policy's
// defaults are QueueEntry.Check's, and its id and submit time the origin's.
// Named GPUs are refused: a queued request asks for a number of them,
// placed by the scheduler.
func NewEntry(origin string, who lease.Caller, c lease.Claim, a Ask) (QueueEntry, error) {
	if len(c.GPUs) > 0 {
		return QueueEntry{}, refusal.Invalidf("a queued request asks for a number of GPUs (-g N), not named ones")
	}
	e := QueueEntry{
		Origin: origin, User: who.User, UID: who.UID,
		Nodes: a.Nodes, GPUsPerNode: a.GPUsPerNode, Node: a.Node,
		Duration: c.Duration, Kind: c.Kind, Note: c.Note,
		Requeue: a.Requeue, MaxRestarts: a.MaxRestarts, NoRequeue: a.NoRequeue,
		Model: cmp.Or(a.Model, c.Model), Tags: c.Tags, MemMiB: c.MemMiB, MIG: c.MIG,
		RequestID: c.RequestID, NodeChoice: c.Where,
		CPUsPerGPU: c.CPUsPerGPU, AnyCPU: c.AnyCPU,
	}
	if e.Nodes <= 1 && e.Node == "" && len(e.Only) == 1 {
		// A nodelist of one is a pin, which every scheduler honours.
		e.Node, e.Only = e.Only[0], nil
	}
	if e.Nodes <= 1 && e.GPUsPerNode == 0 {
		e.GPUsPerNode = c.Count
		if e.GPUsPerNode == 0 && (e.MemMiB > 0 || e.MIG != "") {
			e.GPUsPerNode = 1
		}
	}
	if c.Run != nil {
		e.Job = c.Run.Job()
		e.Job.Torchrun, e.Job.PerGPU = a.Torchrun, a.PerGPU
	}
	return e, nil
}

// RankClaim is the claim the node of rank grants for this attempt on gpus:
// the one conversion of an entry back into a claim, with its run, whose
// session is named for the task and the rank (TaskSessionName,
// RankSessionName). A MIG entry's claim names the instance (and the model
// the scheduler placed it by) instead of GPUs: the instance names its GPU.
// A job that holds only its public part (gossip's copy, Job.Kept) is
// refused as unavailable: its command is its origin's, and the scheduler
// asks the origin again.
//
// What the queue alone uses stays out: the count (the scheduler placed
// it), the pools (the scheduler chose the node), the request id (a retried
// submit's, not a start's: a start is recognised by its attempt's key,
// node.Grant's Entry). The launcher, rendezvous and exit recording are the
// node's part of a queued start.
func (e QueueEntry) RankClaim(gpus []int, rank int) (lease.Claim, error) {
	if e.Job != nil && e.Job.Kept {
		return lease.Claim{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("the start of %s came without its command, which its origin %s keeps: the scheduler asks the origin again", e.ID, e.Origin)}
	}
	c := e.claim()
	if e.MIG == "" {
		c.GPUs = gpus
	}
	if e.Job != nil {
		c.Run = e.Job.Spec(RankSessionName(TaskSessionName(e.Job.Name, e.ID), e, rank))
	}
	return c, nil
}

// claim is the part of the claim the entry keeps that every rank is
// granted with: its time, kind and note, when it was queued, what of a
// GPU it asks for, and its cores. Check reads its limit from it (lease.Claim.Limit, the
// one place a claim's defaults are applied).
func (e QueueEntry) claim() lease.Claim {
	c := lease.Claim{Duration: e.Duration, Kind: e.Kind, Note: e.Note, QueuedAt: e.SubmittedAt, MemMiB: e.MemMiB,
		CPUsPerGPU: e.CPUsPerGPU, AnyCPU: e.AnyCPU}
	if e.MIG != "" {
		c.MIG, c.Model = e.MIG, e.Model
	}
	return c
}
