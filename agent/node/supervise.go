package node

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// The supervisor keeps this node's services up: one loop per service
// lease, started where a run's session would be watched (watch hands a
// service's lease here), which probes the replica every SessionPoll and
// does what a service.Tracker says — restart in place after its backoff,
// or end a crash loop. It holds no state the agent must keep: an agent
// that restarts (SIGTERM, an upgrade) re-adopts the running session as it
// found it, and the same process keeps serving.

// listenerFinder is the part of launch.Launcher that finds which of a
// session's processes listens on a port. The node's Sessions fakes need
// not have it; without it a service with a port is never found healthy.
type listenerFinder interface {
	ListenerOf(ctx context.Context, u launch.User, name string, port int) (launch.Listener, error)
}

// checkRunner is the part of launch.Launcher that runs a service's
// --health-cmd as its owner; without it such a service is never healthy.
type checkRunner interface {
	RunCheck(ctx context.Context, u launch.User, dir string, env map[string]string, cmd string) error
}

// probeBound bounds one probe of a service (the tmux call, the connect,
// the HTTP answer).
const probeBound = 5 * time.Second

// supervise keeps l's service up until its lease ends or the node closes.
func (n *Node) supervise(l lease.Lease, u launch.User) {
	ctx, cancel := context.WithCancel(n.ctx)
	n.track(l.ID, cancel)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.superviseLoop(ctx, l, u)
	}()
}

func (n *Node) superviseLoop(ctx context.Context, l lease.Lease, u launch.User) {
	rules := n.cfg.ServiceRules.WithDefaults()
	tr := service.NewTracker(rules, n.deps.Clock.Now(), l.Service.Restarts)
	w := service.NewWatch(l.Service.Status, n.deps.Clock.Now(), rules.TellUnhealthyAfter, n.cfg.Policy.ServiceIdleAfter)
	var mine checkPorts
	t := n.deps.Clock.NewTicker(n.cfg.SessionPoll)
	defer t.Stop()
	var wrote time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !n.Current(l.ID, l.Token) {
			return
		}
		if n.deps.HoldService != nil && n.deps.HoldService(l) {
			// Fenced, or moved away, or the cluster not heard yet: a
			// replica that stopped itself is not started again here.
			continue
		}
		p, ok := n.probeService(ctx, l, u, &mine)
		if !ok {
			continue // tmux did not answer: ask again, change nothing
		}
		pid := p.root
		now := n.deps.Clock.Now()
		restarted := false
		switch tr.Observe(p.Probe, now) {
		case service.Restart:
			pid = n.restartService(ctx, l, u)
			tr.Started(n.deps.Clock.Now())
			restarted = true
		case service.Stop:
			n.crashLoop(l)
			return
		}
		used := p.clients > 0 || n.smBusy(l)
		tells, untold := w.Observe(tr.State, restarted, used, now)
		n.recordStatus(&l, tr, pid, w.IdleSince(), &wrote)
		n.tellService(l, tells, untold, w, now)
	}
}

// probe is one look at a replica: the Tracker's part, the session's
// first process, and how many connections to its port were not the
// supervisor's own checks.
type probe struct {
	service.Probe
	root    int
	clients int
}

// checkPorts are the local ports of the supervisor's own recent checks
// of one replica, so its connections (still in TIME_WAIT for a minute)
// are not taken for requests.
type checkPorts map[int]time.Time

// checkPortKeep is how long a check's port is remembered: past Linux's
// TIME_WAIT (60 s).
const checkPortKeep = 2 * time.Minute

func (c *checkPorts) add(port int, now time.Time) {
	if *c == nil {
		*c = checkPorts{}
	}
	for p, at := range *c {
		if now.Sub(at) > checkPortKeep {
			delete(*c, p)
		}
	}
	if port != 0 {
		(*c)[port] = now
	}
}

