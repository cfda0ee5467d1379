package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// This file is the service's part of issue 14: the cluster's events, a
// person's notices and webhook, and their kept job logs, each over the peer
// protocol so any node answers for all.

// maxEventsListed bounds one `dibs events` answer per node.
const maxEventsListed = 5000

// eventCallTimeout bounds one node's answer.
const eventCallTimeout = 3 * time.Second

// registerEventOps serves the endpoints of agent/peer/events.go.
func (s *Service) registerEventOps() {
	m := s.deps.Peers
	peer.Handle(m, peer.Events, func(ctx context.Context, from string, who peer.Actor, r peer.EventsRequest) (peer.EventsReply, error) {
		if s.deps.Events == nil {
			return peer.EventsReply{}, nil
		}
		limit := r.Limit
		if limit == 0 {
			limit = event.MaxEventsPerReply
		}
		last := s.deps.Events.Last()
		evs, more, err := s.deps.Events.Events(r.Filter, limit)
		if err != nil {
			return peer.EventsReply{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s cannot read its event log: %v", s.cfg.Node, err)}
		}
		// One event the others would refuse must not hide the rest; a
		// caller older than the service events (protocol 8) refuses
		// their kinds, so it is sent the rest.
		older := s.protocolOf(from) < peer.ServiceSince
		ok := make([]event.Event, 0, len(evs))
		for _, e := range evs {
			if older && event.IsServiceKind(e.Kind) {
				continue
			}
			if err := e.Validate(); err != nil {
				s.log.Warn("event log: an event fails its checks; not sent", "seq", e.Seq, "err", err)
				continue
			}
			ok = append(ok, e)
		}
		return peer.EventsReply{Events: ok, More: more, Last: last}, nil
	})
	peer.Handle(m, peer.Notify, func(ctx context.Context, from string, who peer.Actor, r peer.NotifyRequest) (peer.NotifyReply, error) {
		if !who.System {
			return peer.NotifyReply{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only the cluster sends notices"}
		}
		return s.deliver(ctx, r.Notice), nil
	})
	peer.Handle(m, peer.NotifySet, func(ctx context.Context, from string, who peer.Actor, r peer.NotifySetRequest) (peer.Empty, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.Empty{}, err
		}
		if s.deps.Webhooks == nil {
			return peer.Empty{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: s.cfg.Node + " keeps no webhooks"}
		}
		if r.Clear {
			return peer.Empty{}, s.deps.Webhooks.Clear(b.c.User)
		}
		return peer.Empty{}, s.deps.Webhooks.Set(event.NotifySetting{User: b.c.User, URL: r.URL, Format: r.Format, SetAt: r.SetAt})
	})
	peer.Handle(m, peer.NotifyStatus, func(ctx context.Context, from string, who peer.Actor, _ peer.Empty) (peer.NotifyStatusReply, error) {
		if who.System || s.deps.Webhooks == nil {
			return peer.NotifyStatusReply{}, nil
		}
		st := s.deps.Webhooks.Status(who.User)
		out := peer.NotifyStatusReply{Setting: st.Setting, LastOK: st.LastOK, Pending: st.Pending}
		for _, f := range st.Failures {
			out.Failures = append(out.Failures, peer.WebhookFailure{At: f.At, Text: f.Text, Err: f.Err, Attempts: f.Attempts})
		}
		return out, nil
	})
	peer.Handle(m, peer.LogRuns, func(ctx context.Context, from string, who peer.Actor, r peer.LogRunsRequest) (peer.LogRunsReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LogRunsReply{}, err
		}
		var out peer.LogRunsReply
		for _, k := range s.deps.Node.RunsNamed(b.c.User, r.Name) {
			if k.Session != "" { // a run an older agent kept names no session
				out.Runs = append(out.Runs, peer.LogRun{Lease: k.Lease, Session: k.Session, Log: k.Log, Entry: k.Entry, Rank: k.Rank, At: k.At})
			}
		}
		return out, nil
	})
	peer.Handle(m, peer.Logs, func(ctx context.Context, from string, who peer.Actor, r peer.LogsRequest) (peer.LogsReply, error) {
		b, err := s.forPeer(from, who)
		if err != nil {
			return peer.LogsReply{}, err
		}
		u, err := s.deps.Accounts.ByUID(b.c.UID)
		if err != nil {
			return peer.LogsReply{}, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("%s has no account on %s, so keeps no logs there", b.c.User, s.cfg.Node)}
		}
		if s.deps.ReadLog == nil {
			return peer.LogsReply{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s reads no logs", s.cfg.Node)}
		}
		c, err := s.deps.ReadLog(ctx, u, r.Session, r.Part, r.Offset, r.Max)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return peer.LogsReply{}, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no log of %s on %s: only runs started with a command keep one (in ~/%s)", r.Session, s.cfg.Node, launch.LogDir)}
		case err != nil:
			return peer.LogsReply{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("read the log of %s on %s: %v", r.Session, s.cfg.Node, err)}
		}
		return peer.LogsReply{Data: c.Data, Size: c.Size, Inode: c.Inode}, nil
	})
}

