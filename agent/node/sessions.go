package node

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// watch ends the lease when its session ends; a service's is supervised
// instead (supervise.go): restarted, not ended.
func (n *Node) watch(l lease.Lease, u launch.User) {
	if l.IsService() {
		n.supervise(l, u)
		return
	}
	ctx, cancel := context.WithCancel(n.ctx)
	n.track(l.ID, cancel)
	gone := n.deps.Sessions.Watch(ctx, u, l.Session, n.cfg.SessionPoll)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-gone:
		}
		if ctx.Err() != nil {
			return
		}
		if n.Current(l.ID, l.Token) {
			n.end(l, n.sessionEndReason(l, u), "")
		}
	}()
}

// failedStart ends a lease whose session did not start — unless the start
// was cut off (its context ended: the agent is stopping, or the caller
// gave up) while tmux may already have made the session, which then runs
// with no one waiting for its answer. Such a lease is kept and watched as
// a re-adopted one is: it ends when tmux says the session is not there
// (as a failed run, for a queued one), and if the agent stops first, the
// restarted agent re-adopts the session from the durable lease, so a
// queued attempt that runs is seen running and never started twice.
func (n *Node) failedStart(ctx context.Context, l lease.Lease, u launch.User) {
	if ctx.Err() == nil {
		n.end(l, lease.EndSessionFailed, "")
		return
	}
	if !n.Current(l.ID, l.Token) {
		return
	}
	n.log.Info("a session's start was cut off; keeping its lease until tmux says whether the session runs", "lease", l.ID, "session", l.Session, "err", ctx.Err())
	n.watch(l, u)
	n.deps.LeasesChanged()
}

// track makes cancel the way to stop watching lease id's session,
// stopping the watcher it replaces.
func (n *Node) track(id string, cancel context.CancelFunc) {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	if old := n.watching[id]; old != nil {
		old()
	}
	n.watching[id] = cancel
}

func (n *Node) stopWatching(id string) {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	if cancel := n.watching[id]; cancel != nil {
		cancel()
		delete(n.watching, id)
	}
}

// stopAll stops every session watcher (the sessions keep running).
func (n *Node) stopAll() {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	for id, cancel := range n.watching {
		cancel()
		delete(n.watching, id)
	}
}

// sessionEndReason reads how a queued run's command ended.
func (n *Node) sessionEndReason(l lease.Lease, u launch.User) lease.EndReason {
	code, ok, err := n.deps.Sessions.ExitStatus(u, l.Session)
	if err != nil && l.Entry != "" {
		n.log.Warn("read exit status", "lease", l.ID, "user", u.Name, "err", err)
	}
	if !ok {
		return lease.EndSessionEnded
	}
	return lease.ExitReason(code)
}

// readopt re-adopts, once the agent serves, the sessions of the leases it
// loaded: each is watched again (launch's Watch asks the holder's tmux
// server, every call bounded in time, and ends the lease only when the
// server says the session is gone). A server that does not answer — a user
// can swap their tmux socket for a listener that never does — keeps its
// lease held and is asked again at every poll; it delays nobody else's
// sessions, claims or start-up.
func (n *Node) readopt() {
	for _, l := range n.State().Leases {
		if l.Session == "" || !l.ReservedUntil.IsZero() {
			continue
		}
		n.adopt(l)
	}
}

// adopt watches l's session again as its holder. A holder whose account is
// gone or was replaced ends the lease; an account database that does not
// answer now is asked again a little later (the lease stays held).
func (n *Node) adopt(l lease.Lease) {
	u, err := n.holder(l)
	switch {
	case err == nil:
		n.watch(l, u)
	case refusal.CodeOf(err) == refusal.CodeUnavailable:
		n.log.Warn("cannot look up a lease's holder now; keeping the lease and asking again", "lease", l.ID, "user", l.User, "err", err)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			t := n.deps.Clock.NewTicker(n.cfg.SessionPoll * 10)
			defer t.Stop()
			select {
			case <-n.ctx.Done():
			case <-t.C():
				if n.Current(l.ID, l.Token) {
					n.adopt(l)
				}
			}
		}()
	default:
		n.log.Warn("lease holder is gone; ending the lease", "lease", l.ID, "user", l.User, "uid", l.UID, "err", err)
		n.end(l, lease.EndUserGone, "")
	}
}

// userCallBound bounds what one step of the clock may spend in a user's
// tmux server, off the node's loop.
const userCallBound = 15 * time.Second

// background runs f, a call into a user's tmux server or processes, on a
// goroutine of its own with a bounded context, so the node's loop (every
// other lease's warnings, ends and bookings) never waits on a server its
// user may have made slow or mute. Only the node's loop calls it (so the
// WaitGroup is never added to while Close waits on an empty one).
func (n *Node) background(f func(ctx context.Context)) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, userCallBound)
		defer cancel()
		f(ctx)
	}()
}

// tell puts a message in one session's status line (best effort).
func (n *Node) tell(ctx context.Context, u launch.User, session, text string) {
	if err := n.deps.Sessions.Message(ctx, u, session, "dibs: "+text); err != nil && !errors.Is(err, launch.ErrNoSession) {
		n.log.Warn("message session", "session", session, "user", u.Name, "err", err)
	}
}

// TellUser puts a message in every tmux session uid has on this node: a
// queued run that started, a gang that failed.
func (n *Node) TellUser(ctx context.Context, uid int, text string) {
	u, err := n.deps.Accounts.ByUID(uid)
	if err != nil {
		return
	}
	names, err := n.deps.Sessions.List(ctx, u)
	if err != nil {
		return
	}
	for _, s := range names {
		n.tell(ctx, u, s, strings.TrimPrefix(text, "dibs: "))
	}
}

// killSession ends a lease's session (SIGKILL first when hard).
func (n *Node) killSession(ctx context.Context, l lease.Lease, hard bool) {
	if l.Session == "" {
		return
	}
	u, err := n.holder(l)
	if err != nil {
		return
	}
	if hard {
		n.deps.Sessions.Signal(ctx, u, l.Session, 9)
	}
	if err := n.deps.Sessions.Kill(ctx, u, l.Session); err != nil && !errors.Is(err, launch.ErrNoSession) {
		n.log.Warn("kill session", "lease", l.ID, "session", l.Session, "err", err)
	}
}