// probeService looks at l's replica once: whether its session runs, and
// whether its check passes. ok is false when tmux did not answer.
func (n *Node) probeService(ctx context.Context, l lease.Lease, u launch.User, mine *checkPorts) (p probe, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, probeBound)
	defer cancel()
	running, err := n.deps.Sessions.Exists(ctx, u, l.Session)
	if err != nil {
		return p, false
	}
	if !running {
		return p, true
	}
	p.Running = true
	lf, _ := n.deps.Sessions.(listenerFinder)
	if lf == nil {
		return p, true
	}
	who, err := lf.ListenerOf(ctx, u, l.Session, l.Service.Port)
	if err != nil {
		return p, false
	}
	for _, c := range who.Clients {
		if _, own := (*mine)[c]; !own {
			p.clients++
		}
	}
	start := n.deps.Clock.Now()
	checked := false
	switch {
	case l.Service.Port == 0:
		p.Healthy = who.Root != 0
	default:
		// The listener must be the replica's own: another user who bound
		// the port while it was down answers, but is not the service.
		checked = who.PID != 0
		if checked {
			var from int
			p.Healthy, from = answers(ctx, l.Service.Port, l.Service.Health)
			mine.add(from, start)
		}
	}
	if p.Healthy && l.Service.HealthCmd != "" {
		cr, _ := n.deps.Sessions.(checkRunner)
		run := serviceRun(l)
		checked = cr != nil
		p.Healthy = cr != nil && cr.RunCheck(ctx, u, run.Dir, run.UserEnv, l.Service.HealthCmd) == nil
	}
	if checked && n.deps.HealthChecked != nil {
		n.deps.HealthChecked(l, n.deps.Clock.Now().Sub(start))
	}
	p.root = who.Root
	return p, true
}

// smBusy reports whether any of l's GPUs reads SM use at or over the
// node's idle threshold in its latest snapshot. A GPU that reports none
// (or a lease that holds none) shows no use; a shared GPU's use may be
// another holder's, which keeps the service from being flagged, never
// flags it wrongly.
func (n *Node) smBusy(l lease.Lease) bool {
	st := n.state.Load()
	if st == nil {
		return false
	}
	for _, g := range st.Snap.GPUs {
		if slices.Contains(l.GPUs, g.Index) && g.UtilizationPct != nil && *g.UtilizationPct >= n.cfg.Policy.IdleUtilPct {
			return true
		}
	}
	return false
}

// tellService records the events a probe of l's replica called for; the
// log sends the notices of those its owner is to hear (their sessions and
// boards on every node, their webhook).
func (n *Node) tellService(l lease.Lease, tells []service.Tell, untold int, w *service.Watch, now time.Time) {
	for _, t := range tells {
		var e event.Event
		switch t {
		case service.TellHealthy, service.TellUnhealthy:
			kind := event.EventSvcHealthy
			if t == service.TellUnhealthy {
				kind = event.EventSvcUnhealthy
			}
			detail := ""
			if untold > 0 {
				detail = fmt.Sprintf("%d more changes between healthy and unhealthy since the last logged one (logged at most every %s)", untold, words.FormatDuration(service.FlapEvery))
			}
			e = event.ServiceEvent(kind, l, now, detail)
		case service.TellUnhealthyLong:
			e = event.ServiceEvent(event.EventSvcUnhealthy, l, now, fmt.Sprintf("not healthy for %s; dibs logs %s shows its output", words.FormatDuration(w.TellUnhealthyAfter), l.Service.Name))
			e.Reason = event.ReasonLong
		case service.TellRestarted:
			e = event.ServiceEvent(event.EventSvcRestarted, l, now, "")
		case service.TellIdle:
			e = event.ServiceIdleEvent(l, now.Sub(w.IdleSince()), now)
		default:
			continue
		}
		n.record(e)
	}
}

// answers reports whether the service answers on port of this node's
// loopback: a TCP connect, or with path an HTTP GET answered 2xx; from is
// the local port the check connected from (0 when it did not connect). A
// replica listens on the loopback or on every address to be checked.
func answers(ctx context.Context, port int, path string) (ok bool, from int) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort("::1", strconv.Itoa(port)))
	}
	if err != nil {
		return false, 0
	}
	defer conn.Close()
	if a, ok := conn.LocalAddr().(*net.TCPAddr); ok {
		from = a.Port
	}
	if path == "" {
		return true, from
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: localhost:%d\r\nUser-Agent: dibs-health\r\n\r\n", path, port); err != nil {
		return false, from
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return false, from
	}
	f := strings.Fields(line)
	return len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/") && len(f[1]) == 3 && f[1][0] == '2', from
}

