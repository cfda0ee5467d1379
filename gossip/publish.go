package gossip

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/hashicorp/memberlist"
)

// This file is the Cluster's publishing: lease sections go at once to every
// member (and as gossip), telemetry at most every TelemetryInterval. Its
// state is pubMu and local.

// localSection is one section of this node's own state as last published.
type localSection struct {
	content []byte // what changes are detected on
	msg     *stateMsg
	wire    []byte // the encoded full section
	gossip  []byte // the copy that fits a UDP packet; nil if none does
	json    []byte // msg as push/pull carries it
	sentSeq uint64
	madeAt  time.Time
	// refute asks for a new revision even if the content is the same, with
	// a sequence above floor: another agent published this section in this
	// node's name (see refute.go).
	refute bool
	floor  uint64
	// norm is json as another agent's copy reads back (normalSection),
	// made when first needed.
	norm []byte
}

// Publish says this node's state changed. Urgent changes (leases, queue)
// are sent to every live member at once, plus gossip; the rest (telemetry)
// goes at most every TelemetryInterval, and only if it changed. Publish only
// signals the Cluster's publishing goroutine, which calls LocalState: it
// never blocks and may be called with the agent's locks held.
func (c *Cluster) Publish(urgent bool) {
	ch := c.kickCh
	if urgent {
		ch = c.urgentCh
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sendLoop is the publishing goroutine: the only caller of LocalState after
// New, and the sender of this node's sections.
func (c *Cluster) sendLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.TelemetryInterval)
	defer tick.Stop()
	var lastTelemetry time.Time
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.urgentCh:
			c.publish(time.Now(), false)
		case <-c.kickCh:
			if now := time.Now(); now.Sub(lastTelemetry) >= c.cfg.TelemetryInterval {
				c.publish(now, true)
				lastTelemetry = now
			}
		case now := <-tick.C:
			if now.Sub(lastTelemetry) >= c.cfg.TelemetryInterval/2 {
				c.publish(now, true)
				lastTelemetry = now
			}
		}
	}
}

// publish reads LocalState and sends the lease section if it changed (and
// the telemetry section too, when telemetry is due).
func (c *Cluster) publish(now time.Time, telemetry bool) {
	if c.leaving.Load() || c.closed() {
		return
	}
	telemetry = telemetry || c.telemetryRefuted()
	c.refreshLocal(now, telemetry)
	sendLeases, gossipCopy, sendTelemetry := c.unsent(telemetry)
	if sendLeases != nil {
		c.seenBefore(sendLeases) // our own copies coming back are not news
		if gossipCopy != nil {
			c.seenBefore(gossipCopy)
			c.queueGossip(gossipName(sectionLeases, c.cfg.NodeName), gossipCopy)
		}
		c.fanout(sendLeases)
	}
	if sendTelemetry != nil {
		c.fanout(sendTelemetry)
	}
}

// telemetryRefuted says the telemetry section must be revised to refute a
// forged one (see refute.go).
func (c *Cluster) telemetryRefuted() bool {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return c.local[secTelemetry].refute
}

// unsent marks the revisions not sent yet as sent and returns them: the
// lease section with its gossip copy, and, with telemetry, the telemetry
// section (nil: nothing new).
func (c *Cluster) unsent(telemetry bool) (sendLeases, gossipCopy, sendTelemetry []byte) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	ls, ts := &c.local[secLeases], &c.local[secTelemetry]
	if ls.msg != nil && ls.sentSeq != ls.msg.Seq {
		ls.sentSeq = ls.msg.Seq
		sendLeases, gossipCopy = ls.wire, ls.gossip
	}
	if telemetry && ts.msg != nil && ts.sentSeq != ts.msg.Seq {
		ts.sentSeq = ts.msg.Seq
		sendTelemetry = ts.wire
	}
	return sendLeases, gossipCopy, sendTelemetry
}

// refreshLocal reads LocalState and revises this node's sections whose
// content changed; with refresh, the telemetry section is also revised when
// TelemetryRefresh has passed, so Snapshot.TakenAt on other agents never
// lags far behind.
func (c *Cluster) refreshLocal(now time.Time, refresh bool) {
	st := c.d.LocalState()
	st.Node, st.BootID, st.BootedAt = c.cfg.NodeName, c.bootID, c.bootedAt
	st.Leases, st.Queue, st.Ended = c.sanitize(st.Leases, st.Queue, st.Ended)

	ls := &leaseSection{Leases: st.Leases, Queue: st.Queue, Ended: st.Ended, QuietSince: st.QuietSince}
	c.fitQueue(ls)

	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.revise(secLeases, now, false, &stateMsg{Section: sectionLeases, Leases: ls, Version: st.Version}, ls)

	ts := &telemetrySection{Snapshot: st.Snapshot, Usage: st.Usage}
	cmp := *ts
	cmp.Snapshot.TakenAt = time.Time{}
	due := refresh && now.Sub(c.local[secTelemetry].madeAt) >= c.cfg.TelemetryRefresh
	c.revise(secTelemetry, now, due, &stateMsg{Section: sectionTelemetry, Telemetry: ts, Version: st.Version}, &cmp)

	c.setSelf(st, now)
}

