package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// Run is how the node starts a grant's session: the run spec it was asked
// for, and what the queue adds to it (a rendezvous, a launcher, the job
// kept for export). RunOf makes one from a spec; a queued start adds its
// part to what RunOf made.
type Run struct {
	// Name of the tmux session; empty means one derived from the lease id.
	Name    string
	Command []string
	Dir     string
	// UserEnv is the caller's carried environment (job.CarriedEnv): set
	// first, so the lease's own variables win over it.
	UserEnv map[string]string
	// Env is added to the lease's own variables (a gang's rendezvous).
	Env map[string]string
	// RecordExit asks the session to record its command's exit status, so a
	// queued run's origin can tell a failed run from a finished one.
	RecordExit bool
	// Workers is how many processes the session's launcher starts
	// (torchrun's per node), which share its cores: OMP_NUM_THREADS is
	// their share. 0 is one.
	Workers int
	// Job is the run as it was asked for (before any launcher wraps
	// Command), kept once its session starts so `dibs export sbatch` can
	// write its script after it ends (Node.KeptRun); nil keeps nothing.
	Job *job.Job
}

// RunOf is the session a run spec asks for, nil for none: the one place a
// spec becomes what the node starts. Its command's exit status is
// recorded, so the run's end says how it went.
func RunOf(spec *job.RunSpec) *Run {
	if spec == nil {
		return nil
	}
	return &Run{Name: spec.Name, Command: spec.Command, Dir: spec.Dir, UserEnv: spec.Env, RecordExit: len(spec.Command) > 0,
		Job: spec.Job().ForExport()}
}

// Grant is every way GPUs on this node are handed out: a claim, a run, a
// queued start, a gang reservation.
type Grant struct {
	// Claim is what was asked for, as the edge made it; its RequestID
	// makes a retried claim idempotent, and its Run is the session to
	// start.
	Claim lease.Claim
	// Run, when set, is how a queued start launches the claim's session
	// (RunOf and the queue's part); nil starts Claim.Run as asked. No
	// session starts for a reservation: Commit starts it.
	Run *Run
	// Entry is the queued attempt (QueueEntry.Key) the lease serves.
	Entry    string
	Gang     string
	Rank     int
	Borrowed bool
	// ReserveFor, when set, makes a gang reservation that ends by itself
	// after this long unless committed.
	ReserveFor time.Duration
}

// Grant plans, persists and acknowledges a lease for c, then starts its
// session. A retried request (same RequestID, same caller) or a retried
// start of the same queued attempt gets what the first one got; an attempt
// that already ran here never runs again.
func (n *Node) Grant(ctx context.Context, c lease.Caller, g Grant) (lease.Lease, error) {
	if g.Run == nil {
		g.Run = RunOf(g.Claim.Run)
		if g.Run != nil && g.Claim.Service != nil {
			// A service's end is a restart, not a result to record.
			g.Run.RecordExit = false
		}
	}
	var u launch.User
	if g.Run != nil {
		var err error
		if u, err = n.sessionUser(c); err != nil {
			return lease.Lease{}, err
		}
	}
	l, fresh, err := n.admit(c, g)
	if err != nil || !fresh {
		return l, err
	}
	if g.Run != nil && g.ReserveFor == 0 {
		if l, err = n.startSession(ctx, l, u, g.Run); err != nil {
			n.failedStart(ctx, l, u)
			return lease.Lease{}, err
		}
	}
	n.deps.LeasesChanged()
	return l, nil
}

