package node

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// Release ends lease id for c (its holder, or an admin: logged), killing its
// session.
func (n *Node) Release(ctx context.Context, c lease.Caller, id string) error {
	return n.release(ctx, c, id, false)
}

// ReleaseHard ends a lease c holds as Release does, but sends its
// session's processes SIGKILL before tmux hangs up on them: the end of
// the short grace a person gave a run they cancelled in the foreground
// (dibs run --follow, Ctrl-C twice), which their SIGTERM did not end.
func (n *Node) ReleaseHard(ctx context.Context, c lease.Caller, id string) error {
	return n.release(ctx, c, id, true)
}

func (n *Node) release(ctx context.Context, c lease.Caller, id string, hard bool) error {
	var l lease.Lease
	err := n.locked(func() error {
		var err error
		if l, err = n.table.PlanRelease(c, id); err != nil {
			return err
		}
		reason, by := lease.EndReleased, ""
		if l.Booked {
			reason = lease.EndUnbooked
		}
		if c.UID != l.UID {
			reason, by = lease.EndByAdmin, c.String()
			n.log.Warn("admin ended someone else's lease", "admin", c.User, "uid", c.UID, "holder", l.User, "lease", l.ID, "gpus", l.CUDAVisibleDevices())
		}
		return n.endLocked(l, reason, by, n.now())
	})
	if err != nil {
		return err
	}
	if !l.Booked {
		n.killSession(ctx, l, hard)
	}
	n.deps.LeasesChanged()
	return nil
}

// CheckRelease says whether c may release id, without doing it, so a
// release of several leases refuses all of them before ending any.
func (n *Node) CheckRelease(c lease.Caller, id string) error {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	_, err := n.table.PlanRelease(c, id)
	return err
}

// Extend moves the end of a lease c holds by d.
func (n *Node) Extend(c lease.Caller, id string, d time.Duration) (lease.Lease, error) {
	return n.change(event.EventExtend, func(now lease.Instant) (lease.Lease, error) {
		return n.table.PlanExtend(c, id, d, now, n.cfg.Policy)
	})
}

// Adopt takes a process c started without a lease into one.
func (n *Node) Adopt(c lease.Caller, pid int, d time.Duration, note string) (lease.Lease, error) {
	return n.change(event.EventAdopt, func(now lease.Instant) (lease.Lease, error) {
		return n.table.PlanAdopt(c, pid, d, note, n.snap, now.Wall, n.cfg.Policy)
	})
}