// record adds an event to this node's log, when it keeps one.
func (s *Service) record(e event.Event) {
	if s.deps.Events != nil {
		s.deps.Events.Record(e)
	}
}

// tellTimeout bounds showing one notice in one user's tmux sessions.
const tellTimeout = 2 * time.Second

// deliver shows a notice on this node: on the person's boards here, in
// their tmux sessions here, and by their webhook when this node keeps it.
func (s *Service) deliver(ctx context.Context, n event.Notice) peer.NotifyReply {
	var r peer.NotifyReply
	if u, err := s.deps.Accounts.ByName(n.User); err == nil {
		about := ""
		if n.Kind == event.EventWarn {
			about = n.Lease
		}
		s.deps.Node.Notify(u.UID, about, n.Text)
		if s.deps.Tell != nil {
			// The user's tmux server is theirs to break: a bounded wait.
			tctx, cancel := context.WithTimeout(ctx, tellTimeout)
			shown, later, err := s.deps.Tell(tctx, u, "dibs: "+n.Text)
			cancel()
			if err != nil && !errors.Is(err, launch.ErrTmuxNotFound) {
				s.log.Warn("notice: tell the user's tmux sessions", "user", n.User, "err", err)
			}
			r.Shown, r.Later = shown, later
		}
	}
	if s.deps.Webhooks != nil {
		if n.Test {
			ok, err := s.deps.Webhooks.Test(ctx, n)
			r.Webhook = ok
			if err != nil {
				r.WebhookErr = words.OneLine(err.Error())
			}
		} else {
			r.Webhook = s.deps.Webhooks.Status(n.User).Setting != nil
			s.deps.Webhooks.Deliver(n)
		}
	}
	return r
}

// Fanout is how the node where an event happened reaches every node with
// its notice: the live nodes' names and a send to one of them.
func (s *Service) Fanout() (nodes func() []string, send func(ctx context.Context, node string, n event.Notice) error) {
	nodes = func() []string {
		v := s.membership()
		var out []string
		for i := range v.Nodes {
			if v.Nodes[i].Alive() {
				out = append(out, v.Nodes[i].Name)
			}
		}
		return out
	}
	send = func(ctx context.Context, node string, n event.Notice) error {
		if event.IsServiceKind(n.Kind) && s.protocolOf(node) < peer.ServiceSince {
			return nil // an older agent refuses the kind, and runs no service
		}
		_, err := peer.Call(ctx, s.deps.Peers, node, peer.Notify, peer.System, peer.NotifyRequest{Notice: n})
		return err
	}
	return nodes, send
}

// membership is the cluster's nodes and their states, without the rest of
// View (usage reads the ledger): what the events' paths ask on every
// change.
func (s *Service) membership() queue.ClusterView {
	var peers []queue.NodeView
	if cl := s.link(); cl != nil {
		peers = cl.Peers()
	}
	return queue.NewClusterView(queue.NodeView{Name: s.cfg.Node}, peers, s.deps.Clock.Now())
}

