package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Bookings, MIG instances, shared GPUs and pools: the service's side.

// bookingsOf is a node's bookings as this agent knows them, without
// building the whole view (which sums usage).
func (s *Service) bookingsOf(node string) []lease.Lease {
	if node == s.cfg.Node {
		return s.deps.Node.State().Bookings
	}
	if cl := s.link(); cl != nil {
		for _, p := range cl.Peers() {
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

// bookingOf makes the one typed booking of a request, at the edge, and
// checks it once (lease.BookRequest.Validate, and a session name tmux
// keeps as given): from here it is carried as is, to this node's single
// writer or in the book request to the node that owns the GPUs, every part
// of a booking across nodes the same but for its group.
func bookingOf(req api.BookRequest) (lease.BookRequest, error) {
	br := lease.BookRequest{Count: req.Count, GPUs: req.GPUs, Start: req.Start, Note: req.Note,
		Model: req.Model, Tags: req.Tags, Run: req.Run, RequestID: req.RequestID}
	var err error
	if br.Where, err = whereOf(req.Node, req.NodeChoice); err != nil {
		return lease.BookRequest{}, err
	}
	if br.Kind, err = lease.ParseKind(req.Kind); err != nil {
		return lease.BookRequest{}, err
	}
	if req.Duration == "" {
		return lease.BookRequest{}, refusal.Invalidf("say how long the booking is: --for 3h")
	}
	if br.Duration, err = words.ParseDuration(req.Duration); err != nil {
		return lease.BookRequest{}, err
	}
	if err := br.Validate(); err != nil {
		return lease.BookRequest{}, err
	}
	if err := checkSession(br.Run); err != nil {
		return lease.BookRequest{}, err
	}
	return br, nil
}

// Book books GPUs ahead: on the node named, or on the node of the pools
// asked for where they fit best; with Nodes > 1, on that many nodes at
// once (bookAcross). The node that owns the GPUs decides and keeps the
// booking; how much one person may book is counted cluster-wide here
// first.
func (b *Bound) Book(ctx context.Context, req api.BookRequest) (lease.Lease, error) {
	if err := b.write(); err != nil {
		return lease.Lease{}, err
	}
	br, err := bookingOf(req)
	if err != nil {
		return lease.Lease{}, err
	}
	if br.Run != nil {
		if err := b.s.canRun(b.c); err != nil {
			return lease.Lease{}, err
		}
	}
	s := b.s
	v := s.View()
	if br.RequestID != "" {
		for _, l := range append(v.Bookings(), v.Leases()...) {
			// A retried booking across nodes answers with its first part.
			if l.RequestID == br.RequestID && l.User == b.c.User && (l.Group == "" || l.Group == l.ID) {
				if req.Nodes > 1 && l.Booked && l.Group == l.ID {
					// The first attempt may have been cut short (its
					// agent restarted): make the parts it did not.
					return b.bookAcross(ctx, req, br, v, &l)
				}
				return l, nil
			}
		}
	}
	if err := knownNodes(v, br.Where); err != nil {
		return lease.Lease{}, err
	}
	if req.Nodes > 1 {
		return b.bookAcross(ctx, req, br, v, nil)
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
		if err := words.ValidNodeName(target); err != nil {
			return lease.Lease{}, refusal.Wrap(refusal.CodeInvalid, err)
		}
	} else if len(br.GPUs) == 0 && len(v.Nodes) > 1 {
		target, err = pickAllowed(br.Where, v.Candidates(), func(cands []lease.Candidate) (string, error) {
			return lease.BookNode(cands, n, br.Model, br.Tags, s.cfg.Policy.Pools, b.c.User, br.Start, br.Start.Add(br.Duration))
		})
		if err != nil {
			return lease.Lease{}, err
		}
	} else {
		target = s.cfg.Node
	}
	if !br.Where.Allows(target) {
		return lease.Lease{}, refusal.Invalidf("its --nodelist/--exclude keep it off %s (%s), the node it would be booked on: name GPUs on a node they allow, or change them", target, br.Where)
	}
	l, err := b.bookOn(ctx, target, br)
	if err != nil {
		return lease.Lease{}, err
	}
	if target != s.cfg.Node {
		// A booking is not a lease: wait for it among the bookings, or
		// the wait lasts its whole second.
		s.awaitBookings(ctx, []string{l.ID})
	}
	return l, nil
}

// bookOn has node book br, as the edge made it: this node's own Node, or
// another's agent.
func (b *Bound) bookOn(ctx context.Context, node string, br lease.BookRequest) (lease.Lease, error) {
	s := b.s
	if node == s.cfg.Node {
		return s.deps.Node.Book(b.c, br)
	}
	who, err := b.actor(node)
	if err != nil {
		return lease.Lease{}, err
	}
	r, err := peer.Call(ctx, s.deps.Peers, node, peer.Book, who, br)
	if err != nil {
		return lease.Lease{}, err
	}
	return r.Lease, nil
}

// bookAcross books br.Count GPUs on each of req.Nodes nodes, all or
// nothing, as a gang reserves: the nodes are chosen so that each can take
// its part, the first part is booked and names the whole, each other part
// is booked linked to it, and if any node refuses, the parts made are
// withdrawn and the refusal says which node and why. Each part is an
// ordinary booking of its node, so claims, the queue and backfill there
// honour it as any other. first, when set, is the first part of an
// earlier attempt of the same request (a retry after this agent
// restarted): its parts are kept and only the missing ones are made, all
// or nothing as before.
func (b *Bound) bookAcross(ctx context.Context, req api.BookRequest, br lease.BookRequest, v queue.ClusterView, first *lease.Lease) (lease.Lease, error) {
	s := b.s
	switch {
	case br.Run != nil:
		return lease.Lease{}, refusal.Invalidf("a booked run starts on one node: book the nodes with dibs book --nodes %d --gpus-per-node %d, and start the ranks with dibs run when it begins", req.Nodes, br.Count)
	case len(br.GPUs) > 0:
		return lease.Lease{}, refusal.Invalidf("--ids names GPUs of one node: with --nodes give --gpus-per-node M")
	case req.Node != "":
		return lease.Lease{}, refusal.Invalidf("--node books one node: drop it, and dibs picks %d nodes that can take the booking", req.Nodes)
	case br.Count <= 0:
		return lease.Lease{}, refusal.Invalidf("say how many GPUs to book on each node: --gpus-per-node M")
	case req.Nodes > lease.MaxBookingNodes:
		return lease.Lease{}, refusal.Invalidf("a booking may span at most %d nodes, not %d", lease.MaxBookingNodes, req.Nodes)
	}
	if err := s.Require(peer.MultiNodeBooking); err != nil {
		return lease.Lease{}, err
	}
	var made []string
	cands := v.Candidates()
	if first != nil {
		for _, l := range v.Bookings() {
			if l.Group == first.ID {
				made = append(made, l.ID)
				cands = slices.DeleteFunc(cands, func(c lease.Candidate) bool { return c.Node == l.Node })
			}
		}
		if len(made) >= req.Nodes {
			return *first, nil
		}
	}
	need := req.Nodes - len(made)
	if err := lease.CheckBookingLength(s.cfg.Policy, br.Duration); err != nil {
		return lease.Lease{}, err
	}
	if err := lease.CheckBookingQuota(s.cfg.Policy, b.c.User, v.Bookings(), float64(need*br.Count)*br.Duration.Hours()); err != nil {
		b.withdraw(ctx, made)
		return lease.Lease{}, err
	}
	if !br.Where.IsZero() {
		if cands = br.Where.Filter(cands); len(cands) < need {
			b.withdraw(ctx, made)
			return lease.Lease{}, br.Where.NoNodeLeft(req.Nodes, len(cands)+len(made))
		}
	}
	nodes, err := lease.BookNodes(cands, need, br.Count, br.Model, br.Tags, s.cfg.Policy.Pools, b.c.User, br.Start, br.Start.Add(br.Duration))
	if err != nil {
		b.withdraw(ctx, made)
		return lease.Lease{}, err
	}
	var head lease.Lease
	if first != nil {
		head = *first
	}
	for _, node := range nodes {
		part := br
		part.Lead, part.Group = head.ID == "", head.ID
		l, err := b.bookOn(ctx, node, part)
		if err != nil {
			b.withdraw(ctx, made)
			return lease.Lease{}, &refusal.Error{Code: refusal.CodeOf(err), Msg: fmt.Sprintf(
				"%s refused its part of the booking across %d nodes, so nothing was booked: %s", node, req.Nodes, errWords(err))}
		}
		made = append(made, l.ID)
		if head.ID == "" {
			head = l
		}
	}
	s.awaitBookings(ctx, made)
	return head, nil
}

// withdraw releases the parts of a booking across nodes that were made
// before another node refused. It runs even when the caller's context is
// done, for a short while: a part left behind would hold GPUs for nothing.
func (b *Bound) withdraw(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := b.Release(wctx, api.ReleaseRequest{IDs: ids}); err != nil {
		b.s.log.Warn("withdraw the parts of a refused booking across nodes", "bookings", ids, "err", err)
	}
}

// awaitBookings waits, a second at most, until this agent's view shows
// every booking of ids, so `dibs bookings` right after shows the whole.
func (s *Service) awaitBookings(ctx context.Context, ids []string) {
	s.awaitView(ctx, func(v queue.ClusterView) bool {
		seen := 0
		for _, l := range v.Bookings() {
			if slices.Contains(ids, l.ID) {
				seen++
			}
		}
		return seen >= len(ids)
	})
}

func partsLeft(n int) string {
	if n == 1 {
		return "the part is left"
	}
	return "the parts are left"
}

// errWords is a refusal's words without a code's prefix.
func errWords(err error) string {
	if e := (*refusal.Error)(nil); errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
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
// the node that holds it. A booking across nodes is withdrawn whole, by the
// id of any of its parts; a part whose node does not answer is named, and
// the same command withdraws it later (the id still names what is left).
func (b *Bound) Unbook(ctx context.Context, id string) error {
	if _, ok := lease.NodeOfID(id); !ok {
		return refusal.Invalidf("%q is not a booking id: ids look like node01-42 (`dibs bookings` shows them)", id)
	}
	v := b.s.View()
	if _, ok := v.FindLease(id); ok {
		return refusal.Invalidf("%s is a lease now, not a booking (it has begun): end it with dibs release %s", id, id)
	}
	bookings := v.Bookings()
	group := ""
	for _, l := range bookings {
		if l.ID == id || l.Group == id {
			group = cmp.Or(l.Group, l.ID)
			break
		}
	}
	var ids []string
	for _, l := range bookings {
		if l.ID == id || group != "" && l.Group == group {
			ids = append(ids, l.ID)
		}
	}
	switch len(ids) {
	case 0:
		return &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no booking %s: `dibs bookings` shows them", id)}
	case 1:
		_, err := b.Release(ctx, api.ReleaseRequest{IDs: ids})
		return err
	}
	// Part by part, so a node that does not answer keeps only its own.
	var left []string
	var first error
	for _, pid := range ids {
		if _, err := b.Release(ctx, api.ReleaseRequest{IDs: []string{pid}}); err != nil {
			n, _ := lease.NodeOfID(pid)
			left = append(left, n)
			first = cmp.Or(first, err)
		}
	}
	switch {
	case len(left) == len(ids):
		return first // nothing withdrawn: the refusal says why (not the holder, say)
	case first != nil:
		return &refusal.Error{Code: refusal.CodeOf(first), Msg: fmt.Sprintf(
			"withdrew %d of the %d parts of booking %s; %s on %s: %s: run dibs unbook %s again when %s answers",
			len(ids)-len(left), len(ids), group, partsLeft(len(left)), strings.Join(left, ", "), errWords(first), group, strings.Join(left, ", "))}
	}
	return nil
}

// registerBookingOps serves bookings made at other nodes for this one.
func (s *Service) registerBookingOps() {
	peer.Handle(s.deps.Peers, peer.Book, func(ctx context.Context, from string, who peer.Actor, r peer.BookRequest) (peer.LeaseReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LeaseReply{}, err
		}
		// Its bounds were checked as it was decoded
		// (lease.BookRequest.Validate), its session name here.
		if err := checkSession(r.Run); err != nil {
			return peer.LeaseReply{}, err
		}
		l, err := s.deps.Node.Book(b.c, r)
		return peer.LeaseReply{Lease: l}, err
	})
}
