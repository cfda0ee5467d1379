package core

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// DoctorDeps are what the doctor's endpoints read beyond the service's own
// parts; the agent provides them (EnableDoctor).
type DoctorDeps struct {
	// Facts fills what only the agent knows of its node's report: the
	// cluster settings, the SSH address, tmux, why this probe backend, the
	// disk. The service adds the rest.
	Facts func(ctx context.Context) doctor.Report
	// Samples is this node's GPU samples since a time.
	Samples func(since time.Time) []doctor.Bucket
	// SquatSince is since when a GPU has been seen squatted (zero: not
	// known).
	SquatSince func(gpu int) time.Time
	// Sessions lists a user's tmux sessions on this node.
	Sessions func(ctx context.Context, u launch.User) ([]string, error)
}

// EnableDoctor registers the doctor's peer endpoints (peer.Health,
// peer.History), so `dibs doctor`, `dibs replay` and `dibs export` can ask
// this node. Call it once, before the cluster starts.
func (s *Service) EnableDoctor(d DoctorDeps) {
	peer.Handle(s.deps.Peers, peer.Health, func(ctx context.Context, from string, who peer.Actor, r peer.HealthRequest) (peer.HealthReply, error) {
		return peer.HealthReply{Report: s.report(ctx, d)}, nil
	})
	peer.Handle(s.deps.Peers, peer.History, func(ctx context.Context, from string, who peer.Actor, r peer.HistoryRequest) (peer.HistoryReply, error) {
		return s.history(r, d)
	})
	peer.Handle(s.deps.Peers, peer.DoctorTally, func(ctx context.Context, from string, who peer.Actor, r peer.TallyRequest) (peer.TallyReply, error) {
		t, err := s.deps.Node.Usage().DoctorTally(r.Since, r.Running)
		if err != nil {
			return peer.TallyReply{}, err
		}
		if err := t.Validate(); err != nil {
			// Too many people or weeks for a bounded reply: the caller
			// reads this node's ledger page by page instead.
			return peer.TallyReply{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("this node's tally does not fit a reply (%v): read its history", err)}
		}
		return peer.TallyPage(t, r.Page), nil
	})
}

// nodeTally reads a node's ledger since a time as doctor's totals, page
// by page. An agent that does not know the endpoint (protocol 6, or a
// protocol 7 build before it) refuses it, and is read as before: its
// ledger's entries, page by page, for Analyze to tally.
func (s *Service) nodeTally(ctx context.Context, node string, protocol int, since time.Time, running []string) (*doctor.Tally, []lease.LedgerEntry, error) {
	if protocol != 0 && protocol < 7 {
		led, err := s.nodeHistory(ctx, node, since, peer.HistoryLedger)
		return nil, led.Entries, err
	}
	var all doctor.Tally
	req := peer.TallyRequest{Since: since, Running: running}
	for ; req.Page < 1000; req.Page++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := peer.Call(cctx, s.deps.Peers, node, peer.DoctorTally, peer.System, req)
		cancel()
		if err != nil {
			if req.Page == 0 && refusal.CodeOf(err) != "" {
				led, err := s.nodeHistory(ctx, node, since, peer.HistoryLedger)
				return nil, led.Entries, err
			}
			return nil, nil, err
		}
		all.Add(r.Tally)
		if !r.More {
			return &all, nil, nil
		}
	}
	return nil, nil, fmt.Errorf("%s's tally did not end after 1000 pages", node)
}

// report is this node's report of itself: what the agent knows (d.Facts)
// and the facts of its leases, GPUs and sessions (doctor's rules).
func (s *Service) report(ctx context.Context, d DoctorDeps) doctor.Report {
	var r doctor.Report
	if d.Facts != nil {
		r = d.Facts(ctx)
	}
	st := s.deps.Node.State()
	now := s.deps.Clock.Now()
	r.Node, r.Version, r.Protocol, r.Wall = s.cfg.Node, s.cfg.Version, s.protocol(), now.Round(0)
	if r.Backend == "" {
		r.Backend = string(st.Snap.Host.Backend)
	}
	if r.DataDir == "" {
		r.DataDir = s.cfg.DataDir
	}
	r.Overdue, r.Squatted = doctor.LeaseFacts(st.Leases, st.Snap.GPUs, st.Judged, now, d.SquatSince)
	if d.Sessions != nil {
		r.StraySessions, r.Sessionless = doctor.SessionFacts(st.Leases, s.listSessions(ctx, d, st.Leases, now), now)
	}
	return r
}

// listSessions lists the tmux sessions of the users who hold a lease here
// or held one in the last week (doctor.SessionOwners), by user; a user
// whose sessions cannot be listed is left out.
func (s *Service) listSessions(ctx context.Context, d DoctorDeps, leases []lease.Lease, now time.Time) map[string][]string {
	// Who held a lease here in the week: the totals name them, without a
	// copy of the week's ledger.
	week, _ := s.deps.Node.Usage().DoctorTally(now.Add(-7*24*time.Hour), nil)
	listed := map[string][]string{}
	for _, name := range doctor.SessionOwners(leases, week) {
		u, err := s.deps.Accounts.ByName(name)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sessions, err := d.Sessions(cctx, u)
		cancel()
		if err != nil {
			continue
		}
		listed[name] = sessions
	}
	return listed
}

