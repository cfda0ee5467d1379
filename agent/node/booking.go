package node

import (
	"context"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

// Book plans, persists and acknowledges a booking of this node's GPUs for
// c, as the edge made it (and validated it: lease.BookRequest.Validate). A
// retried request (same RequestID, same caller) gets the booking the first
// one made. A booking with a run (`dibs run --at`) is refused now if no
// session could be started as c at its time.
func (n *Node) Book(c lease.Caller, req lease.BookRequest) (lease.Lease, error) {
	if req.Run != nil {
		if _, err := n.sessionUser(c); err != nil {
			return lease.Lease{}, err
		}
	}
	var b lease.Lease
	fresh := false
	err := n.locked(func() error {
		if l, ok := n.table.ByRequest(c.UID, req.RequestID); ok {
			b = l
			return nil
		}
		now := n.now()
		var err error
		if b, err = n.table.PlanBooking(c, req, n.snap, now.Wall, n.cfg.Policy); err != nil {
			return err
		}
		b.RequestID = req.RequestID
		if b.Job != nil {
			b.Session = b.Job.Name
			if b.Session == "" {
				b.Session = job.SessionName(b.ID)
			}
		}
		if err := n.saveLocked(b, now); err != nil {
			return err
		}
		n.deps.Events(event.BookingEvent(b, now.Wall))
		fresh = true
		return nil
	})
	if err != nil {
		return lease.Lease{}, err
	}
	if !fresh {
		return b, nil
	}
	n.log.Info("booked", "booking", b.ID, "user", b.User, "gpus", b.CUDAVisibleDevices(), "from", b.StartedAt, "until", b.ExpiresAt)
	n.deps.LeasesChanged()
	return b, nil
}

// startBooking turns a booking whose time has come into a lease: leases
// still on its GPUs (past their own end) end first, then its job, if any,
// starts under it.
func (n *Node) startBooking(ctx context.Context, b lease.Lease) {
	if b.Job != nil {
		// The command runs only as the account the booking was accepted
		// for: its name with the uid resolved then. An account deleted
		// (its uid perhaps given to someone new) or replaced starts
		// nothing, and the booking ends before it takes anyone's GPUs.
		if _, err := n.sessionUser(lease.Caller{UID: b.UID, User: b.User}); err != nil {
			if refusal.CodeOf(err) == refusal.CodeUnavailable {
				n.log.Warn("booked run waits: its holder's account cannot be looked up now; trying again at the next tick", "booking", b.ID, "user", b.User, "err", err)
				return
			}
			n.log.Warn("booked run not started: its holder's account is gone or was replaced; ending the booking", "booking", b.ID, "user", b.User, "uid", b.UID, "err", err)
			n.end(b, lease.EndUserGone, "")
			return
		}
	}
	var cur, l lease.Lease
	var in []lease.Lease
	started := false
	err := n.locked(func() error {
		now := n.now()
		var ok bool
		cur, ok = n.table.Get(b.ID)
		if !ok || cur.Token != b.Token || !cur.Booked {
			return nil
		}
		var err error
		if l, in, err = n.table.PlanBookingStart(b.ID, now.Wall); err != nil {
			return err
		}
		for _, x := range in {
			if err := n.endLocked(x, lease.EndBooked, "", now); err != nil {
				return err
			}
		}
		if err := n.saveLocked(l, now); err != nil {
			return err
		}
		started = true
		return nil
	})
	if err != nil {
		n.log.Error("start booking", "booking", b.ID, "err", err)
		return
	}
	if !started {
		return
	}
	// The rest asks users' tmux servers (the ended leases' holders', the
	// booking's): off the node's loop, so none of them delays another
	// lease's step.
	n.background(func(ctx context.Context) {
		// The leases ended here have their end events (EndBooked), whose
		// notices tell their holders why.
		for _, x := range in {
			n.killSession(ctx, x, true)
		}
		n.log.Info("booking started", "lease", l.ID, "user", l.User, "ended", len(in))
		failed := ""
		if cur.Job != nil {
			run := RunOf(cur.Job.Spec(l.Session))
			// As a booked run always started: its end is its session's,
			// and the job kept for export is the one booked.
			run.RecordExit, run.Job = false, cur.Job
			u, err := n.sessionUser(lease.Caller{UID: l.UID, User: l.User})
			if err == nil {
				l, err = n.startSession(ctx, l, u, run)
			}
			if err != nil {
				n.log.Warn("start booked run", "lease", l.ID, "err", err)
				failed = err.Error()
				n.update(l, nil, func(x *lease.Lease) { x.Session = "" })
			}
		}
		// Its event's notice tells the holder, in every session and by their
		// webhook.
		n.record(event.BookingStartEvent(l, failed, n.now().Wall))
		n.deps.LeasesChanged()
	})
}

// stepBooking applies a booking's step of the clock.
func (n *Node) stepBooking(ctx context.Context, d lease.Due, now time.Time) {
	switch d.Step {
	case lease.StepBookingStart:
		n.startBooking(ctx, d.Lease)
	case lease.StepBookingLapsed:
		// Its end event (EndBookingLapsed) tells the holder.
		n.log.Warn("booking lapsed: its time passed while it could not start", "booking", d.Lease.ID, "user", d.Lease.User)
		n.end(d.Lease, lease.EndBookingLapsed, "")
	}
}
