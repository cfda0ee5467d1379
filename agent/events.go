package agent

import (
	"context"
	"fmt"

	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// The events of issue 14, composed: the log (in the lease store when it
// keeps events, in memory otherwise), the webhooks, the fan-out of notices
// to every node, and a watcher that turns what the node's judgements and
// the cluster's membership show into events.

// buildEvents makes the log and the webhooks over the store.
func (a *Agent) buildEvents() {
	es, ok := a.store.(event.EventStore)
	if !ok {
		es = events.NewMemStore(10000)
	}
	a.events = events.New(events.Config{Node: a.cfg.NodeName, Keep: a.cfg.EventKeep, PerUserHour: a.cfg.EventsPerUserHour, Log: a.log.With("part", "events")},
		events.Deps{Store: es, Clock: a.deps.Clock, Notice: func(n event.Notice) { a.fanout.Notice(n) }})
	a.webhooks = events.NewWebhooks(events.WebhookConfig{Backoff: a.cfg.WebhookBackoff, UserAgent: "dibs/" + a.cfg.Version,
		Allow: a.cfg.WebhookAllow, Log: a.log.With("part", "webhooks")}, es, a.deps.Clock)
}

func (a *Agent) openEvents() error {
	if err := a.events.Open(); err != nil {
		return err
	}
	if err := a.webhooks.Open(); err != nil {
		// Webhooks are a convenience: a damaged setting must not keep the
		// node's GPUs from being served.
		a.log.Warn("webhooks: " + err.Error())
	}
	return nil
}

// teller is how a notice reaches a user's tmux sessions here.
func (a *Agent) teller() func(ctx context.Context, u launch.User, text string) (int, int, error) {
	t, ok := a.deps.Sessions.(interface {
		Notify(ctx context.Context, u launch.User, text string) (int, int, error)
	})
	if !ok {
		return nil
	}
	return t.Notify
}

func nodes(s *core.Service) func() []string {
	n, _ := s.Fanout()
	return n
}

func send(s *core.Service) func(ctx context.Context, node string, n event.Notice) error {
	_, f := s.Fanout()
	return f
}

// runEvents starts the writer, the fan-out and the watcher, and records
// that this agent started.
func (a *Agent) runEvents() {
	a.events.Run()
	a.fanout.Run()
	started := "started (dibs " + a.cfg.Version + ")"
	if r := a.node.Reboot(); r.Rebooted {
		// Said once, here: the node's reboot, with what it cost. Each
		// ended lease has its own end event (and its holder a notice).
		started = fmt.Sprintf("started after its node rebooted (dibs %s): every session of the last boot is gone; %d of its leases ended (node-rebooted)",
			a.cfg.Version, len(r.Ended))
	}
	e := event.AgentEvent(event.EventAgentJoin, a.cfg.NodeName, a.cfg.NodeName, started, a.deps.Clock.Now())
	if a.node.Reboot().Rebooted {
		e.Reason = string(lease.EndRebooted)
	}
	a.events.Record(e)
	a.watchDone = make(chan struct{})
	go a.watchEvents()
}

// stopEvents records a graceful stop and ends the watcher.
func (a *Agent) stopEvents(how exitHow) {
	if a.watchDone == nil {
		return
	}
	switch how {
	case exitRestart:
		a.events.Record(event.AgentEvent(event.EventAgentLeave, a.cfg.NodeName, a.cfg.NodeName, "stopped (restarting: the others keep its work for the grace)", a.deps.Clock.Now()))
	case exitLeave:
		a.events.Record(event.AgentEvent(event.EventAgentLeave, a.cfg.NodeName, a.cfg.NodeName, "left the cluster for good", a.deps.Clock.Now()))
	}
	a.cancel()
	<-a.watchDone
}

// closeEvents writes what the log holds and stops delivering.
func (a *Agent) closeEvents() {
	if a.fanout != nil && a.watchDone != nil {
		a.fanout.Close()
	}
	a.webhooks.Close()
	a.events.Close()
}

// watchEvents records what the node's published state and the cluster's
// membership show changed: a GPU newly squatted or idle, an agent that
// joined or went away (recorded by the scheduler only, so once).
func (a *Agent) watchEvents() {
	defer close(a.watchDone)
	st := a.node.State()
	version := st.Version
	judged := st.Judged
	members := map[string]bool{}
	primed := false
	for {
		changed := a.changed.Wait()
		if st = a.node.State(); st.Version != version {
			for _, e := range event.FlagEvents(a.cfg.NodeName, judged, st.Judged, st.Leases, st.QuietSince, a.deps.Clock.Now()) {
				a.events.Record(e)
			}
			version, judged = st.Version, st.Judged
		}
		if a.cluster.Load() != nil {
			a.watchMembers(members, primed)
			primed = true
		}
		select {
		case <-a.ctx.Done():
			return
		case <-changed:
		}
	}
}

// watchMembers records agents that came alive or went away since the last
// look; the first look only learns who is there.
func (a *Agent) watchMembers(alive map[string]bool, primed bool) {
	v := a.svc.Membership()
	self := v.Scheduler() == a.cfg.NodeName
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Self {
			continue
		}
		now := n.Alive()
		was, seen := alive[n.Name]
		alive[n.Name] = now
		if !primed || !self || (seen && was == now) || (!seen && !now) {
			continue
		}
		if now {
			a.events.Record(event.AgentEvent(event.EventAgentJoin, a.cfg.NodeName, n.Name, "joined the cluster", a.deps.Clock.Now()))
		} else {
			a.events.Record(event.AgentAwayEvent(a.cfg.NodeName, n.Name, n.Shown(v.Now, a.cfg.Sched.LostAfter), a.deps.Clock.Now()))
		}
	}
}