// protocolOf is the newest protocol node's agent speaks, as its gossip
// last said; this agent's own for itself, and for a node not heard
// (its events are asked in this agent's protocol all the same).
func (s *Service) protocolOf(node string) int {
	if node != s.cfg.Node {
		v := s.membership()
		for i := range v.Nodes {
			if n := &v.Nodes[i]; n.Name == node && n.Protocol != 0 {
				return n.Protocol
			}
		}
	}
	return s.protocol()
}

// Membership is the cluster's nodes and their states, cheaply.
func (s *Service) Membership() queue.ClusterView { return s.membership() }

// liveNodes names the nodes that can answer now.
func (s *Service) liveNodes() []string {
	nodes, _ := s.Fanout()
	return nodes()
}

// nodeEvents reads one node's events that f matches, page by page, up to
// maxEventsListed; last is the node's newest sequence when asked.
func (s *Service) nodeEvents(ctx context.Context, node string, who peer.Actor, f event.EventFilter) (evs []event.Event, last uint64, truncated bool, err error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, eventCallTimeout)
		r, err := peer.Call(cctx, s.deps.Peers, node, peer.Events, who, peer.EventsRequest{Filter: f})
		cancel()
		if err != nil {
			return evs, last, false, err
		}
		last = max(last, r.Last)
		evs = append(evs, r.Events...)
		if len(r.Events) > 0 {
			f.After = r.Events[len(r.Events)-1].Seq
			last = max(last, f.After)
		}
		if !r.More || len(r.Events) == 0 {
			return evs, last, false, nil
		}
		if len(evs) >= maxEventsListed {
			return evs, last, true, nil
		}
	}
}

// clusterEvents reads f from every live node at once.
func (s *Service) clusterEvents(ctx context.Context, who peer.Actor, f event.EventFilter, nodes []string) (list api.EventList, last map[string]uint64) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	last = map[string]uint64{}
	list.Events = []event.Event{}
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, l, trunc, err := s.nodeEvents(ctx, n, who, f)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				list.Missing = append(list.Missing, n)
				return
			}
			list.Events = append(list.Events, evs...)
			list.Truncated = list.Truncated || trunc
			last[n] = l
		}()
	}
	wg.Wait()
	slices.Sort(list.Missing)
	event.SortEvents(list.Events)
	return list, last
}

// eventFilter reads `--since` and `--user`.
func eventFilter(b *Bound, req api.EventsRequest) (event.EventFilter, error) {
	since := 24 * time.Hour
	if req.Since != "" {
		d, err := words.ParseDuration(req.Since)
		if err != nil {
			return event.EventFilter{}, err
		}
		since = d
	}
	if req.User != "" && !words.ValidUserName(req.User) {
		return event.EventFilter{}, refusal.Invalidf("%q is not a user name", req.User)
	}
	return event.EventFilter{Since: b.s.deps.Clock.Now().Add(-since), User: req.User}, nil
}

// Events is `dibs events`: what happened on every node, oldest first.
func (b *Bound) Events(ctx context.Context, req api.EventsRequest) (api.EventList, error) {
	f, err := eventFilter(b, req)
	if err != nil {
		return api.EventList{}, err
	}
	list, _ := b.s.clusterEvents(ctx, peer.As(actorName(b)), f, b.s.liveNodes())
	return list, nil
}

// actorName is who the caller is to other nodes; a caller without a name
// (a uid with no account) reads as the cluster.
func actorName(b *Bound) string {
	if words.ValidUserName(b.c.User) {
		return b.c.User
	}
	return ""
}

// followThrottle is the least time between two rounds of asking every node
// for new events: a burst of changes is one round.
const followThrottle = 200 * time.Millisecond

// followBackstop asks again after this long without a change, for an event
// that came with no change anyone saw (the cluster's telemetry can lag).
const followBackstop = 10 * time.Second