// Doctor is `dibs doctor`: every node's health, asked in parallel, and —
// unless the request skips it — the figures and verdict over the window,
// from every node's ledger and samples.
func (b *Bound) Doctor(ctx context.Context, req api.DoctorRequest) (api.DoctorReport, error) {
	s := b.s
	window := doctor.DefaultWindow
	if req.Window != "" {
		w, err := words.ParseDuration(req.Window)
		if err != nil {
			return api.DoctorReport{}, err
		}
		window = min(w, doctor.Keep)
	}
	v := s.View()
	rep := api.DoctorReport{Self: s.cfg.Node, GeneratedAt: v.Now.Round(0), Config: api.ConfigOf(s.cfg.Policy, s.cfg.Sched)}
	rep.Nodes = make([]doctor.NodeHealth, len(v.Nodes))
	var wg sync.WaitGroup
	for i := range v.Nodes {
		n := &v.Nodes[i]
		h := &rep.Nodes[i]
		*h = doctor.NodeHealth{Node: n.Name, Self: n.Self, State: s.shown(n, v.Now), Since: n.Since}
		if n.Self {
			h.State = queue.NodeAlive
		} else if n.State == queue.NodeDead || n.State == queue.NodeLeft {
			h.Error = fmt.Sprintf("%s is %s", n.Name, h.State)
			if h.State == queue.NodeRestarting {
				h.Error += fmt.Sprintf(": its agent is away, and the others keep its work for the grace (%s; queue.lost_after)", words.FormatDuration(s.cfg.Sched.LostAfter))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			t0 := s.deps.Clock.Now()
			r, err := peer.Call(cctx, s.deps.Peers, n.Name, peer.Health, peer.System, peer.HealthRequest{})
			t1 := s.deps.Clock.Now()
			if err != nil {
				h.Error = words.OneLine(err.Error())
				return
			}
			h.Reached, h.Report, h.RTT = true, &r.Report, t1.Sub(t0)
			h.Skew = r.Report.Wall.Sub(t0.Add(t1.Sub(t0) / 2))
			if n.Self {
				h.Skew = 0
			}
		}()
	}
	wg.Wait()
	rep.Checks = doctor.Checks(rep.Nodes, v.Now)
	if req.SkipHistory {
		return rep, nil
	}

	hist := doctor.History{Now: v.Now, Window: window, Buckets: map[string][]doctor.Bucket{}}
	since := v.Now.Add(-window)
	for i := range v.Nodes {
		n := &v.Nodes[i]
		hist.Nodes++
		hist.GPUs += len(n.Snap.GPUs)
		hist.Running = append(hist.Running, n.Leases...)
		for _, e := range n.Queue {
			if !e.Running {
				hist.Waiting = append(hist.Waiting, e)
			}
		}
		if !n.Alive() {
			hist.Missing = append(hist.Missing, n.Name)
		}
	}
	var mu sync.Mutex
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Alive() {
			continue
		}
		running := make([]string, 0, len(n.Leases))
		for _, l := range n.Leases {
			running = append(running, l.ID)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var led peer.HistoryReply
			var tally *doctor.Tally
			var err1 error
			switch {
			case n.Self && !req.Ledger:
				// This node's ledger is counted in memory here: its
				// totals, not its leases.
				var t doctor.Tally
				t, err1 = s.deps.Node.Usage().DoctorTally(since, running)
				tally = &t
			case n.Self:
				led.Entries, err1 = s.deps.Node.Usage().Ledger(since)
			case req.Ledger:
				led, err1 = s.nodeHistory(ctx, n.Name, since, peer.HistoryLedger)
			default:
				// Another node's totals cross, not its leases.
				tally, led.Entries, err1 = s.nodeTally(ctx, n.Name, n.Protocol, since, running)
			}
			smp, err2 := s.nodeHistory(ctx, n.Name, since, peer.HistorySamples)
			mu.Lock()
			defer mu.Unlock()
			if err1 != nil || err2 != nil {
				hist.Missing = append(hist.Missing, n.Name)
			}
			if tally != nil && err1 == nil {
				hist.Tallies = append(hist.Tallies, *tally)
			}
			hist.Ledger = append(hist.Ledger, led.Entries...)
			hist.Buckets[n.Name] = smp.Buckets
		}()
	}
	wg.Wait()
	slices.Sort(hist.Missing)
	slices.SortFunc(hist.Ledger, lease.ByEnd)
	f := doctor.Analyze(hist)
	f.CountServices(s.View().Leases())
	verdict := doctor.Decide(f, s.cfg.Policy, s.cfg.Sched)
	rep.Findings, rep.Verdict = &f, &verdict
	if req.Ledger {
		rep.Ledger, rep.Running = hist.Ledger, hist.Running
	}
	return rep, nil
}
