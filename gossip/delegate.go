package gossip

import (
	"bytes"
	"time"

	"github.com/hashicorp/memberlist"
)

// The adapters below are what memberlist calls. They stay thin: each one
// decodes or copies what it got and hands it to the Cluster. memberlist
// calls NotifyJoin/NotifyLeave/NotifyUpdate, NotifyAlive and NotifyConflict
// while holding its node lock, so nothing reached from them may call back
// into memberlist (the Cluster never calls memberlist while holding its own
// lock, which keeps the lock order memberlist → Cluster).

// delegate adapts memberlist.Delegate.
type delegate struct{ c *Cluster }

var _ memberlist.Delegate = (*delegate)(nil)

// NodeMeta returns this agent's identity and wire versions.
func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.c.meta) > limit {
		// Cannot happen (meta is under 100 bytes); an empty meta makes the
		// others refuse us, which is the safe failure.
		return nil
	}
	return d.c.meta
}

// NotifyMsg receives a dibs message from a packet or a stream. memberlist
// reuses the buffer, so it is copied; requests go to a worker, everything
// else is applied at once (a decode and a map update).
func (d *delegate) NotifyMsg(b []byte) {
	d.c.handleMessage(bytes.Clone(b))
}

// GetBroadcasts hands memberlist the queued gossip copies of lease changes.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	msgs := d.c.bcast.GetBroadcasts(overhead, limit)
	d.c.stats.messagesOut.Add(uint64(len(msgs)))
	return msgs
}

// LocalState is every node's state this agent holds, for push/pull.
func (d *delegate) LocalState(join bool) []byte { return d.c.pushPullState() }

// MergeRemoteState applies another agent's push/pull state through the same
// apply as gossip.
func (d *delegate) MergeRemoteState(buf []byte, join bool) { d.c.mergePushPull(buf) }

// events adapts memberlist.EventDelegate.
type events struct{ c *Cluster }

var _ memberlist.EventDelegate = (*events)(nil)

func (e *events) NotifyJoin(n *memberlist.Node)   { e.c.memberUp(n) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.c.memberUp(n) }
func (e *events) NotifyLeave(n *memberlist.Node)  { e.c.memberDown(n) }

// alive adapts memberlist.AliveDelegate: it refuses nodes that are not
// dibs agents of a compatible wire version.
type alive struct{ c *Cluster }

var _ memberlist.AliveDelegate = (*alive)(nil)

func (a *alive) NotifyAlive(n *memberlist.Node) error { return a.c.checkAlive(n) }

// conflict adapts memberlist.ConflictDelegate: two agents claim one name.
type conflict struct{ c *Cluster }

var _ memberlist.ConflictDelegate = (*conflict)(nil)

func (f *conflict) NotifyConflict(existing, other *memberlist.Node) {
	f.c.nameConflict(existing, other)
}

// merge adapts memberlist.MergeDelegate: a join that would put two agents
// under one name is refused on both sides.
type merge struct{ c *Cluster }

var _ memberlist.MergeDelegate = (*merge)(nil)

func (m *merge) NotifyMerge(peers []*memberlist.Node) error { return m.c.checkMerge(peers) }

// ping adapts memberlist.PingDelegate: a node that answered our probe is
// not suspect.
type ping struct{ c *Cluster }

var _ memberlist.PingDelegate = (*ping)(nil)

func (p *ping) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate: the node answered
// this agent's probe, so it is heard from and not suspect.
func (p *ping) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	p.c.clearSuspect(other.Name)
}

// broadcast is a queued gossip copy, named so that a newer copy about the
// same node replaces an older one still in the queue.
type broadcast struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	nb, ok := other.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
func (b *broadcast) Name() string    { return b.name }