// FollowEvents is `dibs events --follow`: the events since req.Since, then
// each new one anywhere, as it happens. It wakes on changes (this node's
// events, leases and queue, and every change gossip brings); it does not
// poll.
func (b *Bound) FollowEvents(ctx context.Context, req api.EventsRequest) (<-chan event.Event, func() error, error) {
	f, err := eventFilter(b, req)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan event.Event, 64)
	done := make(chan struct{})
	var ferr error
	go func() {
		defer close(done)
		defer close(ch)
		s := b.s
		who := peer.As(actorName(b))
		list, cursors := s.clusterEvents(ctx, who, f, s.liveNodes())
		send := func(evs []event.Event) bool {
			for _, e := range evs {
				select {
				case ch <- e:
				case <-ctx.Done():
					return false
				}
			}
			return true
		}
		if !send(list.Events) {
			return
		}
		for {
			changed := s.Changes()
			var local <-chan struct{}
			if s.deps.Events != nil {
				local = s.deps.Events.Changes()
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-local:
			case <-s.deps.Clock.After(followBackstop):
			}
			var fresh []event.Event
			for _, n := range s.liveNodes() {
				nf := f
				if c, ok := cursors[n]; ok {
					nf.After, nf.Since = c, time.Time{}
				}
				evs, last, _, err := s.nodeEvents(ctx, n, who, nf)
				if err != nil {
					continue
				}
				fresh = append(fresh, evs...)
				cursors[n] = max(cursors[n], last)
			}
			event.SortEvents(fresh)
			if !send(fresh) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-s.deps.Clock.After(followThrottle):
			}
		}
	}()
	return ch, func() error { <-done; return ferr }, nil
}

// Notify is `dibs notify`: set, clear or test the caller's webhook, and say
// how their notices stand.
func (b *Bound) Notify(ctx context.Context, req api.NotifyRequest) (api.NotifyStatus, error) {
	s := b.s
	if (req.Webhook != "" || req.Off) && b.write() != nil {
		return api.NotifyStatus{}, b.write()
	}
	if !words.ValidUserName(b.c.User) {
		return api.NotifyStatus{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "you have no account here, so cannot set notifications"}
	}
	who, err := b.actor("other nodes")
	if err != nil {
		return api.NotifyStatus{}, err
	}
	nodes := s.liveNodes()
	switch {
	case req.Off && req.Webhook != "":
		return api.NotifyStatus{}, refusal.Invalidf("give --webhook URL or --off, not both")
	case req.Off:
		for _, n := range nodes {
			if _, err := peer.Call(ctx, s.deps.Peers, n, peer.NotifySet, who, peer.NotifySetRequest{Clear: true}); err != nil {
				return api.NotifyStatus{}, fmt.Errorf("turn the webhook off on %s: %w", n, err)
			}
		}
	case req.Webhook != "":
		if err := events.CheckURL(req.Webhook); err != nil {
			return api.NotifyStatus{}, err
		}
		format := req.Format
		switch format {
		case "":
			format = event.WebhookJSON
			if strings.Contains(strings.ToLower(req.Webhook), "ntfy") {
				format = event.WebhookText
			}
		case event.WebhookJSON, event.WebhookText:
		default:
			return api.NotifyStatus{}, refusal.Invalidf("--format %q: use json (Slack, Discord, Mattermost) or text (ntfy)", req.Format)
		}
		set := peer.NotifySetRequest{URL: req.Webhook, Format: format, SetAt: s.deps.Clock.Now().Round(0)}
		if _, err := peer.Call(ctx, s.deps.Peers, s.cfg.Node, peer.NotifySet, who, set); err != nil {
			return api.NotifyStatus{}, err
		}
		// One node keeps it, so each notice is posted once: the others
		// forget theirs.
		for _, n := range nodes {
			if n != s.cfg.Node {
				peer.Call(ctx, s.deps.Peers, n, peer.NotifySet, who, peer.NotifySetRequest{Clear: true})
			}
		}
	}
	var test *api.NotifyTest
	if req.Test {
		test = testNotice(ctx, b, nodes)
	}
	st := notifyStatus(ctx, b, nodes)
	st.Test = test
	return st, nil
}

