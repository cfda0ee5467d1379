package core

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// registerPeerOps serves the protocol: what other agents (and this one's
// scheduler) ask of this node. Requests for a user act as this node's
// account of that name; the cluster's own steps (preempt, started) must
// come as the system.
func (s *Service) registerPeerOps() {
	m := s.deps.Peers
	peer.Handle(m, peer.Claim, func(ctx context.Context, from string, who peer.Actor, r peer.ClaimRequest) (peer.LeaseReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LeaseReply{}, err
		}
		// The claim as the requester made it; its bounds were checked as
		// it was decoded (ClaimRequest.Validate), its session name here.
		if err := checkSession(r.Run); err != nil {
			return peer.LeaseReply{}, err
		}
		ctx, done := sessionContext(ctx)
		defer done()
		l, err := b.grantHere(ctx, s.View(), r)
		return peer.LeaseReply{Lease: l}, err
	})
	peer.Handle(m, peer.Release, func(ctx context.Context, from string, who peer.Actor, r peer.ReleaseRequest) (peer.ReleaseReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.ReleaseReply{}, err
		}
		for _, id := range r.IDs {
			if n, _ := lease.NodeOfID(id); n != s.cfg.Node {
				return peer.ReleaseReply{}, refusal.Invalidf("lease %s is not on %s", id, s.cfg.Node)
			}
		}
		ids, err := b.releaseHere(ctx, r.IDs, r.Kill)
		return peer.ReleaseReply{Released: ids}, err
	})
	peer.Handle(m, peer.Extend, func(ctx context.Context, from string, who peer.Actor, r peer.ExtendRequest) (peer.LeaseReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LeaseReply{}, err
		}
		l, err := s.deps.Node.Extend(b.c, r.ID, r.Duration)
		return peer.LeaseReply{Lease: l}, err
	})
	peer.Handle(m, peer.Start, func(ctx context.Context, from string, who peer.Actor, r peer.StartRequest) (peer.StartReply, error) {
		if who.User != r.Entry.User {
			return peer.StartReply{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("a start of %s must act for its submitter %s", r.Entry.ID, r.Entry.User)}
		}
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.StartReply{}, err
		}
		ctx, done := sessionContext(ctx)
		defer done()
		return b.startPart(ctx, r)
	})
	peer.Handle(m, peer.Started, func(ctx context.Context, from string, who peer.Actor, r peer.StartedRequest) (peer.Empty, error) {
		if !who.System {
			return peer.Empty{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only the scheduler says an entry started"}
		}
		// The origin records the start; its notice tells the submitter.
		s.deps.Origin.MarkStarted(r.Key)
		return peer.Empty{}, nil
	})
	peer.Handle(m, peer.Place, func(ctx context.Context, from string, who peer.Actor, r peer.PlaceRequest) (peer.PlaceReply, error) {
		if !who.System {
			return peer.PlaceReply{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only a scheduler places a queued entry"}
		}
		// A start this origin can see already (its Started message lost)
		// is not placed again.
		p := s.View().Progress()
		if _, started := p.Started[r.Key]; started {
			// Its start event's notice tells the submitter.
			s.deps.Origin.MarkStarted(r.Key)
			return peer.PlaceReply{}, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s has started already", r.Key)}
		}
		if p.Reserving[r.Key] {
			return peer.PlaceReply{}, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s is being reserved", r.Key)}
		}
		job, err := s.deps.Origin.Place(r.Key, r.Placer)
		return peer.PlaceReply{Job: job}, err
	})
	peer.Handle(m, peer.Refused, func(ctx context.Context, from string, who peer.Actor, r peer.RefusedRequest) (peer.Empty, error) {
		if !who.System {
			return peer.Empty{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only the scheduler reports a refused start"}
		}
		why := fmt.Sprintf("%s refused it: %s", r.Node, r.Reason)
		if e, ok := s.deps.Origin.Refuse(r.Key, why); ok {
			s.record(event.EntryEvent(event.EventFail, e, why, s.deps.Clock.Now()))
			s.deps.Kick()
		}
		return peer.Empty{}, nil
	})
	peer.Handle(m, peer.Preempt, func(ctx context.Context, from string, who peer.Actor, r peer.PreemptRequest) (peer.Empty, error) {
		if !who.System {
			return peer.Empty{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only the cluster preempts a lease"}
		}
		return peer.Empty{}, s.deps.Node.Preempt(r.Lease, r.Token, r.Reason, syscall.Signal(r.Signal))
	})
	peer.Handle(m, peer.Cancel, func(ctx context.Context, from string, who peer.Actor, r peer.CancelRequest) (peer.Empty, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.Empty{}, err
		}
		if err := s.deps.Origin.Cancel(b.c, r.ID); err != nil {
			return peer.Empty{}, err
		}
		s.deps.Kick()
		return peer.Empty{}, nil
	})
	s.registerBookingOps()
	s.registerSweepOps()
	s.registerUsageByDay()
	peer.Handle(m, peer.Usage, func(ctx context.Context, from string, who peer.Actor, r peer.UsageRequest) (peer.UsageReply, error) {
		u, err := s.deps.Node.Usage().UsageSince(r.Since)
		if err != nil {
			return peer.UsageReply{}, err
		}
		idle, err := s.deps.Node.Usage().IdleSince(r.Since)
		return peer.UsageReply{GPUSeconds: u, IdleGPUSeconds: idle}, err
	})
}

// sessionContext is a peer request's context for granting, and starting
// the session of, what it asks: cancelled with the request (this agent
// stopping), but without its deadline. That deadline is the requester's
// patience (gossip's 3 s), shorter than a loaded node's tmux may take to
// make a session; cut off then, a start that was only slow would fail
// the run. The launcher bounds each tmux call itself
// (launch.Options.CallTimeout); a requester that gave up hears nothing
// and sees the lease in the node's state.
func sessionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return out, func() { stop(); cancel() }
}

// startPart starts, reserves or commits this node's part of a queued
// attempt, as the entry's user.
func (b *Bound) startPart(ctx context.Context, r peer.StartRequest) (peer.StartReply, error) {
	s := b.s
	e := r.Entry
	host := s.cfg.Node
	if cl := s.link(); cl != nil {
		host = cl.Host()
	}
	claim, err := e.RankClaim(r.GPUs, r.Rank)
	if err != nil {
		return peer.StartReply{}, err
	}
	// The job's bounds came checked with the request (peer runs
	// StartRequest.Validate, the entry's Validate, on every start it sends
	// and every one it decodes); the session's name is the task's and
	// rank's, made by RankClaim, so the launcher's rule (which bounds its
	// length too) is checked here, as for a claim from a peer.
	if err := checkSession(claim.Run); err != nil {
		return peer.StartReply{}, err
	}
	run := node.RunOf(claim.Run)
	if run != nil {
		// The queue's part: every rank records its exit, and the job kept
		// for export is the one submitted (its launcher named).
		run.RecordExit = true
		run.Job = e.Job.ForExport()
	}
	switch r.Phase {
	case peer.PhaseStart:
		if run != nil && (e.Job.Torchrun || e.Job.PerGPU) {
			// A single-node run with a launcher: its rendezvous is on
			// this node (a gang's comes with its commit).
			port, err := node.FreePort("127.0.0.1")
			if err != nil {
				return peer.StartReply{}, fmt.Errorf("find a free port for the rendezvous: %w", err)
			}
			e.Nodes, e.GPUsPerNode = 1, len(r.GPUs)
			run.Env, run.Command = launchRank(e, queue.RankEnv(queue.RendezvousEnv(e, []string{"127.0.0.1"}, port), 0), run.Command)
			run.Workers = rankWorkers(e)
		}
		l, err := s.deps.Node.Grant(ctx, b.c, node.Grant{Claim: claim, Run: run, Entry: e.Key(), Borrowed: r.Borrowed})
		return peer.StartReply{Lease: l, Host: host}, err
	case peer.PhaseReserve:
		l, err := s.deps.Node.Grant(ctx, b.c, node.Grant{Claim: claim, Run: run, Entry: e.Key(), Gang: r.Gang, Rank: r.Rank, Borrowed: r.Borrowed, ReserveFor: s.cfg.Sched.ReservationTTL})
		if err != nil {
			return peer.StartReply{}, err
		}
		out := peer.StartReply{Lease: l, Host: host}
		if r.Rank == 0 {
			if out.Port, err = node.FreePort(host); err != nil {
				return out, fmt.Errorf("find a free port for the rendezvous: %w", err)
			}
		}
		return out, nil
	case peer.PhaseCommit:
		if run != nil {
			run.Env, run.Command = launchRank(e, withGlooInterface(r.Env, host), run.Command)
			run.Workers = rankWorkers(e)
		}
		l, err := s.deps.Node.Commit(ctx, b.c, e.Key(), e.Duration, run)
		return peer.StartReply{Lease: l, Host: host}, err
	}
	return peer.StartReply{}, refusal.Invalidf("unknown start phase %q", r.Phase)
}

// withGlooInterface adds GLOO_SOCKET_IFNAME, the interface that holds
// host (the address the gang knows this node by), to a rank's
// environment. Without it gloo takes the address the host name resolves
// to, which on Debian is 127.0.1.1 (/etc/hosts), and the other nodes'
// ranks cannot reach it ("connect [127.0.0.1]…: Connection refused").
// NCCL finds its interface by itself; this is for torch's CPU backend.
func withGlooInterface(env map[string]string, host string) map[string]string {
	ifname := node.InterfaceOf(host)
	if ifname == "" {
		return env
	}
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out["GLOO_SOCKET_IFNAME"] = ifname
	return out
}

// launchRank is a rank's environment and command under the launcher its
// job asked for: torchrun (its rendezvous endpoint in the environment,
// never on its command line: queue.TorchrunEnv), dibs's own one process
// per GPU, or none.
func launchRank(e queue.QueueEntry, env map[string]string, cmd []string) (map[string]string, []string) {
	switch {
	case e.Job.Torchrun:
		return queue.TorchrunEnv(env), queue.TorchrunCommand(e, env, cmd)
	case e.Job.PerGPU:
		return env, queue.PerGPUCommand(cmd)
	}
	return env, cmd
}

// rankWorkers is how many processes share a rank's cores: torchrun's
// workers, one per GPU (dibs's own per-GPU copies bind each to its GPU's
// cores themselves, `_cpus rank`); 1 for a plain command.
func rankWorkers(e queue.QueueEntry) int {
	if e.Job != nil && e.Job.Torchrun && e.GPUsPerNode > 0 {
		return e.GPUsPerNode
	}
	return 1
}
