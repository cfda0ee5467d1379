package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// client is one person at a terminal: one operation at a time, against a
// random agent, over that agent's real unix socket (so lost answers are
// retried by the real api client, with the claim's request id).
type client struct {
	id  int
	h   *harness
	rng *rand.Rand
	// held are the leases this client was granted and has not released;
	// queued its queue entries not yet cancelled.
	held   []lease.Lease
	queued []string
	// submitted are the last entries this client was told it queued
	// (cancelled or not): what a dependent run may wait for.
	submitted []string
}

// opWeights say how often a client does what.
var opWeights = []struct {
	kind   OpKind
	weight int
}{
	{OpClaim, 30}, {OpRelease, 22}, {OpExtend, 6}, {OpRead, 30}, {OpSubmit, 4}, {OpCancel, 3},
}

func (c *client) pick() OpKind {
	total := 0
	for _, w := range opWeights {
		total += w.weight
	}
	r := c.rng.IntN(total)
	for _, w := range opWeights {
		if r < w.weight {
			return w.kind
		}
		r -= w.weight
	}
	return OpRead
}

// run does operations until stop is closed.
func (c *client) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		refused := c.step()
		c.h.opsDone.Add(1)
		// A person thinks between commands (a little, here), and waits a
		// while after a refusal before trying again.
		think := time.Duration(c.rng.IntN(20)) * time.Millisecond
		if refused {
			think += time.Duration(20+c.rng.IntN(60)) * time.Millisecond
		}
		select {
		case <-stop:
			return
		case <-time.After(think):
		}
	}
}