// setSelf keeps st as this node's state, read at now (View's own entry).
// Callers may hold pubMu (the lock order is pubMu, then mu).
func (c *Cluster) setSelf(st NodeState, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.self, c.selfAt = st, now
}

// sanitize keeps an agent bug in one lease (or queue entry) from stopping
// every lease of this node from being published: text the other agents
// would refuse is escaped, anything else they would refuse is left out,
// each with a warning.
func (c *Cluster) sanitize(leases []lease.Lease, entries []queue.QueueEntry, ended []lease.EndedRun) ([]lease.Lease, []queue.QueueEntry, []lease.EndedRun) {
	out := make([]lease.Lease, 0, len(leases))
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		if l.Node == "" {
			l.Node = c.cfg.NodeName
		}
		l.Mono = nil
		if err := l.CheckText(); err != nil {
			// A lease granted before notes were held to plain text (or an
			// agent bug): publish it with the text escaped, not hidden,
			// since hiding it would show its GPUs as free elsewhere.
			c.warnOnce("text/"+l.ID, "gossip: lease %q: %v; publishing it escaped", l.ID, err)
			l.EachString(func(_ string, p *string) { *p = termsafe.String(*p) })
		}
		if err := validateLease(c.cfg.NodeName, &l, seen); err != nil {
			c.warnOnce("lease/"+err.Error(), "gossip: not publishing a lease: %v", err)
			continue
		}
		out = append(out, l)
		if len(out) == maxLeases {
			c.warnOnce("lease/max", "gossip: publishing only the first %d leases", maxLeases)
			break
		}
	}
	q := make([]queue.QueueEntry, 0, len(entries))
	for _, e := range entries {
		if err := validateEntry(c.cfg.NodeName, &e); err != nil {
			c.warnOnce("entry/"+err.Error(), "gossip: not publishing a queue entry: %v", err)
			continue
		}
		if q = append(q, e); len(q) == maxEntries {
			break
		}
	}
	runs := make([]lease.EndedRun, 0, len(ended))
	for _, r := range ended {
		if err := r.Validate(); err != nil {
			continue
		}
		if runs = append(runs, r); len(runs) == maxEntries {
			break
		}
	}
	return out, q, runs
}

// sectionSlack is room left in a state message for what surrounds the
// lease section (node, boot, sequence).
const sectionSlack = 4 << 10

