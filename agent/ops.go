package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// Claim grants GPUs to the caller: on this node, on the node named in the
// request (the request goes to that node's agent, which alone decides), or,
// in a cluster with no node named, on the best node that fits.
func (a *Agent) Claim(ctx context.Context, c lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error) {
	if req.Node == "" && a.cluster.enabled() {
		node, err := a.placeClaim(req)
		if err != nil {
			return api.ClaimResponse{}, err
		}
		req.Node = node
	}
	if req.Node != "" && req.Node != a.cfg.NodeName {
		r, err := a.cluster.claim(ctx, c, req)
		if err == nil {
			a.awaitVisible(ctx, r.ID)
		}
		return r, err
	}
	return a.claimLocal(ctx, c, req)
}

// awaitVisible waits (briefly) until a lease granted elsewhere shows in this
// agent's view, so the person's next command here sees what they just got.
func (a *Agent) awaitVisible(ctx context.Context, id string) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, l := range a.allLeases() {
			if l.ID == id {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// claimFromRequest turns the API request into the rules' claim.
func claimFromRequest(req api.ClaimRequest) (lease.Claim, error) {
	kind, err := lease.ParseKind(req.Kind)
	if err != nil {
		return lease.Claim{}, err
	}
	var d time.Duration
	if req.Duration != "" {
		if d, err = lease.ParseDuration(req.Duration); err != nil {
			return lease.Claim{}, err
		}
	}
	if req.Count < 0 {
		return lease.Claim{}, lease.Invalidf("GPU count must be positive, got %d", req.Count)
	}
	return lease.Claim{Count: req.Count, GPUs: req.GPUs, Duration: d, Note: req.Note, Kind: kind, Force: req.Force}, nil
}

// claimLocal is the single writer for this node's GPUs: plan, persist, then
// acknowledge (and start the session).
func (a *Agent) claimLocal(ctx context.Context, c lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error) {
	return a.grant(ctx, c, req, grantOpts{})
}

// grantOpts carry what a queued or gang start adds to a plain claim.
type grantOpts struct {
	// entry is the queue entry key (QueueEntry.Key) the lease serves.
	entry    string
	gang     string
	rank     int
	borrowed bool
	// reserveFor, when set, makes a gang reservation that ends by itself
	// after this long unless committed; no session starts yet.
	reserveFor time.Duration
	// env is added to the session's environment (the gang's rendezvous).
	env map[string]string
}

// grant is every way GPUs on this node are handed out.
func (a *Agent) grant(ctx context.Context, c lease.Caller, req api.ClaimRequest, o grantOpts) (api.ClaimResponse, error) {
	claim, err := claimFromRequest(req)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	var u launch.User
	startSession := req.Run != nil && o.reserveFor == 0
	if req.Run != nil {
		if u, err = a.sessionUser(c); err != nil {
			return api.ClaimResponse{}, err
		}
		if req.Run.Name != "" {
			if err := launch.CheckName(req.Run.Name); err != nil {
				return api.ClaimResponse{}, lease.Invalidf("session name %q: %v", req.Run.Name, err)
			}
		}
	}
	a.mu.Lock()
	if o.entry != "" {
		// A retried start of the same attempt gets what the first one got,
		// and an attempt that already ran here never runs again.
		for _, l := range a.table.List() {
			if l.Entry == o.entry {
				a.mu.Unlock()
				return claimResponse(l), nil
			}
		}
		for _, x := range a.ended {
			if x.Entry == o.entry && !x.Reserved {
				a.mu.Unlock()
				return api.ClaimResponse{}, &lease.Error{Code: lease.CodeConflict, Msg: fmt.Sprintf("%s already ran on %s (lease %s, %s)", o.entry, a.cfg.NodeName, x.Lease, x.Reason)}
			}
		}
	}
	now := a.now()
	l, err := a.table.PlanClaim(c, claim, a.snap, now, a.cfg.Policy)
	if err != nil {
		a.mu.Unlock()
		return api.ClaimResponse{}, err
	}
	l.Entry, l.Gang, l.Rank, l.Borrowed = o.entry, o.gang, o.rank, o.borrowed || a.beyondQuotaLocked(c, len(l.GPUs))
	if o.reserveFor > 0 {
		l.ReservedUntil = now.Round(0).Add(o.reserveFor)
	}
	if req.Run != nil {
		l.Session = req.Run.Name
		if l.Session == "" {
			l.Session = sessionName(l.ID)
		}
	}
	if err := a.saveLocked(l, now); err != nil {
		a.mu.Unlock()
		return api.ClaimResponse{}, err
	}
	a.mu.Unlock()

	if startSession {
		if err := a.startSession(ctx, l, u, req.Run, o.env); err != nil {
			a.endLease(l, "session-failed", "")
			a.leaseChanged()
			return api.ClaimResponse{}, err
		}
	}
	a.leaseChanged()
	return claimResponse(l), nil
}

func claimResponse(l lease.Lease) api.ClaimResponse {
	return api.ClaimResponse{
		ID: l.ID, Node: l.Node, GPUs: l.GPUs, CUDAVisibleDevices: l.CUDAVisibleDevices(),
		Token: l.Token, Kind: string(l.Kind), ExpiresAt: l.ExpiresAt, Session: l.Session,
	}
}

// sessionName makes a tmux-safe session name from a lease id.
func sessionName(id string) string {
	return "dibs-" + strings.NewReplacer(".", "_", ":", "_").Replace(id)
}

// sessionUser resolves the account a session runs as, refusing what this
// agent cannot do: another user's session when it does not run as root.
func (a *Agent) sessionUser(c lease.Caller) (launch.User, error) {
	if euid := os.Geteuid(); euid != 0 && euid != c.UID {
		return launch.User{}, &lease.Error{Code: lease.CodeForbidden, Msg: fmt.Sprintf("this agent runs as uid %d, not as root, so it can start sessions only for that user: ask whoever installs dibs to run the agent as root", euid)}
	}
	u, err := a.users.lookup(c.UID)
	if err != nil {
		return launch.User{}, fmt.Errorf("look up uid %d: %w", c.UID, err)
	}
	return u, nil
}

func (a *Agent) startSession(ctx context.Context, l lease.Lease, u launch.User, run *api.RunSpec, extra map[string]string) error {
	a.mu.Lock()
	current := a.table.Current(l.ID, l.Token)
	a.mu.Unlock()
	if !current {
		return fmt.Errorf("lease %s ended before its session could start", l.ID)
	}
	env := l.Env()
	for k, v := range extra {
		env[k] = v
	}
	cmd := run.Command
	if l.Entry != "" && len(cmd) > 0 {
		// Queued runs record how they ended, so a failed gang rank can be
		// told from a finished one.
		if dir, err := a.statusDir(u); err == nil {
			cmd = append([]string{"sh", "-c", `"$@"; s=$?; echo $s > "$DIBS_EXIT_FILE"; exit $s`, "dibs-job"}, cmd...)
			env["DIBS_EXIT_FILE"] = filepath.Join(dir, l.Session+".exit")
		} else {
			a.logf("lease %s: no exit-status dir for %s: %v", l.ID, u.Name, err)
		}
	}
	_, err := a.deps.Sessions.Start(ctx, launch.Spec{Name: l.Session, User: u, Env: env, Command: cmd, Dir: run.Dir})
	if err != nil {
		if errors.Is(err, launch.ErrTmuxNotFound) {
			return &lease.Error{Code: lease.CodeUnavailable, Msg: launch.ErrTmuxNotFound.Error()}
		}
		if errors.Is(err, launch.ErrSessionExists) {
			return lease.Invalidf("you already have a tmux session named %s: pick another --name", l.Session)
		}
		return fmt.Errorf("start session for lease %s: %w", l.ID, err)
	}
	a.watch(l, u)
	return nil
}

// watch ends the lease when its session ends.
func (a *Agent) watch(l lease.Lease, u launch.User) {
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.Lock()
	if old := a.watching[l.ID]; old != nil {
		old()
	}
	a.watching[l.ID] = cancel
	a.mu.Unlock()
	gone := a.deps.Sessions.Watch(ctx, u, l.Session, a.cfg.SessionPoll)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-gone:
		}
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		current := a.table.Current(l.ID, l.Token)
		a.mu.Unlock()
		if current {
			a.endLease(l, a.sessionEndReason(l, u), "")
			a.leaseChanged()
		}
	}()
}