// testNotice sends a test notice through every node, as a real one goes.
func testNotice(ctx context.Context, b *Bound, nodes []string) *api.NotifyTest {
	s := b.s
	n := event.Notice{User: b.c.User, Node: s.cfg.Node, At: s.deps.Clock.Now().Round(0), Test: true,
		Text: "a test notice from `dibs notify --test` on " + s.cfg.Node + ": this is how dibs tells you"}
	out := &api.NotifyTest{}
	for _, node := range nodes {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := peer.Call(cctx, s.deps.Peers, node, peer.Notify, peer.System, peer.NotifyRequest{Notice: n})
		cancel()
		if err != nil {
			continue
		}
		out.Shown += r.Shown
		out.Later += r.Later
		if r.Webhook {
			out.Webhook = true
			out.WebhookErr = r.WebhookErr
		}
	}
	return out
}

// notifyStatus asks every node for the caller's webhook.
func notifyStatus(ctx context.Context, b *Bound, nodes []string) api.NotifyStatus {
	s := b.s
	st := api.NotifyStatus{User: b.c.User}
	for _, node := range nodes {
		cctx, cancel := context.WithTimeout(ctx, eventCallTimeout)
		r, err := peer.Call(cctx, s.deps.Peers, node, peer.NotifyStatus, peer.As(b.c.User), peer.Empty{})
		cancel()
		if err != nil {
			st.Missing = append(st.Missing, node)
			continue
		}
		if r.Setting == nil {
			continue
		}
		if st.Webhook == nil || r.Setting.SetAt.After(st.Webhook.SetAt) {
			if st.Node != "" {
				st.Also = append(st.Also, st.Node)
			}
			st.Webhook, st.Node, st.LastOK, st.Pending = r.Setting, node, r.LastOK, r.Pending
		} else {
			st.Also = append(st.Also, node)
		}
		for _, f := range r.Failures {
			st.Failures = append(st.Failures, api.NotifyFailure{At: f.At, Node: node, Text: f.Text, Err: f.Err, Attempts: f.Attempts})
		}
	}
	slices.SortFunc(st.Failures, func(x, y api.NotifyFailure) int { return x.At.Compare(y.At) })
	return st
}

