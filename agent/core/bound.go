package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Bound is the service as one caller may use it: what every front door
// hands its requests to. The caller was resolved once, at the edge.
type Bound struct {
	s *Service
	c lease.Caller
	// readOnly, when set, refuses every change (an agent that does not run
	// as root serving someone else; an SSH identity with no account here).
	readOnly error
}

// Caller is who this is bound to.
func (b *Bound) Caller() lease.Caller { return b.c }

func (b *Bound) write() error { return b.readOnly }

// awaitVisible waits (briefly) until a lease granted elsewhere shows in
// this agent's view, so the person's next command here sees what they just
// got.
func (s *Service) awaitVisible(ctx context.Context, id string) {
	s.awaitView(ctx, func(v queue.ClusterView) bool {
		_, ok := v.FindLease(id)
		return ok
	})
}

// awaitView waits, a second at most, until this agent's view satisfies
// shows: what another agent granted reaches this one by gossip, and an
// answer should not run ahead of the next command's view. It gives up
// quietly at the deadline or when ctx ends (the grant stands either way).
// It wakes on changes; it does not poll. Every wait for a grant to become
// visible goes through here.
func (s *Service) awaitView(ctx context.Context, shows func(queue.ClusterView) bool) {
	deadline := s.deps.Clock.After(time.Second)
	for {
		changed := s.Changes()
		if shows(s.View()) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// leaseResponse is a lease as the local API answers it, Here set when it
// is on this node (a claim's answer adds its notices: granted).
func (s *Service) leaseResponse(l lease.Lease) api.ClaimResponse {
	if l.ID == "" {
		return api.ClaimResponse{}
	}
	return api.ClaimResponse{
		ID: l.ID, Node: l.Node, GPUs: l.GPUs, CUDAVisibleDevices: l.CUDAVisibleDevices(),
		Token: l.Token, Kind: string(l.Kind), ExpiresAt: l.ExpiresAt, Session: l.Session,
		MIG: l.MIG, MemMiB: l.MemMiB, Borrowed: l.Borrowed, Here: l.Node == s.cfg.Node, CPUs: lease.CPUUnion(l.CPUs),
	}
}

// mine reports whether l is the caller's: by uid on this node, by name on
// the others (uids differ between nodes; names are what crosses them).
func (b *Bound) mine(l lease.Lease) bool {
	if l.Node == b.s.cfg.Node {
		return l.UID == b.c.UID
	}
	return l.User == b.c.User
}

// Release ends leases the caller holds (or any, for an admin), killing
// their sessions. Every id is checked before any lease ends, so a bad one
// leaves nothing half-done; leases on other nodes are ended by their own
// agents.
func (b *Bound) Release(ctx context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	if err := b.write(); err != nil {
		return api.ReleaseResponse{}, err
	}
	ids := req.IDs
	if req.All {
		if len(ids) > 0 {
			return api.ReleaseResponse{}, refusal.Invalidf("give lease ids or --all, not both")
		}
		v := b.s.View()
		for _, l := range v.Leases() {
			if b.mine(l) {
				ids = append(ids, l.ID)
			}
		}
		if len(ids) == 0 {
			return api.ReleaseResponse{Released: []string{}}, nil
		}
	}
	if len(ids) == 0 {
		return api.ReleaseResponse{}, refusal.Invalidf("name the lease to release (`dibs ls` shows ids), or use --all")
	}
	var local []string
	remote := map[string][]string{}
	for _, id := range ids {
		n, ok := lease.NodeOfID(id)
		if !ok {
			return api.ReleaseResponse{}, refusal.Invalidf("%q is not a lease id: ids look like node01-42 (`dibs ls` shows them)", id)
		}
		if n != b.s.cfg.Node {
			remote[n] = append(remote[n], id)
			continue
		}
		if err := b.s.deps.Node.CheckRelease(b.c, id); err != nil {
			return api.ReleaseResponse{}, err
		}
		local = append(local, id)
	}
	out := api.ReleaseResponse{Released: []string{}}
	for _, id := range local {
		if err := b.releaseOne(ctx, id, req.Kill); err != nil {
			return out, err
		}
		out.Released = append(out.Released, id)
	}
	for n, rids := range remote {
		who, err := b.actor(n)
		if err != nil {
			return out, err
		}
		// An agent before peer.HardReleaseSince ignores Kill: its
		// sessions end with tmux's hangup alone, as before.
		if nv, ok := b.s.View().Node(n); req.Kill && ok && nv.Protocol > 0 && nv.Protocol < peer.HardReleaseSince {
			b.s.deps.Log.Info("release with kill to an older agent: its sessions end with tmux's hangup alone", "node", n, "protocol", nv.Protocol, "leases", rids)
		}
		r, err := peer.Call(ctx, b.s.deps.Peers, n, peer.Release, who, peer.ReleaseRequest{IDs: rids, Kill: req.Kill})
		out.Released = append(out.Released, r.Released...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// releaseOne ends one lease of this node; kill sends its session SIGKILL
// first (api.ReleaseRequest.Kill).
func (b *Bound) releaseOne(ctx context.Context, id string, kill bool) error {
	if kill {
		return b.s.deps.Node.ReleaseHard(ctx, b.c, id)
	}
	return b.s.deps.Node.Release(ctx, b.c, id)
}

// releaseHere ends leases of this node for a forwarded request.
func (b *Bound) releaseHere(ctx context.Context, ids []string, kill bool) ([]string, error) {
	for _, id := range ids {
		if err := b.s.deps.Node.CheckRelease(b.c, id); err != nil {
			return nil, err
		}
	}
	out := []string{}
	for _, id := range ids {
		if err := b.releaseOne(ctx, id, kill); err != nil {
			return out, err
		}
		out = append(out, id)
	}
	return out, nil
}

// Extend moves the end of a lease the caller holds.
func (b *Bound) Extend(ctx context.Context, req api.ExtendRequest) (api.ClaimResponse, error) {
	if err := b.write(); err != nil {
		return api.ClaimResponse{}, err
	}
	n, ok := lease.NodeOfID(req.ID)
	if !ok {
		return api.ClaimResponse{}, refusal.Invalidf("%q is not a lease id: ids look like node01-42 (`dibs ls` shows them)", req.ID)
	}
	d, err := words.ParseDuration(req.Duration)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	if n == b.s.cfg.Node {
		l, err := b.s.deps.Node.Extend(b.c, req.ID, d)
		return b.s.leaseResponse(l), err
	}
	who, err := b.actor(n)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	r, err := peer.Call(ctx, b.s.deps.Peers, n, peer.Extend, who, peer.ExtendRequest{ID: req.ID, Duration: d})
	return b.s.leaseResponse(r.Lease), err
}

// Adopt takes a process the caller started without a lease into one.
func (b *Bound) Adopt(ctx context.Context, req api.AdoptRequest) (api.ClaimResponse, error) {
	if err := b.write(); err != nil {
		return api.ClaimResponse{}, err
	}
	var d time.Duration
	if req.Duration != "" {
		var err error
		if d, err = words.ParseDuration(req.Duration); err != nil {
			return api.ClaimResponse{}, err
		}
	}
	if req.PID <= 0 {
		return api.ClaimResponse{}, refusal.Invalidf("%d is not a process id", req.PID)
	}
	l, err := b.s.deps.Node.Adopt(b.c, req.PID, d, req.Note)
	return b.s.leaseResponse(l), err
}

// AdoptContainer records a container whose processes run on the caller's
// leased GPUs on this node as the caller's. The container runs here, so
// this node's agent, the single writer of its leases, decides.
func (b *Bound) AdoptContainer(ctx context.Context, req api.AdoptContainerRequest) (api.AdoptContainerResponse, error) {
	if err := b.write(); err != nil {
		return api.AdoptContainerResponse{}, err
	}
	id, err := job.ParseContainerID(req.Container)
	if err != nil {
		return api.AdoptContainerResponse{}, err
	}
	ls, err := b.s.deps.Node.AdoptContainer(b.c, id)
	if err != nil {
		return api.AdoptContainerResponse{}, err
	}
	return api.AdoptContainerResponse{Container: id, Leases: ls}, nil
}

// Attach says how the caller reaches a lease's session: tmux attach here,
// or ssh to the node that runs it. An empty id picks the caller's newest
// session; otherwise id is any name `dibs logs` takes (node.MatchRun): a lease
// id, a session name, a queued request (the rank on this node, else rank
// 0) or an array (when one task of it runs).
func (b *Bound) Attach(ctx context.Context, id string) (api.AttachResponse, error) {
	v := b.s.View()
	var found *lease.Lease
	var named []lease.Lease
	for _, l := range v.Leases() {
		if !b.mine(l) && !b.c.Admin {
			if l.ID == id {
				return api.AttachResponse{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("lease %s belongs to %s: you can attach only to your own sessions", id, l.User)}
			}
			continue
		}
		if id == "" && l.Session != "" && (found == nil || l.StartedAt.After(found.StartedAt)) {
			found = &l
		}
		if l.ID == id {
			found = &l
			break
		}
		if _, ok := node.MatchRun(id, l.ID, l.Session, l.Entry); ok && l.Session != "" && l.ReservedUntil.IsZero() {
			named = append(named, l)
		}
	}
	if found == nil && len(named) > 0 {
		pick, err := b.pickSession(id, named)
		if err != nil {
			return api.AttachResponse{}, err
		}
		found = &pick
	}
	switch {
	case found == nil && id == "":
		return api.AttachResponse{}, &refusal.Error{Code: refusal.CodeNotFound, Msg: "you have no lease with a session: start one with `dibs run -g 1`"}
	case found == nil:
		return api.AttachResponse{}, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no live run of yours named %s: give a lease id (node01-42), a session name or a queued request (`dibs ls` shows the live ones)", id)}
	case found.Session == "":
		return api.AttachResponse{}, refusal.Invalidf("lease %s has no session (it was claimed, not run): use `dibs run` to get one", found.ID)
	}
	u := launch.User{Name: found.User, UID: found.UID}
	if found.Node == b.s.cfg.Node {
		if lu, err := b.s.deps.Accounts.ByUID(found.UID); err == nil {
			u = lu
		}
		return api.AttachResponse{Lease: *found, Local: true, Command: b.s.deps.Attach(u, found.Session)}, nil
	}
	host := found.Node
	if cl := b.s.link(); cl != nil {
		host = cl.SSHHost(found.Node)
	}
	argv := append([]string{"ssh", "-t", host}, b.s.deps.Attach(u, found.Session)...)
	return api.AttachResponse{Lease: *found, Local: false, Command: argv}, nil
}

// pickSession chooses among the live sessions that answer to name: one
// request's ranks (a gang) are one run, so its rank on this node, else its
// lowest rank; sessions of several requests (an array's tasks, a --name
// used twice) are for the person to pick from, listed in one line.
func (b *Bound) pickSession(name string, ls []lease.Lease) (lease.Lease, error) {
	slices.SortFunc(ls, func(x, y lease.Lease) int {
		if c := strings.Compare(x.Entry, y.Entry); c != 0 {
			return c
		}
		return x.Rank - y.Rank
	})
	one := slices.IndexFunc(ls, func(l lease.Lease) bool { return l.Entry == "" || l.Entry != ls[0].Entry }) < 0
	if !one && len(ls) > 1 {
		var opts []string
		for _, l := range ls {
			o := l.ID
			if task, _, _ := strings.Cut(l.Entry, "#"); task != "" && task != name {
				o += " (" + task + ")"
			}
			opts = append(opts, o)
		}
		if len(opts) > 8 {
			opts = append(opts[:8:8], "…")
		}
		return lease.Lease{}, refusal.Invalidf("%d of your sessions answer to %s: attach to one by its lease id: %s", len(ls), name, strings.Join(opts, ", "))
	}
	for _, l := range ls {
		if l.Node == b.s.cfg.Node {
			return l, nil
		}
	}
	return ls[0], nil
}

// Status is the agent's view of itself and the cluster.
func (b *Bound) Status(context.Context) (api.Status, error) { return b.s.Status(), nil }