// fitQueue keeps the lease section within maxStateBytes whatever the queue
// holds, so the leases (who holds which GPU) always reach the other nodes:
// a section over the limit would not be sent at all, and every other node
// would go on showing old holders. Entries are left out newest first from
// whoever has the most, so one person's flood costs their own entries, not
// anyone else's. The agent bounds each person's entries and strips their
// commands (agent.delegate.LocalState); this is the floor under that.
func (c *Cluster) fitQueue(ls *leaseSection) {
	if len(ls.Queue) == 0 {
		return
	}
	b, err := json.Marshal(ls)
	if err != nil || len(b) <= maxStateBytes-sectionSlack {
		return
	}
	over := len(b) - (maxStateBytes - sectionSlack)
	size := make([]int, len(ls.Queue))
	byUser := map[string][]int{}
	for i := range ls.Queue {
		e, _ := json.Marshal(&ls.Queue[i])
		size[i] = len(e) + 1
		byUser[ls.Queue[i].User] = append(byUser[ls.Queue[i].User], i)
	}
	drop := make([]bool, len(ls.Queue))
	dropped := 0
	for over > 0 && dropped < len(ls.Queue) {
		most := ""
		for u, idx := range byUser {
			if len(idx) > len(byUser[most]) || len(idx) == len(byUser[most]) && u < most {
				most = u
			}
		}
		idx := byUser[most]
		newest := 0
		for k, i := range idx {
			if ls.Queue[i].SubmittedAt.After(ls.Queue[idx[newest]].SubmittedAt) {
				newest = k
			}
		}
		i := idx[newest]
		byUser[most] = append(idx[:newest], idx[newest+1:]...)
		drop[i] = true
		dropped++
		over -= size[i]
	}
	kept := make([]queue.QueueEntry, 0, len(ls.Queue)-dropped)
	for i, e := range ls.Queue {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	c.warnOnce("queue/fit", "gossip: this node's section would pass %d bytes: publishing %d of its %d queue entries (the others wait here until there is room)", maxStateBytes, len(kept), len(ls.Queue))
	ls.Queue = kept
}

// revise makes m the new revision of section i if its content differs from
// the last one (or force). The caller holds pubMu.
func (c *Cluster) revise(i int, now time.Time, force bool, m *stateMsg, content any) {
	ls := &c.local[i]
	b, err := json.Marshal(content)
	if err != nil {
		c.cfg.Logf("gossip: encode this node's %s: %v", m.Section, err)
		return
	}
	if !force && !ls.refute && ls.msg != nil && string(b) == string(ls.content) {
		return
	}
	if ls.msg != nil && c.leaving.Load() {
		// Leave has read the last sequence for its notice (lastSeq, under
		// pubMu): a later revision would refute the node's own leave.
		return
	}
	m.Node, m.BootID, m.BootedAt = c.cfg.NodeName, c.bootID, c.bootedAt.UnixNano()
	m.Seq = c.nextSeq(ls)
	if err := m.validate(); err != nil {
		// The agent handed us something no other agent would accept;
		// sending it would only get it dropped everywhere.
		c.warnOnce("revise/"+err.Error(), "gossip: not publishing this node's %s: %v", m.Section, err)
		return
	}
	wire, err := c.codec.encode(msgState, m)
	if err != nil {
		c.cfg.Logf("gossip: not publishing this node's %s: %v", m.Section, err)
		return
	}
	js, _ := json.Marshal(m)
	*ls = localSection{content: b, msg: m, wire: wire, json: js, sentSeq: ls.sentSeq, madeAt: now}
	if m.Section == sectionLeases {
		ls.gossip = c.gossipCopy(m, wire)
	}
}

// gossipCopy is the copy of a lease section that fits one UDP packet: the
// message itself if it fits, else the leases with their notes trimmed
// (partial), else nil.
func (c *Cluster) gossipCopy(m *stateMsg, wire []byte) []byte {
	if wire != nil && len(wire) <= c.packetBudget {
		return wire
	}
	if m.Section != sectionLeases {
		return nil
	}
	for _, keep := range []int{120, 60, 24, 0} {
		p := trimNotes(m, keep)
		b, err := c.codec.encode(msgState, p)
		if err == nil && len(b) <= c.packetBudget {
			return b
		}
	}
	return nil
}

// trimNotes is a partial copy of a lease section whose notes are cut to at
// most keep bytes (at a character boundary).
func trimNotes(m *stateMsg, keep int) *stateMsg {
	p := *m
	p.Partial = true
	ls := *m.Leases
	ls.Leases = make([]lease.Lease, len(m.Leases.Leases))
	for i, l := range m.Leases.Leases {
		if len(l.Note) > keep {
			n := keep
			for n > 0 && n < len(l.Note) && l.Note[n]&0xC0 == 0x80 {
				n--
			}
			l.Note = l.Note[:n]
		}
		ls.Leases[i] = l
	}
	p.Leases = &ls
	return &p
}

func gossipName(section, node string) string { return section + "/" + node }

func (c *Cluster) queueGossip(name string, msg []byte) {
	c.bcast.QueueBroadcast(&broadcast{name: name, msg: msg})
}

// sendAll sends this node's current sections (leases and telemetry) to one
// member over TCP: what a member that just joined needs at once.
func (c *Cluster) sendAll(n *memberlist.Node) {
	// A member seen while New is still joining is sent to once New is done.
	for i := 0; !c.started.Load(); i++ {
		if i == 500 || c.closed() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	ml := c.list()
	if ml == nil || c.leaving.Load() || c.closed() {
		return
	}
	for _, m := range c.localWires() {
		if err := ml.SendReliable(n, m); err != nil {
			c.cfg.Logf("gossip: send state to %s, who just joined: %v", n.Name, err)
			return
		}
		c.stats.messagesOut.Add(1)
	}
}

// localWires are this node's sections as last published, encoded.
func (c *Cluster) localWires() [][]byte {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	var msgs [][]byte
	for i := range c.local {
		if w := c.local[i].wire; w != nil {
			msgs = append(msgs, w)
		}
	}
	return msgs
}

// fanout sends msg to every member but this one: a UDP packet each when it
// fits, else a TCP stream each, in parallel, in the background.
func (c *Cluster) fanout(msg []byte) {
	ml := c.list()
	if ml == nil {
		return
	}
	targets := c.memberNodes()
	if len(targets) == 0 {
		return
	}
	if len(msg) <= c.packetBudget {
		for i := range targets {
			if err := ml.SendBestEffort(&targets[i], msg); err != nil {
				c.cfg.Logf("gossip: send state to %s: %v", targets[i].Name, err)
				continue
			}
			c.stats.messagesOut.Add(1)
		}
		return
	}
	go c.sendReliableAll(ml, targets, msg, nil)
}

// sendReliableAll sends msg over TCP to every target, at most 16 at a time,
// and closes done (if given) when all have finished.
func (c *Cluster) sendReliableAll(ml *memberlist.Memberlist, targets []memberlist.Node, msg []byte, done chan struct{}) {
	if done != nil {
		defer close(done)
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func(n *memberlist.Node) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := ml.SendReliable(n, msg); err != nil {
				c.cfg.Logf("gossip: send to %s: %v", n.Name, err)
				return
			}
			c.stats.messagesOut.Add(1)
		}(&targets[i])
	}
	wg.Wait()
}