// endLease removes a lease durably and records it in the ledger. Reads keep
// working if the disk refuses; the lease then stays until a later try.
func (a *Agent) endLease(l lease.Lease, reason, by string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.table.Current(l.ID, l.Token) {
		return nil
	}
	now := a.now()
	if err := a.store.End(l.ID, lease.Ended(l, now, reason, by)); err != nil {
		a.logf("end lease %s (%s): %v", l.ID, reason, err)
		return err
	}
	a.table.Remove(l.ID)
	a.usageDirty.Store(true)
	if l.Entry != "" {
		a.ended = append(a.ended, endedLease{Entry: l.Entry, Lease: l.ID, Gang: l.Gang, Reason: reason, At: now.Round(0), Reserved: !l.ReservedUntil.IsZero()})
		for len(a.ended) > 0 && now.Sub(a.ended[0].At) > endedKeep {
			a.ended = a.ended[1:]
		}
	}
	if cancel := a.watching[l.ID]; cancel != nil {
		cancel()
		delete(a.watching, l.ID)
	}
	a.judged = lease.Judge(a.snap, a.table.List(), a.idle, now, a.cfg.Policy)
	a.bumpLocked()
	return nil
}

// Release ends leases the caller holds (or any, for an admin), killing their
// sessions. Leases on other nodes are ended by their own agents.
func (a *Agent) Release(ctx context.Context, c lease.Caller, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	ids := req.IDs
	if req.All {
		if len(ids) > 0 {
			return api.ReleaseResponse{}, lease.Invalidf("give lease ids or --all, not both")
		}
		ids = a.callerLeaseIDs(c)
		if len(ids) == 0 {
			return api.ReleaseResponse{Released: []string{}}, nil
		}
	}
	if len(ids) == 0 {
		return api.ReleaseResponse{}, lease.Invalidf("name the lease to release (`dibs ls` shows ids), or use --all")
	}
	// Check every id first so a bad one leaves nothing half-done.
	local := make([]lease.Lease, 0, len(ids))
	remote := make(map[string][]string)
	for _, id := range ids {
		node, ok := lease.NodeOfID(id)
		if !ok {
			return api.ReleaseResponse{}, lease.Invalidf("%q is not a lease id: ids look like node01-42 (`dibs ls` shows them)", id)
		}
		if node != a.cfg.NodeName {
			remote[node] = append(remote[node], id)
			continue
		}
		a.mu.Lock()
		l, err := a.table.PlanRelease(c, id)
		a.mu.Unlock()
		if err != nil {
			return api.ReleaseResponse{}, err
		}
		local = append(local, l)
	}
	out := api.ReleaseResponse{Released: []string{}}
	for _, l := range local {
		if err := a.releaseLocal(ctx, c, l); err != nil {
			return out, err
		}
		out.Released = append(out.Released, l.ID)
	}
	for node, rids := range remote {
		r, err := a.cluster.release(ctx, c, node, rids)
		out.Released = append(out.Released, r.Released...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (a *Agent) releaseLocal(ctx context.Context, c lease.Caller, l lease.Lease) error {
	by := ""
	if c.UID != l.UID {
		by = c.String()
		a.logf("admin %s (uid %d) ended %s's lease %s on GPUs %s", c, c.UID, l.User, l.ID, l.CUDAVisibleDevices())
	}
	reason := "released"
	if by != "" {
		reason = "ended-by-admin"
	}
	if err := a.endLease(l, reason, by); err != nil {
		return err
	}
	if l.Session != "" {
		if u, err := a.users.lookup(l.UID); err == nil {
			if err := a.deps.Sessions.Kill(ctx, u, l.Session); err != nil && !errors.Is(err, launch.ErrNoSession) {
				a.logf("release %s: kill session %s: %v", l.ID, l.Session, err)
			}
		}
	}
	a.leaseChanged()
	return nil
}

func (a *Agent) callerLeaseIDs(c lease.Caller) []string {
	var ids []string
	a.mu.Lock()
	for _, l := range a.table.List() {
		if l.UID == c.UID {
			ids = append(ids, l.ID)
		}
	}
	a.mu.Unlock()
	for _, n := range a.cluster.view() {
		if n.Name == a.cfg.NodeName {
			continue
		}
		for _, l := range n.Leases {
			if l.UID == c.UID && l.User == c.User {
				ids = append(ids, l.ID)
			}
		}
	}
	return ids
}

// Extend moves the end of a lease the caller holds.
func (a *Agent) Extend(ctx context.Context, c lease.Caller, req api.ExtendRequest) (api.ClaimResponse, error) {
	node, ok := lease.NodeOfID(req.ID)
	if !ok {
		return api.ClaimResponse{}, lease.Invalidf("%q is not a lease id: ids look like node01-42 (`dibs ls` shows them)", req.ID)
	}
	if node != a.cfg.NodeName {
		return a.cluster.extend(ctx, c, node, req)
	}
	d, err := lease.ParseDuration(req.Duration)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	l, err := a.table.PlanExtend(c, req.ID, d, now, a.cfg.Policy)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	if err := a.saveLocked(l, now); err != nil {
		return api.ClaimResponse{}, err
	}
	a.leaseChanged() // only signals: safe under a.mu
	return claimResponse(l), nil
}

// Adopt takes a process started without a lease into one.
func (a *Agent) Adopt(ctx context.Context, c lease.Caller, req api.AdoptRequest) (api.ClaimResponse, error) {
	var d time.Duration
	if req.Duration != "" {
		var err error
		if d, err = lease.ParseDuration(req.Duration); err != nil {
			return api.ClaimResponse{}, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	l, err := a.table.PlanAdopt(c, req.PID, d, req.Note, a.snap, now, a.cfg.Policy)
	if err != nil {
		return api.ClaimResponse{}, err
	}
	if err := a.saveLocked(l, now); err != nil {
		return api.ClaimResponse{}, err
	}
	a.leaseChanged() // only signals: safe under a.mu
	return claimResponse(l), nil
}

// Attach says how the caller reaches a lease's session: tmux attach here, or
// ssh to the node that runs it. An empty id picks the caller's newest session.
func (a *Agent) Attach(ctx context.Context, c lease.Caller, id string) (api.AttachResponse, error) {
	var found *lease.Lease
	for _, n := range a.allLeases() {
		l := n
		if l.UID != c.UID && !c.Admin {
			if l.ID == id {
				return api.AttachResponse{}, &lease.Error{Code: lease.CodeForbidden, Msg: fmt.Sprintf("lease %s belongs to %s: you can attach only to your own sessions", id, l.User)}
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
	}
	if found == nil {
		if id == "" {
			return api.AttachResponse{}, &lease.Error{Code: lease.CodeNotFound, Msg: "you have no lease with a session: start one with `dibs run -g 1`"}
		}
		return api.AttachResponse{}, &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no lease %s: `dibs ls` shows the live ones", id)}
	}
	if found.Session == "" {
		return api.AttachResponse{}, lease.Invalidf("lease %s has no session (it was claimed, not run): use `dibs run` to get one", found.ID)
	}
	u := launch.User{Name: found.User, UID: found.UID}
	if found.Node == a.cfg.NodeName {
		if lu, err := a.users.lookup(found.UID); err == nil {
			u = lu
		}
		return api.AttachResponse{Lease: *found, Local: true, Command: a.deps.Sessions.AttachCommand(u, found.Session)}, nil
	}
	host := a.cluster.sshHost(found.Node)
	argv := append([]string{"ssh", "-t", host}, a.deps.Sessions.AttachCommand(u, found.Session)...)
	return api.AttachResponse{Lease: *found, Local: false, Command: argv}, nil
}

// allLeases lists every lease the agent knows of, local first.
func (a *Agent) allLeases() []lease.Lease {
	a.mu.Lock()
	out := a.table.List()
	a.mu.Unlock()
	for _, n := range a.cluster.view() {
		if n.Name != a.cfg.NodeName {
			out = append(out, n.Leases...)
		}
	}
	return out
}

// readopt runs at start: sessions still running are watched again, leases
// whose session is gone end.
func (a *Agent) readopt(ctx context.Context) {
	a.mu.Lock()
	leases := a.table.List()
	a.mu.Unlock()
	for _, l := range leases {
		if l.Session == "" {
			continue
		}
		u, err := a.users.lookup(l.UID)
		if err != nil {
			a.logf("lease %s: user %s (uid %d) is gone; ending it: %v", l.ID, l.User, l.UID, err)
			a.endLease(l, "user-gone", "")
			continue
		}
		ok, err := a.deps.Sessions.Exists(ctx, u, l.Session)
		if err != nil {
			a.logf("lease %s: cannot check session %s (%v); keeping it", l.ID, l.Session, err)
			ok = true
		}
		if !ok {
			a.logf("lease %s: session %s ended while the agent was down; ending the lease", l.ID, l.Session)
			a.endLease(l, "session-ended", "")
			continue
		}
		a.watch(l, u)
	}
}

// tick applies what the clock calls for: warnings, overdue notices, signals
// and ends. Tokens are re-checked under the lock before acting, so a stale
// step never touches a lease that has moved on.
func (a *Agent) tick() {
	a.mu.Lock()
	now := a.now()
	due := a.table.Due(now, a.cfg.Policy)
	a.mu.Unlock()
	for _, d := range due {
		a.step(d, now)
	}
}

func (a *Agent) step(d lease.Due, now time.Time) {
	l := d.Lease
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	var u launch.User
	var uerr error
	if l.Session != "" {
		u, uerr = a.users.lookup(l.UID)
	}
	tell := func(text string) {
		a.mu.Lock()
		a.noticeLocked(l.UID, text)
		a.mu.Unlock()
		if l.Session != "" && uerr == nil {
			if err := a.deps.Sessions.Message(ctx, u, l.Session, "dibs: "+text); err != nil && !errors.Is(err, launch.ErrNoSession) {
				a.logf("lease %s: message: %v", l.ID, err)
			}
		}
	}
	switch d.Step {
	case lease.StepWarn:
		if !a.update(l, func(x *lease.Lease) { x.Warned = true }) {
			return
		}
		tell(fmt.Sprintf("lease %s ends in %s (at %s): `dibs extend %s --for 1h` to keep it", l.ID, lease.FormatDuration(l.ExpiresAt.Sub(now)), l.ExpiresAt.Local().Format("15:04"), l.ID))
	case lease.StepOverdue:
		if !a.update(l, func(x *lease.Lease) { x.OverdueNoticed = true }) {
			return
		}
		tell(fmt.Sprintf("lease %s is past its end: release it (`dibs release %s`) or extend it", l.ID, l.ID))
	case lease.StepSignal:
		if !a.update(l, func(x *lease.Lease) { x.SignalledAt = now.Round(0) }) {
			return
		}
		tell(fmt.Sprintf("lease %s has ended: stopping the session (SIGTERM now, SIGKILL in %s)", l.ID, lease.FormatDuration(a.cfg.Policy.SignalGrace)))
		if uerr == nil {
			if err := a.deps.Sessions.Signal(ctx, u, l.Session, syscall.SIGTERM); err != nil && !errors.Is(err, launch.ErrNoSession) {
				a.logf("lease %s: SIGTERM: %v", l.ID, err)
			}
		}
	case lease.StepReservationExpired:
		a.logf("reservation %s for %s expired uncommitted; its GPUs are free again", l.ID, l.Entry)
		if a.endLease(l, "reservation-expired", "") == nil {
			a.leaseChanged()
		}
	case lease.StepPreemptEnd:
		if l.Session != "" && uerr == nil {
			a.deps.Sessions.Signal(ctx, u, l.Session, syscall.SIGKILL)
			a.deps.Sessions.Kill(ctx, u, l.Session)
		}
		a.mu.Lock()
		a.noticeLocked(l.UID, fmt.Sprintf("lease %s was ended (%s) after its grace", l.ID, l.PreemptReason))
		a.mu.Unlock()
		if a.endLease(l, "preempted-"+l.PreemptReason, "") == nil {
			a.leaseChanged()
		}
	case lease.StepEnd:
		if l.Session != "" && uerr == nil {
			a.deps.Sessions.Signal(ctx, u, l.Session, syscall.SIGKILL)
			if err := a.deps.Sessions.Kill(ctx, u, l.Session); err != nil && !errors.Is(err, launch.ErrNoSession) {
				a.logf("lease %s: kill session: %v", l.ID, err)
			}
		}
		a.logf("lease %s of %s ended at its time limit", l.ID, l.User)
		a.mu.Lock()
		a.noticeLocked(l.UID, fmt.Sprintf("lease %s ended at its time limit", l.ID))
		a.mu.Unlock()
		if a.endLease(l, "expired", "") == nil {
			a.leaseChanged()
		}
	}
}

// update persists a change to a lease if its token is still current.
func (a *Agent) update(l lease.Lease, f func(*lease.Lease)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, ok := a.table.Get(l.ID)
	if !ok || cur.Token != l.Token {
		return false
	}
	f(&cur)
	if err := a.saveLocked(cur, a.now()); err != nil {
		a.logf("lease %s: save: %v", l.ID, err)
		return false
	}
	return true
}

// beyondQuotaLocked reports whether n more GPUs take the caller past their
// nominal quota, counting what they hold cluster-wide; such a lease is
// borrowed and may be preempted for someone within quota. Callers hold a.mu.
func (a *Agent) beyondQuotaLocked(c lease.Caller, n int) bool {
	q := a.cfg.Sched
	if len(q.Quotas) == 0 && len(q.GroupQuotas) == 0 {
		return false
	}
	leases := a.table.List()
	for _, r := range a.cluster.view() {
		if r.Name != a.cfg.NodeName {
			leases = append(leases, r.Leases...)
		}
	}
	used, groupUsed := q.QuotaUse(c.User, leases)
	return q.Borrows(c.User, n, used, groupUsed)
}

// saveLocked makes a granted or changed lease durable, then applies it: the
// table, the judgements and the board all move only after the disk has it.
// Callers hold a.mu.
func (a *Agent) saveLocked(l lease.Lease, now time.Time) error {
	if err := a.store.Put(l); err != nil {
		return err
	}
	a.table.Put(l, now)
	a.judged = lease.Judge(a.snap, a.table.List(), a.idle, now, a.cfg.Policy)
	a.bumpLocked()
	return nil
}