// admit is Grant's part under the single writer's lock: the lease a retry
// already got (fresh false), or a new one planned, made durable and
// recorded (fresh true). Its session, and telling the cluster, come after
// the lock is released.
func (n *Node) admit(c lease.Caller, g Grant) (l lease.Lease, fresh bool, err error) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if l, ok := n.table.ByRequest(c.UID, g.Claim.RequestID); ok {
		return l, false, nil
	}
	if g.Entry != "" {
		if l, ok := n.table.ByEntry(g.Entry); ok {
			return l, false, nil
		}
		if x, ok := lease.RanBefore(n.ended, g.Entry); ok {
			return lease.Lease{}, false, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("%s already ran on %s (lease %s, %s)", g.Entry, n.cfg.Name, x.Lease, x.Reason)}
		}
	}
	now := n.now()
	l, err = n.table.PlanClaim(c, g.Claim, n.snap, now.Wall, n.cfg.Policy)
	if err != nil {
		return lease.Lease{}, false, err
	}
	l.Entry, l.Gang, l.Rank, l.Borrowed, l.RequestID = g.Entry, g.Gang, g.Rank, g.Borrowed, g.Claim.RequestID
	if g.ReserveFor > 0 {
		l.ReservedUntil = now.Wall.Round(0).Add(g.ReserveFor)
	}
	if g.Run != nil {
		l.Session = g.Run.Name
		if l.Session == "" {
			l.Session = job.SessionName(l.ID)
		}
	}
	if l.IsService() && g.Claim.Run != nil {
		// The definition every node holds (lease.Lease.Published), for
		// the supervisor's restarts here and a start elsewhere.
		l.Job = g.Claim.Run.Job()
		l.Session = service.ReplicaSession(l.Service.Name, l.Service.Replica)
		if l.Service.Replaces != "" {
			// A rolling update's new replica beside the old on this node:
			// the old one keeps its session until it is stopped.
			for _, x := range n.table.List() {
				if x.UID == l.UID && x.Session == l.Session {
					l.Session = service.UpdateSession(l.Session)
					break
				}
			}
		}
	}
	if err := n.saveLocked(l, now); err != nil {
		return lease.Lease{}, false, err
	}
	n.deps.Events(claimEvent(l, now.Wall))
	if l.IsService() {
		n.deps.Events(serviceStartEvent(l, now.Wall))
	}
	for _, sh := range lease.SharedCores(l, n.table.List()) {
		n.deps.Events(event.SharedCoresEvent(sh.Lease, l, sh.CPUs, now.Wall))
	}
	return l, true, nil
}

// Commit turns a gang reservation into a lease from now and starts its
// rank. Committing a lease that is already committed returns it.
func (n *Node) Commit(ctx context.Context, c lease.Caller, entry string, d time.Duration, run *Run) (lease.Lease, error) {
	l, fresh, err := n.commitReservation(entry, d)
	if err != nil || !fresh {
		return l, err
	}
	if run != nil {
		// As the account the reservation was made for (its name and the
		// uid resolved then), not whatever the name or uid means now.
		u, err := n.sessionUser(lease.Caller{UID: l.UID, User: l.User})
		if err != nil {
			n.end(l, lease.EndSessionFailed, "")
			return lease.Lease{}, err
		}
		if l, err = n.startSession(ctx, l, u, run); err != nil {
			n.failedStart(ctx, l, u)
			return lease.Lease{}, err
		}
	}
	n.deps.LeasesChanged()
	return l, nil
}

// commitReservation is Commit's part under the single writer's lock: the
// lease already committed (fresh false), or the reservation made a lease
// from now, durably (fresh true).
func (n *Node) commitReservation(entry string, d time.Duration) (l lease.Lease, fresh bool, err error) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	l, ok := n.table.ByEntry(entry)
	if !ok {
		return lease.Lease{}, false, &refusal.Error{Code: refusal.CodeConflict, Msg: fmt.Sprintf("the reservation for %s on %s is gone (expired?)", entry, n.cfg.Name)}
	}
	if l.ReservedUntil.IsZero() {
		return l, false, nil
	}
	now := n.now()
	l.ReservedUntil = time.Time{}
	l.StartedAt = now.Wall.Round(0)
	l.ExpiresAt = l.StartedAt.Add(d)
	if err := n.saveLocked(l, now); err != nil {
		return lease.Lease{}, false, err
	}
	n.deps.Events(claimEvent(l, now.Wall))
	return l, true, nil
}

