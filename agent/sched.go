package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// Ops between agents for the queue.
const (
	opCancel  = "cancel"
	opStart   = "start"
	opStarted = "started"
	opPreempt = "preempt"
	opUsage   = "usage"
)

// Start phases: a single-node run starts at once; a gang reserves every rank
// first and commits only when all hold.
const (
	phaseStart   = "start"
	phaseReserve = "reserve"
	phaseCommit  = "commit"
)

// startRequest asks a node to start (or reserve, or commit) its part of a
// queued request.
type startRequest struct {
	Entry    lease.QueueEntry  `json:"entry"`
	Phase    string            `json:"phase"`
	GPUs     []int             `json:"gpus"`
	Borrowed bool              `json:"borrowed,omitempty"`
	Gang     string            `json:"gang,omitempty"`
	Rank     int               `json:"rank,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// startResponse is a node's answer: the lease, and for a gang's rank 0 where
// the rendezvous listens.
type startResponse struct {
	Lease api.ClaimResponse `json:"lease"`
	Host  string            `json:"host"`
	Port  int               `json:"port,omitempty"`
}

// preemptRequest tells a node to signal a lease's session and end the lease
// after the grace.
type preemptRequest struct {
	Lease  string `json:"lease"`
	Token  uint64 `json:"token"`
	Reason string `json:"reason"`
	// Signal overrides the agent's preemption signal (SIGTERM for a gang).
	Signal int `json:"signal,omitempty"`
}

// inflightStart is a start the scheduler has sent and not yet seen in the
// cluster's state; its GPUs count as reserved meanwhile, so no other entry is
// planned onto them.
type inflightStart struct {
	at    time.Time
	ranks []lease.RankPlacement
	user  string
	uid   int
}

// kickScheduler asks for a scheduling pass soon; it never blocks.
func (a *Agent) kickScheduler() {
	select {
	case a.schedKick <- struct{}{}:
	default:
	}
}

// schedLoop reacts to arrivals and releases as they happen (kicks), with a
// slow tick as a safety net for what only time changes (reclaim graces).
func (a *Agent) schedLoop() {
	defer a.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-a.schedKick:
		case <-t.C:
		}
		a.watchRunning()
		if a.schedulerName() == a.cfg.NodeName {
			a.schedulePass()
		}
	}
}

// schedulerName is the lowest-named live member: every agent computes the
// same answer from the same membership, so exactly one schedules.
func (a *Agent) schedulerName() string {
	best := a.cfg.NodeName
	for _, r := range a.cluster.view() {
		if r.State == api.NodeAlive && r.HasState && r.Name < best {
			best = r.Name
		}
	}
	return best
}

// schedNodes is the cluster as the scheduler sees it.
func (a *Agent) schedNodes() []lease.SchedNode {
	a.mu.Lock()
	nodes := []lease.SchedNode{{Name: a.cfg.NodeName, Alive: true, Snap: a.snap, Leases: a.table.List(), Idle: lease.IdleTrackerFrom(a.idle.QuietSinceAll())}}
	a.mu.Unlock()
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName {
			continue
		}
		nodes = append(nodes, lease.SchedNode{Name: r.Name, Alive: r.State == api.NodeAlive && r.HasState, Snap: r.Snapshot, Leases: r.Leases, Idle: r.Idle})
	}
	slices.SortFunc(nodes, func(x, y lease.SchedNode) int { return strings.Compare(x.Name, y.Name) })
	return nodes
}

// localUsage is this node's decayed GPU-seconds per user, recomputed at most
// every few seconds (it reads the ledger).
func (a *Agent) localUsage() lease.Usage {
	a.usageMu.Lock()
	defer a.usageMu.Unlock()
	now := a.now()
	cur := a.usage.Load()
	if cur != nil && now.Sub(a.usageAt) < 5*time.Second && !a.usageDirty.Load() {
		return *cur
	}
	a.usageDirty.Store(false)
	ledger, err := a.store.Ledger(now.Add(-8 * a.cfg.Sched.HalfLife))
	if err != nil {
		a.logf("usage: %v", err)
		if cur != nil {
			return *cur
		}
		return lease.Usage{}
	}
	a.mu.Lock()
	active := a.table.List()
	a.mu.Unlock()
	u := lease.DecayedUsage(ledger, active, now, a.cfg.Sched.HalfLife)
	a.usage.Store(&u)
	a.usageAt = now
	return u
}

// clusterUsage sums every node's published usage.
func (a *Agent) clusterUsage() lease.Usage {
	out := lease.Usage{}
	for u, v := range a.localUsage() {
		out[u] += v
	}
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName {
			continue
		}
		for u, v := range r.Usage {
			out[u] += v
		}
	}
	return out
}

// schedulePass runs the rules over the cluster's queue and carries out what
// they say: starts, and reclaims of borrowed or idle leases.
func (a *Agent) schedulePass() {
	now := a.now()
	nodes := a.schedNodes()
	// started: entry keys with a committed lease somewhere; reserving: keys
	// with only a gang reservation so far (not yet running, not to restart).
	started := map[string]string{}
	reserving := map[string]bool{}
	for _, n := range nodes {
		for _, l := range n.Leases {
			switch {
			case l.Entry == "":
			case l.ReservedUntil.IsZero():
				started[l.Entry] = n.Name
			default:
				reserving[l.Entry] = true
			}
		}
	}
	// An attempt that already ran somewhere counts as started, even when
	// its lease is gone before its origin's "running" mark arrives.
	a.mu.Lock()
	for _, x := range a.ended {
		if !x.Reserved {
			started[x.Entry] = a.cfg.NodeName
		}
	}
	a.mu.Unlock()
	for _, r := range a.cluster.view() {
		if r.Name != a.cfg.NodeName && r.Extra != nil {
			for _, x := range r.Extra.Ended {
				if !x.Reserved {
					started[x.Entry] = r.Name
				}
			}
		}
	}
	all := a.allEntries()
	byID := make(map[string]lease.QueueEntry, len(all))
	for _, e := range all {
		byID[e.ID] = e
	}
	a.mu.Lock()
	for k, f := range a.inflight {
		id, _, isEntry := strings.Cut(k, "#")
		e, ok := byID[id]
		_, seen := started[k]
		// Done with it once its lease shows, the origin says it runs, or it
		// is gone; a stuck start is forgotten after a while.
		if now.Sub(f.at) > 15*time.Second || (isEntry && (seen || !ok || e.Running || e.Key() != k)) {
			delete(a.inflight, k)
			continue
		}
		if !isEntry {
			continue
		}
		// Until the start shows in the cluster's state, its GPUs are taken.
		for _, rk := range f.ranks {
			for i := range nodes {
				if nodes[i].Name == rk.Node {
					nodes[i].Leases = append(nodes[i].Leases, lease.Lease{ID: "inflight-" + k, Node: rk.Node, GPUs: rk.GPUs,
						User: f.user, UID: f.uid, Entry: k, StartedAt: f.at, ExpiresAt: f.at.Add(time.Hour), ReservedUntil: f.at.Add(15 * time.Second)})
				}
			}
		}
	}
	a.mu.Unlock()
	alive := map[string]bool{a.cfg.NodeName: true}
	for _, n := range nodes {
		if n.Alive {
			alive[n.Name] = true
		}
	}
	var waiting []lease.QueueEntry
	for _, e := range all {
		// An entry is started only while its origin, its source of truth,
		// can hear that it runs; otherwise it waits for its origin to return.
		if e.Running || !alive[e.Origin] {
			continue
		}
		key := e.Key()
		if reserving[key] {
			continue
		}
		if _, ok := started[key]; ok {
			// Started, but the origin has not heard yet (or the message was
			// lost): tell it again; never start it twice.
			go a.notifyStarted(e)
			continue
		}
		waiting = append(waiting, e)
	}
	if len(waiting) == 0 {
		return
	}
	plan := lease.Schedule(waiting, nodes, a.clusterUsage(), now, a.cfg.Sched)
	for _, s := range plan.Start {
		key := s.Entry.Key()
		a.mu.Lock()
		if _, busy := a.inflight[key]; busy {
			a.mu.Unlock()
			continue
		}
		a.inflight[key] = inflightStart{at: now, ranks: s.Ranks, user: s.Entry.User, uid: s.Entry.UID}
		a.mu.Unlock()
		a.wg.Add(1)
		go func(s lease.Start) {
			defer a.wg.Done()
			if err := a.execStart(s); err != nil {
				a.logf("scheduler: start %s: %v", s.Entry.ID, err)
				a.mu.Lock()
				delete(a.inflight, s.Entry.Key())
				a.mu.Unlock()
			}
		}(s)
	}
	for _, r := range plan.Reclaim {
		key := "reclaim:" + r.Lease.ID
		a.mu.Lock()
		_, busy := a.inflight[key]
		a.inflight[key] = inflightStart{at: now}
		a.mu.Unlock()
		if busy || !r.Lease.PreemptedAt.IsZero() {
			continue
		}
		a.logf("scheduler: reclaiming %s (%s, %s) for %s", r.Lease.ID, r.Lease.User, r.Reason, r.For)
		go func(r lease.Reclaim) {
			ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
			defer cancel()
			err := a.cluster.request(ctx, lease.Caller{UID: r.Lease.UID, User: r.Lease.User, Admin: true}, r.Lease.Node, opPreempt,
				preemptRequest{Lease: r.Lease.ID, Token: r.Lease.Token, Reason: r.Reason}, &struct{}{})
			if err != nil && r.Lease.Node == a.cfg.NodeName {
				err = a.preemptLocal(preemptRequest{Lease: r.Lease.ID, Token: r.Lease.Token, Reason: r.Reason})
			}
			if err != nil {
				a.logf("scheduler: reclaim %s: %v", r.Lease.ID, err)
			}
		}(r)
	}
}

// call sends op to node, or handles it here when node is this one.
func (a *Agent) call(ctx context.Context, c lease.Caller, node, op string, body, out any) error {
	if node == a.cfg.NodeName {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		resp, err := a.handleOp(ctx, c, node, op, b)
		if err != nil {
			return err
		}
		rb, err := json.Marshal(resp)
		if err != nil {
			return err
		}
		return json.Unmarshal(rb, out)
	}
	return a.cluster.request(ctx, c, node, op, body, out)
}

// execStart starts one planned request: at once for a single node; for a
// gang, reserve every rank, then commit all of them together.
func (a *Agent) execStart(s lease.Start) error {
	e := s.Entry
	c := lease.Caller{UID: e.UID, User: e.User}
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	if len(s.Ranks) == 1 && e.Nodes <= 1 {
		var r startResponse
		if err := a.call(ctx, c, s.Ranks[0].Node, opStart, startRequest{Entry: e, Phase: phaseStart, GPUs: s.Ranks[0].GPUs, Borrowed: s.Borrowed}, &r); err != nil {
			return err
		}
		a.logf("scheduler: started %s (%s) on %s: %s", e.ID, e.User, s.Ranks[0].Node, r.Lease.ID)
		a.notifyStarted(e)
		return nil
	}
	gang := strings.ReplaceAll(e.Key(), "#", "-")
	resps := make([]startResponse, len(s.Ranks))
	errs := make([]error, len(s.Ranks))
	var wg sync.WaitGroup
	for i, rk := range s.Ranks {
		wg.Add(1)
		go func(i int, rk lease.RankPlacement) {
			defer wg.Done()
			errs[i] = a.call(ctx, c, rk.Node, opStart, startRequest{Entry: e, Phase: phaseReserve, GPUs: rk.GPUs, Borrowed: s.Borrowed, Gang: gang, Rank: i}, &resps[i])
		}(i, rk)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			// All or nothing: give back what was reserved.
			for j, r := range resps {
				if errs[j] == nil && r.Lease.ID != "" {
					if err := a.call(ctx, c, s.Ranks[j].Node, opRelease, api.ReleaseRequest{IDs: []string{r.Lease.ID}}, &api.ReleaseResponse{}); err != nil {
						a.logf("scheduler: give back reservation %s on %s: %v (it expires by itself)", r.Lease.ID, s.Ranks[j].Node, err)
					}
				}
			}
			return fmt.Errorf("reserve rank %d on %s: %w", i, s.Ranks[i].Node, err)
		}
	}
	hosts := make([]string, len(resps))
	for i, r := range resps {
		hosts[i] = r.Host
	}
	base := map[string]string{
		"MASTER_ADDR":    resps[0].Host,
		"MASTER_PORT":    strconv.Itoa(resps[0].Port),
		"WORLD_SIZE":     strconv.Itoa(e.Nodes * e.GPUsPerNode),
		"NNODES":         strconv.Itoa(e.Nodes),
		"NPROC_PER_NODE": strconv.Itoa(e.GPUsPerNode),
		"DIBS_GANG_ID":   gang,
		"DIBS_HOSTS":     strings.Join(hosts, ","),
	}
	for i, rk := range s.Ranks {
		wg.Add(1)
		go func(i int, rk lease.RankPlacement) {
			defer wg.Done()
			env := map[string]string{"NODE_RANK": strconv.Itoa(i)}
			for k, v := range base {
				env[k] = v
			}
			errs[i] = a.call(ctx, c, rk.Node, opStart, startRequest{Entry: e, Phase: phaseCommit, GPUs: rk.GPUs, Gang: gang, Rank: i, Env: env}, &resps[i])
		}(i, rk)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			// The origin sees a rank missing and stops the rest.
			a.logf("scheduler: commit rank %d of %s on %s: %v", i, e.ID, s.Ranks[i].Node, err)
		}
	}
	a.logf("scheduler: started gang %s (%s): %d×%d GPUs on %s", e.ID, e.User, e.Nodes, e.GPUsPerNode, strings.Join(hosts, ","))
	a.notifyStarted(e)
	return nil
}

// notifyStarted tells the entry's origin that it runs.
func (a *Agent) notifyStarted(e lease.QueueEntry) {
	if e.Origin == a.cfg.NodeName {
		a.markStarted(e.Key())
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
	defer cancel()
	if err := a.cluster.request(ctx, lease.Caller{UID: e.UID, User: e.User}, e.Origin, opStarted, map[string]string{"key": e.Key()}, &struct{}{}); err != nil {
		a.logf("scheduler: tell %s that %s started: %v", e.Origin, e.ID, err)
	}
}

// handleOp serves the queue's requests from other agents (or this one).
func (a *Agent) handleOp(ctx context.Context, c lease.Caller, from, op string, body []byte) (any, error) {
	switch op {
	case opStart:
		var r startRequest
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		return a.startPart(ctx, c, r)
	case opStarted:
		var r struct {
			Key string `json:"key"`
		}
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		a.markStarted(r.Key)
		return struct{}{}, nil
	case opPreempt:
		var r preemptRequest
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		return struct{}{}, a.preemptLocal(r)
	case opCancel:
		var r struct {
			ID string `json:"id"`
		}
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		return struct{}{}, a.Cancel(ctx, c, r.ID)
	case opUsage:
		var r struct {
			Since time.Time `json:"since"`
		}
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		return a.usageSince(r.Since)
	case opRelease:
		var r api.ReleaseRequest
		if err := decodeBody(body, &r); err != nil {
			return nil, err
		}
		return a.Release(ctx, c, api.ReleaseRequest{IDs: r.IDs})
	}
	return nil, lease.Invalidf("unknown request %q from %s: is it running another dibs version?", op, from)
}

// startPart starts, reserves or commits this node's part of a queued request.
func (a *Agent) startPart(ctx context.Context, c lease.Caller, r startRequest) (startResponse, error) {
	e := r.Entry
	host := a.cfg.NodeName
	if h, _, err := net.SplitHostPort(a.cluster.addr()); err == nil && h != "" && h != "0.0.0.0" {
		host = h
	}
	req := api.ClaimRequest{GPUs: r.GPUs, Duration: e.Duration.String(), Kind: string(e.Kind), Note: e.Note}
	if e.Job != nil {
		req.Run = &api.RunSpec{Command: e.Job.Command, Dir: e.Job.Dir, Name: e.Job.Name}
		if e.Nodes > 1 && req.Run.Name != "" {
			req.Run.Name = fmt.Sprintf("%s-%d", req.Run.Name, r.Rank)
		}
	}
	switch r.Phase {
	case phaseStart:
		l, err := a.grant(ctx, c, req, grantOpts{entry: e.Key(), borrowed: r.Borrowed})
		return startResponse{Lease: l, Host: host}, err
	case phaseReserve:
		l, err := a.grant(ctx, c, req, grantOpts{entry: e.Key(), gang: r.Gang, rank: r.Rank, borrowed: r.Borrowed, reserveFor: a.cfg.Sched.ReservationTTL})
		if err != nil {
			return startResponse{}, err
		}
		out := startResponse{Lease: l, Host: host}
		if r.Rank == 0 {
			out.Port, err = freePort(host)
			if err != nil {
				return out, fmt.Errorf("find a free port for the rendezvous: %w", err)
			}
		}
		return out, nil
	case phaseCommit:
		return a.commit(ctx, c, e, req.Run, r.Env, host)
	}
	return startResponse{}, lease.Invalidf("unknown start phase %q", r.Phase)
}

// freePort asks the kernel for a port nobody listens on, for torchrun's
// rendezvous on rank 0.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		l, err = net.Listen("tcp", ":0")
		if err != nil {
			return 0, err
		}
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// commit turns a gang reservation into a lease and starts the rank.
func (a *Agent) commit(ctx context.Context, c lease.Caller, e lease.QueueEntry, run *api.RunSpec, env map[string]string, host string) (startResponse, error) {
	key := e.Key()
	a.mu.Lock()
	var res *lease.Lease
	for _, l := range a.table.List() {
		if l.Entry == key {
			l := l
			res = &l
		}
	}
	if res == nil {
		a.mu.Unlock()
		return startResponse{}, &lease.Error{Code: lease.CodeConflict, Msg: fmt.Sprintf("the reservation for %s on %s is gone (expired?)", e.ID, a.cfg.NodeName)}
	}
	l := *res
	if l.ReservedUntil.IsZero() {
		a.mu.Unlock()
		return startResponse{Lease: claimResponse(l), Host: host}, nil
	}
	now := a.now()
	l.ReservedUntil = time.Time{}
	l.StartedAt = now.Round(0)
	l.ExpiresAt = l.StartedAt.Add(e.Duration)
	if err := a.saveLocked(l, now); err != nil {
		a.mu.Unlock()
		return startResponse{}, err
	}
	a.mu.Unlock()
	if run != nil {
		if e.Job != nil && e.Job.Torchrun {
			run = &api.RunSpec{Name: run.Name, Dir: run.Dir, Command: torchrunCommand(e, env, run.Command)}
		}
		u, err := a.sessionUser(c)
		if err == nil {
			err = a.startSession(ctx, l, u, run, env)
		}
		if err != nil {
			a.endLease(l, "session-failed", "")
			a.leaseChanged()
			return startResponse{}, err
		}
	}
	a.leaseChanged()
	return startResponse{Lease: claimResponse(l), Host: host}, nil
}

// torchrunCommand wraps a command in torchrun with the gang's c10d
// rendezvous, as the docs of torchrun write it.
func torchrunCommand(e lease.QueueEntry, env map[string]string, cmd []string) []string {
	return append([]string{"torchrun",
		"--nnodes", strconv.Itoa(e.Nodes),
		"--nproc-per-node", strconv.Itoa(e.GPUsPerNode),
		"--rdzv-backend=c10d",
		"--rdzv-endpoint=" + net.JoinHostPort(env["MASTER_ADDR"], env["MASTER_PORT"]),
		"--rdzv-id=" + env["DIBS_GANG_ID"],
	}, cmd...)
}

// preemptLocal signals a lease's session and ends the lease after the
// grace (the clock loop does the end).
func (a *Agent) preemptLocal(r preemptRequest) error {
	a.mu.Lock()
	l, ok := a.table.Get(r.Lease)
	if !ok || l.Token != r.Token {
		a.mu.Unlock()
		return &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no lease %s with token %d on %s", r.Lease, r.Token, a.cfg.NodeName)}
	}
	if !l.PreemptedAt.IsZero() {
		a.mu.Unlock()
		return nil
	}
	now := a.now()
	l.PreemptedAt, l.PreemptReason = now.Round(0), r.Reason
	if err := a.saveLocked(l, now); err != nil {
		a.mu.Unlock()
		return err
	}
	grace := lease.FormatDuration(a.cfg.Policy.PreemptGrace)
	var text string
	switch r.Reason {
	case "quota":
		text = fmt.Sprintf("lease %s borrows beyond your quota and someone within theirs is waiting: checkpoint now, it ends in %s", l.ID, grace)
	case "idle":
		text = fmt.Sprintf("lease %s has been idle and someone is waiting: it is reclaimed in %s unless work starts", l.ID, grace)
	default:
		text = fmt.Sprintf("lease %s is being stopped (%s): it ends in %s", l.ID, r.Reason, grace)
	}
	a.noticeLocked(l.UID, text)
	a.mu.Unlock()
	a.logf("lease %s of %s preempted (%s); ends in %s", l.ID, l.User, r.Reason, grace)
	if l.Session != "" {
		if u, err := a.users.lookup(l.UID); err == nil {
			ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
			sig := a.cfg.PreemptSignal
			if r.Signal != 0 {
				sig = syscall.Signal(r.Signal)
			}
			a.deps.Sessions.Message(ctx, u, l.Session, "dibs: "+text)
			if err := a.deps.Sessions.Signal(ctx, u, l.Session, sig); err != nil {
				a.logf("lease %s: preempt signal: %v", l.ID, err)
			}
			cancel()
		}
	}
	a.leaseChanged()
	return nil
}

// usageSince is this node's raw GPU-seconds per user since then.
func (a *Agent) usageSince(since time.Time) (map[string]float64, error) {
	ledger, err := a.store.Ledger(since)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	active := a.table.List()
	a.mu.Unlock()
	return lease.WindowUsage(ledger, active, since, a.now()), nil
}

// Usage is `dibs usage`: GPU-hours per user over the window, from every
// node's ledger, and each user's fair-share factor now.
func (a *Agent) Usage(ctx context.Context, c lease.Caller, window time.Duration) (api.UsageReport, error) {
	since := a.now().Add(-window)
	rep := api.UsageReport{Since: since.Round(0), Users: []api.UserUsage{}}
	raw := map[string]float64{}
	add := func(m map[string]float64) {
		for u, v := range m {
			raw[u] += v
		}
	}
	mine, err := a.usageSince(since)
	if err != nil {
		return rep, err
	}
	add(mine)
	for _, r := range a.cluster.view() {
		if r.Name == a.cfg.NodeName {
			continue
		}
		var m map[string]float64
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := a.cluster.request(cctx, c, r.Name, opUsage, map[string]time.Time{"since": since}, &m)
		cancel()
		if err != nil {
			rep.Missing = append(rep.Missing, r.Name)
			continue
		}
		add(m)
	}
	decayed := a.clusterUsage()
	running := map[string]int{}
	for _, n := range a.schedNodes() {
		for _, l := range n.Leases {
			if l.ReservedUntil.IsZero() {
				running[l.User] += len(l.GPUs)
			}
		}
	}
	users := map[string]bool{}
	for u := range raw {
		users[u] = true
	}
	for u := range decayed {
		users[u] = true
	}
	for u := range running {
		users[u] = true
	}
	for u := range users {
		share := 1.0
		if s, ok := a.cfg.Sched.Shares[u]; ok {
			share = s
		}
		rep.Users = append(rep.Users, api.UserUsage{
			User: u, GPUHours: raw[u] / 3600, Decayed: decayed[u] / 3600, Share: share,
			FairShare: lease.FairShareFactor(u, decayed, a.cfg.Sched), RunningGPU: running[u], Quota: a.cfg.Sched.Quotas[u],
		})
	}
	slices.SortFunc(rep.Users, func(x, y api.UserUsage) int {
		if x.GPUHours != y.GPUHours {
			if x.GPUHours > y.GPUHours {
				return -1
			}
			return 1
		}
		return strings.Compare(x.User, y.User)
	})
	return rep, nil
}