// AdoptContainer records container id on the leases of c whose GPUs its
// processes run on (lease.Table.PlanAdoptContainer), durably, so root's
// processes of a rootful container count as c's on every board. It returns
// the leases as saved.
func (n *Node) AdoptContainer(c lease.Caller, id string) ([]lease.Lease, error) {
	var out []lease.Lease
	err := n.locked(func() error {
		now := n.now()
		var err error
		if out, err = n.table.PlanAdoptContainer(c, id, n.snap); err != nil {
			return err
		}
		for _, l := range out {
			if err := n.saveLocked(l, now); err != nil {
				return fmt.Errorf("adopt container on lease %s: %w", l.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range out {
		n.log.Info("container adopted", "user", c.User, "uid", c.UID, "lease", l.ID, "containers", l.Containers)
	}
	n.deps.LeasesChanged()
	return out, nil
}

// change is one lease's change that plan decides under the single
// writer's lock: made durable, recorded as an event of kind, and then,
// after the lock, told to the cluster.
func (n *Node) change(kind event.EventKind, plan func(now lease.Instant) (lease.Lease, error)) (lease.Lease, error) {
	var l lease.Lease
	err := n.locked(func() error {
		now := n.now()
		var err error
		if l, err = plan(now); err != nil {
			return err
		}
		if err := n.saveLocked(l, now); err != nil {
			return err
		}
		n.deps.Events(event.LeaseEvent(kind, l, now.Wall))
		return nil
	})
	if err != nil {
		return lease.Lease{}, err
	}
	n.deps.LeasesChanged()
	return l, nil
}

// Preempt tells a lease's session to stop (sig, or the configured
// preemption signal when 0) and ends the lease after grace: reclaim for a
// waiting entry (why is lease.PreemptQuota or PreemptIdle) or the stop of a
// gang whose rank failed ("gang"). The token must still be the lease's.
func (n *Node) Preempt(id string, token uint64, why string, sig syscall.Signal) error {
	var l lease.Lease
	fresh := false
	err := n.locked(func() error {
		var ok bool
		l, ok = n.table.Get(id)
		if !ok || l.Token != token {
			return &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no lease %s with token %d on %s", id, token, n.cfg.Name)}
		}
		if !l.PreemptedAt.IsZero() {
			return nil
		}
		now := n.now()
		l.PreemptedAt, l.PreemptReason = now.Wall.Round(0), why
		if err := n.saveLocked(l, now); err != nil {
			return err
		}
		// The event's notice tells the holder, in every session.
		n.deps.Events(event.PreemptEvent(l, why, n.cfg.Policy.PreemptGrace, now.Wall))
		fresh = true
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	n.log.Info("lease preempted", "lease", l.ID, "user", l.User, "why", why, "grace", words.FormatDuration(n.cfg.Policy.PreemptGrace))
	if l.Session != "" {
		if u, err := n.holder(l); err == nil {
			ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
			if sig == 0 {
				sig = n.cfg.PreemptSignal
			}
			if err := n.deps.Sessions.Signal(ctx, u, l.Session, sig); err != nil {
				n.log.Warn("preempt signal", "lease", l.ID, "err", err)
			}
			cancel()
		}
	}
	n.deps.LeasesChanged()
	return nil
}

// Tick applies what the clock calls for: warnings, overdue notices, signals
// and ends. Each step is re-checked under the lock before it acts (the
// token, and lease.StillDue), so a stale step never touches a lease that has
// moved on: one extended since Tick read the table keeps running.
func (n *Node) Tick() {
	var at lease.Instant
	var due []lease.Due
	n.locked(func() error {
		at = n.now()
		due = n.table.Due(at, n.cfg.Policy)
		return nil
	})
	for _, d := range due {
		n.step(d, at.Wall)
	}
}

func (n *Node) step(d lease.Due, now time.Time) {
	l := d.Lease
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	// Each warning is an event, whose notice reaches the holder on their
	// boards, in every tmux session on every node and by their webhook.
	warn := func(why string) { n.record(event.WarnEvent(l, why, now)) }
	// endIfDue ends the lease if the clock still calls for d, checked and
	// ended in one hold of the lock: a change that lands after Tick read
	// the table (an extend, a gang's commit) keeps the lease.
	endIfDue := func(reason lease.EndReason) bool {
		due := false
		err := n.locked(func() error {
			if due = lease.StillDue(n.table, n.now(), n.cfg.Policy, d); !due {
				return nil
			}
			return n.endLocked(l, reason, "", n.now())
		})
		if !due || err != nil {
			return false
		}
		n.deps.LeasesChanged()
		return true
	}
	switch d.Step {
	case lease.StepWarn:
		if n.update(l, &d, func(x *lease.Lease) { x.Warned = true }) {
			warn(words.FormatDuration(words.ToMinute(l.ExpiresAt.Sub(now))))
		}
	case lease.StepWarnFinal:
		if n.update(l, &d, func(x *lease.Lease) { x.Warned, x.FinalWarned = true, true }) {
			warn(words.FormatDuration(max(l.ExpiresAt.Sub(now).Round(time.Second), time.Second)))
		}
	case lease.StepOverdue:
		if n.update(l, &d, func(x *lease.Lease) { x.OverdueNoticed = true }) {
			warn("overdue")
		}
	case lease.StepSignal:
		if !n.update(l, &d, func(x *lease.Lease) { x.SignalledAt = now.Round(0) }) {
			return
		}
		warn("stopping")
		n.background(func(ctx context.Context) {
			if u, err := n.holder(l); err == nil {
				if err := n.deps.Sessions.Signal(ctx, u, l.Session, syscall.SIGTERM); err != nil {
					n.log.Warn("SIGTERM at the end", "lease", l.ID, "err", err)
				}
			}
		})
	case lease.StepReservationExpired:
		if endIfDue(lease.EndReservationExpired) {
			n.log.Info("reservation expired uncommitted; its GPUs are free again", "lease", l.ID, "entry", l.Entry)
		}
	case lease.StepPreemptEnd:
		// Ended first, so the next tick does not find it due again while
		// its session is being killed (the processes still exiting are
		// within lease.EndGrace, not squatters).
		if n.end(l, lease.PreemptedReason(l.PreemptReason), "") == nil {
			n.background(func(ctx context.Context) { n.killSession(ctx, l, true) })
		}
	case lease.StepBookingStart, lease.StepBookingLapsed:
		n.stepBooking(ctx, d, now)
	case lease.StepEnd:
		if endIfDue(lease.EndExpired) {
			n.log.Info("lease ended at its time limit", "lease", l.ID, "user", l.User)
			n.background(func(ctx context.Context) { n.killSession(ctx, l, true) })
		}
	}
}