// step does one random operation and records it; it reports whether the
// operation was refused.
func (c *client) step() bool {
	via := c.h.members[c.rng.IntN(len(c.h.members))]
	// A paused agent answers nobody until it goes on.
	<-via.clock.running()
	op := Op{Client: c.id, Via: via.name, Kind: c.pick()}
	// Nobody holds more than a few leases or keeps a long queue.
	switch {
	case op.Kind == OpClaim && len(c.held) >= 2:
		op.Kind = OpRelease
	case op.Kind == OpSubmit && len(c.queued) >= 2:
		op.Kind = OpCancel
	case (op.Kind == OpRelease || op.Kind == OpExtend) && len(c.held) == 0:
		op.Kind = OpClaim
	case op.Kind == OpCancel && len(c.queued) == 0:
		op.Kind = OpSubmit
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := via.client
	switch op.Kind {
	case OpClaim:
		c.claim(ctx, cl, &op)
	case OpRelease:
		i := c.rng.IntN(len(c.held))
		l := c.held[i]
		op.Node, op.LeaseID = l.Node, l.ID
		op.Call = c.h.rec.now()
		_, err := cl.Release(ctx, api.ReleaseRequest{IDs: []string{l.ID}})
		c.finish(&op, err)
		if op.Outcome != Unknown {
			// Released, or already gone (expired): either way not held.
			c.held = slices.Delete(c.held, i, i+1)
		}
	case OpExtend:
		l := c.held[c.rng.IntN(len(c.held))]
		op.Node, op.LeaseID = l.Node, l.ID
		op.Call = c.h.rec.now()
		_, err := cl.Extend(ctx, api.ExtendRequest{ID: l.ID, Duration: fmt.Sprintf("%ds", 1+c.rng.IntN(4))})
		c.finish(&op, err)
	case OpRead:
		// Reads are about the answering agent's own GPUs: the owner's
		// word, which must be linearizable.
		op.Node = via.name
		op.Call = c.h.rec.now()
		b, err := cl.Board(ctx)
		c.finish(&op, err)
		if err == nil {
			op.Holders = holders(b, via.name)
		}
	case OpSubmit:
		c.submit(ctx, cl, &op)
	case OpCancel:
		i := c.rng.IntN(len(c.queued))
		op.EntryID = c.queued[i]
		op.Call = c.h.rec.now()
		err := cl.Cancel(ctx, op.EntryID)
		c.finish(&op, err)
		if op.Outcome != Unknown {
			c.queued = slices.Delete(c.queued, i, i+1)
		}
	}
	c.h.rec.op(op)
	return op.Outcome == Refused
}

func (c *client) claim(ctx context.Context, cl *api.Client, op *Op) {
	target := c.h.members[c.rng.IntN(len(c.h.members))]
	op.Node = target.name
	req := api.ClaimRequest{Node: target.name, Duration: fmt.Sprintf("%ds", 2+c.rng.IntN(6)), Kind: "batch", RequestID: c.requestID()}
	if c.rng.IntN(10) < 7 {
		req.GPUs = []int{c.rng.IntN(c.h.opts.GPUs)}
	} else {
		req.Count = 1 + c.rng.IntN(2)
	}
	op.GPUs, op.Count, op.RequestID = req.GPUs, req.Count, req.RequestID
	op.Call = c.h.rec.now()
	resp, err := cl.Claim(ctx, req)
	c.finish(op, err)
	if err != nil {
		return
	}
	l := lease.Lease{ID: resp.ID, Node: resp.Node, GPUs: resp.GPUs, Token: resp.Token, ExpiresAt: resp.ExpiresAt, RequestID: req.RequestID}
	op.LeaseID, op.Lease = l.ID, &l
	c.held = append(c.held, l)
}

func (c *client) submit(ctx context.Context, cl *api.Client, op *Op) {
	req := api.SubmitRequest{Claim: api.ClaimRequest{Duration: fmt.Sprintf("%ds", 3+c.rng.IntN(5)), Kind: "batch", RequestID: c.requestID()}}
	if len(c.h.members) > 1 && c.rng.IntN(2) == 0 {
		// A gang: one GPU on each of two nodes, every rank a short run.
		req.Nodes, req.GPUsPerNode = 2, 1
		req.Claim.Run = &api.RunSpec{Command: []string{"sleep", fmt.Sprint(1 + c.rng.IntN(3))}}
		req.Requeue = c.rng.IntN(2) == 0
		req.MaxRestarts = 1
	} else {
		req.Claim.Count = 1
		switch r := c.rng.IntN(8); {
		case r == 0:
			// A small job array of short runs, throttled.
			req.Array = fmt.Sprintf("0-%d%%%d", 1+c.rng.IntN(3), 1+c.rng.IntN(2))
			req.Claim.Run = &api.RunSpec{Command: []string{"sleep", "1"}}
		case r == 1 && len(c.submitted) > 0:
			// A run that waits for one this client submitted earlier.
			dep := []string{c.submitted[c.rng.IntN(len(c.submitted))]}
			if c.rng.IntN(2) == 0 {
				req.After = dep
			} else {
				req.AfterAny = dep
			}
			req.Claim.Run = &api.RunSpec{Command: []string{"sleep", "1"}}
		}
	}
	op.Array, op.After, op.AfterAny = req.Array, req.After, req.AfterAny
	op.Nodes, op.RequestID, op.Node = max(req.Nodes, 1), req.Claim.RequestID, op.Via
	op.Call = c.h.rec.now()
	s, err := cl.Submit(ctx, req)
	c.finish(op, err)
	if err == nil {
		op.EntryID = s.ID
		c.queued = append(c.queued, s.ID)
		c.submitted = append(c.submitted, s.ID)
		if len(c.submitted) > 4 {
			c.submitted = c.submitted[1:]
		}
	}
}

// finish records how the op ended.
func (c *client) finish(op *Op, err error) {
	op.Return = c.h.rec.now()
	var ae *api.Error
	switch {
	case err == nil:
		op.Outcome = OK
	case errors.As(err, &ae) && refusal.Code(ae.Code) == refusal.CodeNoAnswer:
		// The agent forwarded it and heard nothing back: it may have
		// been done, as the message says.
		op.Outcome, op.Code, op.Return, op.Err = Unknown, refusal.CodeNoAnswer, Never, ae.Msg
	case errors.As(err, &ae):
		op.Outcome, op.Code, op.Err = Refused, refusal.Code(ae.Code), ae.Msg
	default:
		op.Outcome, op.Return, op.Err = Unknown, Never, err.Error()
	}
}

func (c *client) requestID() string {
	return fmt.Sprintf("nemesis-%d-%016x", c.id, c.rng.Uint64())
}

// holders is who holds each of node's GPUs on a board.
func holders(b api.Board, node string) map[int]string {
	out := map[int]string{}
	for _, n := range b.Nodes {
		if n.Name != node {
			continue
		}
		for _, g := range n.GPUs {
			out[g.Index] = ""
			if g.Lease != nil {
				out[g.Index] = g.Lease.ID
			}
		}
	}
	return out
}