// restartService stops what is left of l's replica and starts it again
// from the definition its lease holds, and returns the new replica's
// first process (0 when it did not start: the next probe finds it gone
// and the tracker backs off).
func (n *Node) restartService(ctx context.Context, l lease.Lease, u launch.User) int {
	ctx, cancel := context.WithTimeout(ctx, userCallBound)
	defer cancel()
	if ok, err := n.deps.Sessions.Exists(ctx, u, l.Session); err == nil && ok {
		n.killSession(ctx, l, true)
	}
	s, err := n.deps.Sessions.Start(ctx, n.sessionSpec(l, u, serviceRun(l)))
	if err != nil {
		n.log.Warn("restart service", "service", l.Service.Name, "lease", l.ID, "err", err)
		return 0
	}
	if !n.Current(l.ID, l.Token) {
		// Stopped while it restarted: the new replica must not outlive it.
		n.killSession(ctx, l, true)
		return 0
	}
	n.log.Info("service restarted", "service", l.Service.Name, "lease", l.ID, "user", l.User, "pid", s.PanePID)
	return s.PanePID
}

// serviceRun is the session a service's lease starts, from the job it
// holds. A service records no exit status: its command's end is a
// restart, not the lease's end.
func serviceRun(l lease.Lease) *Run {
	j := l.Job
	if j == nil {
		j = &job.Job{}
	}
	return &Run{Name: l.Session, Command: j.Command, Dir: j.Dir, UserEnv: j.Env}
}

// crashLoop ends a service that restarted too often, keeping its log, and
// tells its owner: a notice on their board and in their sessions here,
// and the end event (crash-loop) their webhook hears.
// EndServiceCopy ends this node's copy of a service's replica (its
// session first, then its lease) for why: EndMovedAway when the replica
// runs elsewhere now, which leaves no stop behind, or EndReleased when a
// stop of the replica was recorded elsewhere while this copy was away.
func (n *Node) EndServiceCopy(ctx context.Context, l lease.Lease, why lease.EndReason) error {
	n.killSession(ctx, l, true)
	return n.end(l, why, "")
}

func (n *Node) crashLoop(l lease.Lease) {
	r := n.cfg.ServiceRules.WithDefaults()
	text := fmt.Sprintf("service %s crash-looped on %s (%d restarts in %s): stopped; its log: dibs logs %s",
		l.Service.Name, n.cfg.Name, r.CrashRestarts, words.FormatDuration(r.CrashWindow), l.Service.Name)
	n.log.Warn("service crash-looped; stopping it", "service", l.Service.Name, "lease", l.ID, "user", l.User)
	ctx, cancel := context.WithTimeout(n.ctx, userCallBound)
	defer cancel()
	// Its last replica goes before its lease: nothing of it answers once
	// the board says it stopped.
	n.killSession(ctx, l, true)
	// The svc-crash-loop event reaches its owner's sessions and webhook
	// as every notice does (the lease's end event, which follows, tells
	// nothing more); the board says it in the service's words.
	cl := l
	svc := *l.Service
	svc.State = service.CrashLoop
	cl.Service = &svc
	n.record(event.ServiceEvent(event.EventSvcCrashLoop, cl, n.deps.Clock.Now(),
		fmt.Sprintf("%d restarts in %s", r.CrashRestarts, words.FormatDuration(r.CrashWindow))))
	n.end(l, lease.EndCrashLoop, "")
	n.Notify(l.UID, "", text)
}

// recordStatus writes what the tracker decided to the lease when it
// changed, so every node's board shows it; wrote is when it last did.
func (n *Node) recordStatus(l *lease.Lease, tr *service.Tracker, pid int, idleSince time.Time, wrote *time.Time) {
	st := service.Status{State: tr.State, Restarts: tr.Restarts, Since: tr.Since.Round(0), PID: l.Service.PID, IdleSince: idleSince.Round(0)}
	if pid != 0 {
		st.PID = pid
	}
	now := n.deps.Clock.Now()
	if !service.WriteStatus(l.Service.Status, st, now.Sub(*wrote)) {
		return
	}
	if st.Restarts == l.Service.Restarts && !l.Service.Since.IsZero() {
		st.Since = l.Service.Since // an adopted replica keeps its start
	}
	ok := n.update(*l, nil, func(cur *lease.Lease) {
		svc := *cur.Service
		svc.Status = st
		cur.Service = &svc
	})
	if ok {
		*wrote = now
		svc := *l.Service
		svc.Status = st
		l.Service = &svc
		n.deps.LeasesChanged()
	}
}