// LogSources finds the kept logs of id: a lease, a queued request (every
// rank of its latest attempt), an array (every task's) or a session name
// (node.MatchRun), the caller's own, the
// newest run of that name on each node. Each run is found by its own
// record: a live lease in the cluster's view (durable before its run was
// answered, so an agent killed at once still has it), an ended one in the
// runs its node keeps (node.KeptRun, the newest MaxKeptRunsPerUser per
// person). The event log, which stops keeping a person's events past
// their hourly cap, is read only for nodes too old to answer and when
// neither record knows the name (a run older than the kept ones).
func (b *Bound) LogSources(ctx context.Context, id string) ([]api.LogSource, error) {
	s := b.s
	if !words.ValidUserName(b.c.User) {
		return nil, &refusal.Error{Code: refusal.CodeForbidden, Msg: "you have no account here, so have no logs"}
	}
	if id == "" || len(id) > 2*words.MaxNameLen || !words.ValidToken(id, 2*words.MaxNameLen) {
		return nil, refusal.Invalidf("name the run: a lease id (node01-42), a queued request (node01-q3) or a session name")
	}
	nodes := s.liveNodes()
	if n, ok := lease.NodeOfID(id); ok && slices.Contains(nodes, n) {
		nodes = []string{n}
	}
	type found struct {
		src api.LogSource
		m   node.RunMatch
		at  time.Time
	}
	var all []found
	add := func(src api.LogSource, entry string, at time.Time) {
		m, ok := node.MatchRun(id, src.Lease, src.Session, entry)
		if !ok {
			return
		}
		src.Task = m.Task
		all = append(all, found{src, m, at})
	}
	live := map[string]bool{}
	for _, l := range s.View().Leases() {
		live[l.ID] = true
		if l.User != b.c.User || l.Session == "" || !l.ReservedUntil.IsZero() {
			continue
		}
		add(api.LogSource{Node: l.Node, Session: l.Session, Log: l.LogName(), Lease: l.ID, Rank: l.Rank, Running: true}, l.Entry, l.StartedAt)
	}
	// The runs each node keeps, asked of all at once.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var unasked []string // nodes too old to say: their event log speaks for them
	var missing []string // nodes that did not answer
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, eventCallTimeout)
			r, err := peer.Call(cctx, s.deps.Peers, n, peer.LogRuns, peer.As(b.c.User), peer.LogRunsRequest{Name: id})
			cancel()
			mu.Lock()
			defer mu.Unlock()
			var refused *refusal.Error
			switch {
			case errors.As(err, &refused):
				unasked = append(unasked, n)
				return
			case err != nil:
				missing = append(missing, n)
				return
			}
			for _, k := range r.Runs {
				add(api.LogSource{Node: n, Session: k.Session, Log: k.Log, Lease: k.Lease, Rank: k.Rank, Running: live[k.Lease]}, k.Entry, k.At)
			}
		}()
	}
	wg.Wait()
	if len(all) == 0 {
		unasked = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return slices.Contains(missing, n) })
	}
	if len(unasked) > 0 {
		list, _ := s.clusterEvents(ctx, peer.As(b.c.User), event.EventFilter{User: b.c.User}, unasked)
		missing = append(missing, list.Missing...)
		for _, e := range list.Events {
			if e.Kind != event.EventClaim || e.Session == "" || e.User != b.c.User || e.Reason == event.ReasonReserved {
				continue
			}
			add(api.LogSource{Node: e.Node, Session: e.Session, Log: e.Log, Lease: e.Lease, Rank: e.Rank, Running: live[e.Lease]}, e.Entry, e.At)
		}
	}
	latest := map[string]int{} // each request's (each array task's) latest attempt
	for _, f := range all {
		latest[f.m.Entry] = max(latest[f.m.Entry], f.m.Attempt)
	}
	// The newest run of the name on each node: a live one, else the last
	// started.
	slices.SortStableFunc(all, func(x, y found) int {
		if x.src.Running != y.src.Running {
			if x.src.Running {
				return -1
			}
			return 1
		}
		return y.at.Compare(x.at)
	})
	var out []api.LogSource
	seen := map[string]bool{}
	for _, f := range all {
		if f.m.Attempt != latest[f.m.Entry] || seen[f.src.Node+"/"+f.src.Session] {
			continue
		}
		seen[f.src.Node+"/"+f.src.Session] = true
		out = append(out, f.src)
	}
	slices.SortFunc(out, func(x, y api.LogSource) int {
		_, i, _ := job.ArrayTaskOf(x.Task)
		_, j, _ := job.ArrayTaskOf(y.Task)
		if i != j {
			return i - j
		}
		return x.Rank - y.Rank
	})
	if len(out) == 0 {
		msg := fmt.Sprintf("no run of yours named %s: give a lease id (node01-42), a queued request or array (node01-q3; one task: node01-q3/5) or a session name (`dibs ls` shows the running ones, `dibs events --user %s` older ones)", id, b.c.User)
		if len(missing) > 0 {
			slices.Sort(missing)
			msg += "; " + strings.Join(missing, ", ") + " did not answer"
		}
		return nil, &refusal.Error{Code: refusal.CodeNotFound, Msg: msg}
	}
	return out, nil
}

// ReadLog reads part of one of the caller's kept logs, on the node that
// keeps it.
func (b *Bound) ReadLog(ctx context.Context, req api.LogReadRequest) (api.LogChunk, error) {
	if !words.ValidUserName(b.c.User) {
		return api.LogChunk{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "you have no account here, so have no logs"}
	}
	if err := words.ValidNodeName(req.Node); err != nil {
		return api.LogChunk{}, refusal.Wrap(refusal.CodeInvalid, err)
	}
	if req.Max <= 0 || req.Max > peer.MaxLogChunk {
		req.Max = peer.MaxLogChunk
	}
	who, err := b.actor(req.Node)
	if err != nil {
		return api.LogChunk{}, err
	}
	r, err := peer.Call(ctx, b.s.deps.Peers, req.Node, peer.Logs, who, peer.LogsRequest{Session: req.Session, Part: req.Part, Offset: req.Offset, Max: req.Max})
	if err != nil {
		return api.LogChunk{}, err
	}
	return api.LogChunk{Data: r.Data, Size: r.Size, Inode: r.Inode}, nil
}
