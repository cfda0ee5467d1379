package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// Bookings, MIG instances, shared GPUs and pools: the service's side.

// granted is a claim's answer: the lease, and a notice when its time limit
// was cut to end before a booking.
func (s *Service) granted(l lease.Lease) api.ClaimResponse {
	r := claimResponse(l)
	if l.ID == "" {
		return r
	}
	r.Here = l.Node == s.cfg.Node
	var notes []string
	if b, ok := lease.CutBy(l, s.bookingsOf(l.Node)); ok {
		r.CutBy = b.ID
		notes = append(notes, fmt.Sprintf("the time limit ends at %s, when %s's booking %s of %s begins: save your work by then, or claim other GPUs for longer (`dibs ls` shows which are free); `dibs extend` cannot move it past the booking", l.ExpiresAt.Local().Format("Mon 15:04"), b.User, b.ID, gpuWord(b.GPUs)))
	}
	if l.Borrowed {
		notes = append(notes, "this lease is borrowed: it takes you beyond your quota, so it may be preempted (with a warning and a grace) when someone within theirs waits")
	}
	r.Notice = strings.Join(notes, "; ")
	return r
}

// bookingsOf is a node's bookings as this agent knows them, without
// building the whole view (which sums usage).
func (s *Service) bookingsOf(node string) []lease.Lease {
	if node == s.cfg.Node {
		return s.deps.Node.State().Bookings
	}
	if s.cluster != nil {
		for _, p := range s.cluster.Peers() {
			if p.Name == node {
				return p.Bookings
			}
		}
	}
	return nil
}

func gpuWord(gpus []int) string {
	if len(gpus) == 1 {
		return fmt.Sprintf("GPU %d", gpus[0])
	}
	return fmt.Sprintf("GPUs %v", gpus)
}

// bookingOf parses a booking request once, for every path it takes.
func bookingOf(req api.BookRequest) (lease.BookRequest, error) {
	kind, err := lease.ParseKind(req.Kind)
	if err != nil {
		return lease.BookRequest{}, err
	}
	if req.Duration == "" {
		return lease.BookRequest{}, lease.Invalidf("say how long the booking is: --for 3h")
	}
	d, err := lease.ParseDuration(req.Duration)
	if err != nil {
		return lease.BookRequest{}, err
	}
	if req.RequestID != "" && !lease.ValidRequestID(req.RequestID) {
		return lease.BookRequest{}, lease.Invalidf("request id %q must be 8 to 64 letters, digits, '-' or '_'", req.RequestID)
	}
	if req.Count > 0 && len(req.GPUs) > 0 {
		return lease.BookRequest{}, lease.Invalidf("a count (%d) and GPU indices (%v) both say which GPUs: give one, not both", req.Count, req.GPUs)
	}
	br := lease.BookRequest{
		Count: req.Count, GPUs: req.GPUs, Start: req.Start, Duration: d, Kind: kind, Note: req.Note,
		Model: req.Model, Tags: req.Tags,
	}
	if req.Run != nil {
		if err := checkRun(req.Run.Command, req.Run.Dir, req.Run.Name, req.Run.Env); err != nil {
			return lease.BookRequest{}, err
		}
		br.Job = &lease.Job{Command: req.Run.Command, Dir: req.Run.Dir, Name: req.Run.Name, Env: req.Run.Env}
	}
	if err := lease.CheckBookingRequest(br); err != nil {
		return lease.BookRequest{}, err
	}
	if err := lease.CheckNote(br.Note); err != nil {
		return lease.BookRequest{}, err
	}
	return br, nil
}