// sessionUser resolves who a session runs as — the account of c's name,
// only while it still has c's uid — refusing when this agent cannot start
// processes as them.
func (n *Node) sessionUser(c lease.Caller) (launch.User, error) {
	if c.UID < 0 {
		return launch.User{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s, so no session can run as them there", c.User, n.cfg.Name)}
	}
	if n.cfg.CanRunAs != nil {
		if err := n.cfg.CanRunAs(c.UID); err != nil {
			return launch.User{}, err
		}
	}
	return n.deps.Accounts.Holder(c.User, c.UID)
}

// holder is the account l's session runs as: the account of l's holder's
// name with the uid resolved when l was granted or booked, or an error when
// the account is gone or was replaced (account.Directory.Holder).
func (n *Node) holder(l lease.Lease) (launch.User, error) {
	return n.deps.Accounts.Holder(l.User, l.UID)
}

// sessionRenames bounds how many other names startSession tries for a
// session whose name dibs chose, when the user's tmux server has sessions
// of those names already.
const sessionRenames = 8

// sessionSpec is what launch starts for run under l: the caller's carried
// environment, then the lease's own variables and its cores (bound to
// its GPUs' local ones or those chosen for it), then the run's.
func (n *Node) sessionSpec(l lease.Lease, u launch.User, run *Run) launch.Spec {
	snap := n.State().Snap
	var cpus []string
	if !n.cfg.NoCPUBinding {
		cpus = l.SessionCPUs(snap)
	}
	env := map[string]string{}
	for _, vars := range []map[string]string{run.UserEnv, l.Env(), l.DeviceEnv(snap), l.CPUEnv(cpus, run.Workers), run.Env} {
		for k, v := range vars {
			env[k] = v
		}
	}
	cmd := run.Command
	if l.IsService() {
		cmd = n.cfg.Fence.Wrap(cmd)
	}
	return launch.Spec{Name: l.Session, User: u, Env: env, Command: cmd, Dir: run.Dir, RecordExit: run.RecordExit && len(run.Command) > 0,
		KeepLog: len(run.Command) > 0, LogName: l.LogName(), CPUs: lease.CPUUnion(cpus)}
}

// startSession starts the lease's tmux session as u and watches it, and
// returns the lease as it now is: a session whose name dibs chose
// (job.SessionName) may have been given another. That name can be taken
// by a session of this node's earlier state — a wiped data dir starts
// lease ids from 1 again while the old runs go on — and the person never
// picked it, so it is not theirs to change: the session becomes
// dibs-NODE-ID-2 (-3, …), recorded on the lease, and its log keeps the
// name its claim event gave it. A name given with --name that is taken is
// refused, for the person to pick another.
func (n *Node) startSession(ctx context.Context, l lease.Lease, u launch.User, run *Run) (lease.Lease, error) {
	if !n.Current(l.ID, l.Token) {
		return l, fmt.Errorf("lease %s ended before its session could start", l.ID)
	}
	spec := n.sessionSpec(l, u, run)
	_, err := n.deps.Sessions.Start(ctx, spec)
	if errors.Is(err, launch.ErrStatusDir) && l.Entry == "" {
		// A plain run can do without its exit status; a queued one cannot.
		n.log.Warn("cannot record the run's exit status; starting it without", "lease", l.ID, "err", err)
		spec.RecordExit = false
		_, err = n.deps.Sessions.Start(ctx, spec)
	}
	chosen := job.SessionName(l.ID)
	dibsChose := l.Session == chosen
	for i := 2; dibsChose && errors.Is(err, launch.ErrSessionExists) && i <= sessionRenames+1; i++ {
		name := fmt.Sprintf("%s-%d", chosen, i)
		n.log.Warn("a tmux session has the name dibs chose for a run (left by this node's earlier state?); taking another", "lease", l.ID, "taken", spec.Name, "name", name)
		if !n.update(l, nil, func(x *lease.Lease) { x.Session = name }) {
			return l, fmt.Errorf("lease %s ended before its session could start", l.ID)
		}
		l.Session, spec.Name = name, name
		_, err = n.deps.Sessions.Start(ctx, spec)
	}
	if err != nil {
		switch {
		case errors.Is(err, launch.ErrWorkDir):
			return l, refusal.Wrap(refusal.CodeInvalid, err)
		case errors.Is(err, launch.ErrStatusDir):
			return l, refusal.Wrap(refusal.CodeUnavailable, err)
		case errors.Is(err, launch.ErrTmuxNotFound):
			return l, &refusal.Error{Code: refusal.CodeUnavailable, Msg: launch.ErrTmuxNotFound.Error()}
		case errors.Is(err, launch.ErrSessionExists) && l.IsService():
			return l, refusal.Invalidf("you already have a tmux session named %s (a service's, left running?): end it (tmux kill-session -t %s) or pick another service name", l.Session, l.Session)
		case errors.Is(err, launch.ErrSessionExists) && !dibsChose:
			return l, refusal.Invalidf("you already have a tmux session named %s: pick another --name", l.Session)
		case errors.Is(err, launch.ErrSessionExists):
			return l, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("tmux sessions %s to %s-%d all exist already, left by an earlier run of this node's agent (its data dir was replaced?): end those you no longer need (tmux ls)", chosen, chosen, sessionRenames+1)}
		}
		return l, fmt.Errorf("start session for lease %s: %w", l.ID, err)
	}
	if run.Job != nil && len(run.Job.Command) > 0 {
		n.kept.keep(KeptRun{Lease: l.ID, User: l.User, Job: *run.Job.ForExport(), At: n.deps.Clock.Now(),
			Session: l.Session, Log: l.LogName(), Entry: l.Entry, Rank: l.Rank})
		// The file is for export sbatch after a restart, not part of the
		// run's answer, which does not wait for it (Close does).
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.kept.save(); err != nil {
				n.log.Warn("cannot save the runs kept for export sbatch", "err", err)
			}
		}()
	}
	n.watch(l, u)
	return l, nil
}