// Book books GPUs ahead: on the node named, or on the node of the pools
// asked for where they fit best. The node that owns the GPUs decides and
// keeps the booking; how much one person may book is counted cluster-wide
// here first.
func (b *Bound) Book(ctx context.Context, req api.BookRequest) (lease.Lease, error) {
	if err := b.write(); err != nil {
		return lease.Lease{}, err
	}
	br, err := bookingOf(req)
	if err != nil {
		return lease.Lease{}, err
	}
	if br.Job != nil {
		if err := b.s.canRun(b.c); err != nil {
			return lease.Lease{}, err
		}
	}
	s := b.s
	v := s.View()
	if req.RequestID != "" {
		for _, l := range append(v.Bookings(), v.Leases()...) {
			if l.RequestID == req.RequestID && l.User == b.c.User {
				return l, nil
			}
		}
	}
	n := br.Count
	if n == 0 {
		n = len(br.GPUs)
	}
	if err := lease.CheckBookingLength(s.cfg.Policy, br.Duration); err != nil {
		return lease.Lease{}, err
	}
	if err := lease.CheckBookingQuota(s.cfg.Policy, b.c.User, v.Bookings(), float64(n)*br.Duration.Hours()); err != nil {
		return lease.Lease{}, err
	}
	target := req.Node
	if target != "" {
		if err := lease.ValidNodeName(target); err != nil {
			return lease.Lease{}, lease.Invalidf("%v", err)
		}
	} else if len(br.GPUs) == 0 && len(v.Nodes) > 1 {
		if target, err = lease.BookNode(v.Candidates(), n, br.Model, br.Tags, s.cfg.Policy.Pools, b.c.User, br.Start, br.Start.Add(br.Duration)); err != nil {
			return lease.Lease{}, err
		}
	} else {
		target = s.cfg.Node
	}
	if target == s.cfg.Node {
		return s.deps.Node.Book(b.c, br, req.RequestID)
	}
	who, err := b.actor(target)
	if err != nil {
		return lease.Lease{}, err
	}
	r, err := peer.Call(ctx, s.deps.Peers, target, peer.Book, who, peer.BookRequest{
		Count: br.Count, GPUs: br.GPUs, Start: br.Start, Duration: br.Duration, Kind: br.Kind, Note: br.Note,
		Model: br.Model, Tags: br.Tags, Run: peerRun(jobRun(br.Job)), RequestID: req.RequestID,
	})
	if err != nil {
		return lease.Lease{}, err
	}
	s.awaitVisible(ctx, r.Lease.ID)
	return r.Lease, nil
}

func jobRun(j *lease.Job) *node.Run {
	if j == nil {
		return nil
	}
	return &node.Run{Name: j.Name, Command: j.Command, Dir: j.Dir, UserEnv: j.Env, Job: j}
}

// Bookings is `dibs bookings`: every booking the cluster knows, soonest
// first; a booked run's command, directory and environment only for its
// holder and admins.
func (b *Bound) Bookings(context.Context) (api.Bookings, error) {
	out := api.Bookings{Bookings: []lease.Lease{}}
	for _, l := range b.s.View().Bookings() {
		// Another person's booked run shows that it runs, not what.
		out.Bookings = append(out.Bookings, l.ShownTo(b.c))
	}
	slices.SortFunc(out.Bookings, func(x, y lease.Lease) int {
		return cmp.Or(x.StartedAt.Compare(y.StartedAt), cmp.Compare(x.ID, y.ID))
	})
	return out, nil
}

// Unbook withdraws a booking before it starts: its holder (or an admin), at
// the node that holds it.
func (b *Bound) Unbook(ctx context.Context, id string) error {
	if _, ok := lease.NodeOfID(id); !ok {
		return lease.Invalidf("%q is not a booking id: ids look like node01-42 (`dibs bookings` shows them)", id)
	}
	v := b.s.View()
	if _, ok := v.FindLease(id); ok {
		return lease.Invalidf("%s is a lease now, not a booking (it has begun): end it with dibs release %s", id, id)
	}
	found := slices.ContainsFunc(v.Bookings(), func(l lease.Lease) bool { return l.ID == id })
	if !found {
		return &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no booking %s: `dibs bookings` shows them", id)}
	}
	_, err := b.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
	return err
}

// registerBookingOps serves bookings made at other nodes for this one.
func (s *Service) registerBookingOps() {
	peer.Handle(s.deps.Peers, peer.Book, func(ctx context.Context, from string, who peer.Actor, r peer.BookRequest) (peer.LeaseReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LeaseReply{}, err
		}
		br := r.Booking()
		if br.Job != nil {
			if err := checkRun(br.Job.Command, br.Job.Dir, br.Job.Name, br.Job.Env); err != nil {
				return peer.LeaseReply{}, err
			}
		}
		l, err := s.deps.Node.Book(b.c, br, r.RequestID)
		return peer.LeaseReply{Lease: l}, err
	})
}
