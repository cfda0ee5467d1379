package gossip

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
)

// notifyLoop calls ClusterChanged, one call at a time, coalescing.
func (c *Cluster) notifyLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.changedCh:
			c.d.ClusterChanged()
		}
	}
}

// changed schedules a ClusterChanged call.
func (c *Cluster) changed() {
	select {
	case c.changedCh <- struct{}{}:
	default:
	}
}

// handleMessage dispatches a dibs message from NotifyMsg. b is owned.
func (c *Cluster) handleMessage(b []byte) {
	c.stats.messagesIn.Add(1)
	if len(b) == 0 {
		c.stats.dropped.Add(1)
		return
	}
	var err error
	switch messageType(b[0]) {
	case msgState:
		if c.testDropState.Load() {
			c.stats.dropped.Add(1)
			return
		}
		if c.seenBefore(b) {
			c.stats.duplicates.Add(1)
			return
		}
		var m *stateMsg
		if m, err = c.codec.decodeState(b); err == nil {
			c.applyState(m, b, true)
		}
	case msgLeave:
		var m *leaveMsg
		if m, err = c.codec.decodeLeave(b); err == nil {
			if m.Node != c.cfg.NodeName && c.seenBefore(b) {
				// A copy gossiped again after a forged leave was refuted
				// would otherwise stand again (one of v0.1.0's form, without
				// a sequence, stands at what is held when it arrives). The
				// node named refutes every copy.
				c.stats.duplicates.Add(1)
				return
			}
			c.applyLeave(m, b)
		}
	case msgRequest:
		var m *requestMsg
		if m, err = c.codec.decodeRequest(b); err == nil {
			c.serve(m)
		}
	case msgResponse:
		var m *responseMsg
		if m, err = c.codec.decodeResponse(b); err == nil {
			c.deliver(m)
		}
	case msgSuspect:
		var m *suspectMsg
		if m, err = c.codec.decodeSuspect(b); err == nil {
			if m.Node != c.cfg.NodeName && c.seenBefore(b) {
				c.stats.duplicates.Add(1) // as for a leave
				return
			}
			c.applySuspect(m, b)
		}
	default:
		err = wireErrorf("unexpected message type %d outside push/pull", b[0])
	}
	if err != nil {
		c.stats.dropped.Add(1)
		c.dropped("message", "", "gossip: dropped a message: %v", err)
	}
}

// seenBefore reports whether this exact state, leave or suspect message was
// handled before, and remembers it. Gossip copies are relayed byte for
// byte, so this catches nearly every duplicate; the set is cleared when it
// grows large, which only costs a few decodes.
func (c *Cluster) seenBefore(b []byte) bool {
	h := fnv.New64a()
	h.Write(b)
	k := h.Sum64()
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if _, ok := c.seen[k]; ok {
		return true
	}
	if len(c.seen) >= 8192 {
		clear(c.seen)
	}
	c.seen[k] = struct{}{}
	return false
}

// pushPullState is LocalState for push/pull: this node's sections, every
// section held for other nodes, and the leaves known.
func (c *Cluster) pushPullState() []byte {
	pp := pushPullMsg{From: c.cfg.NodeName, States: c.localJSON()}
	if c.forGood.Load() {
		pp.Left = append(pp.Left, leaveMsg{Node: c.cfg.NodeName, BootID: c.bootID, BootedAt: c.bootedAt.UnixNano(), Seq: c.lastSeq(secLeases)})
	}
	c.addHeld(&pp)
	b, err := c.codec.encode(msgPushPull, &pp)
	if err != nil {
		c.cfg.Logf("gossip: push/pull: %v", err)
		return nil
	}
	c.stats.messagesOut.Add(1)
	return b
}

// localJSON is this node's sections as push/pull carries them.
func (c *Cluster) localJSON() []json.RawMessage {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	var out []json.RawMessage
	for i := range c.local {
		if js := c.local[i].json; js != nil {
			out = append(out, js)
		}
	}
	return out
}

// addHeld adds to pp every section held for other nodes, and the leaves
// known.
func (c *Cluster) addHeld(pp *pushPullMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.peers {
		for _, h := range r.held {
			if h == nil {
				continue
			}
			if h.json == nil {
				h.json, _ = json.Marshal(h.msg)
			}
			pp.States = append(pp.States, h.json)
		}
		if r.leftBoot != "" {
			pp.Left = append(pp.Left, leaveMsg{Node: r.name, BootID: r.leftBoot, BootedAt: r.leftBootedAt, Seq: r.leftSeq})
		}
	}
}

// mergePushPull applies another agent's push/pull state.
func (c *Cluster) mergePushPull(buf []byte) {
	c.stats.messagesIn.Add(1)
	pp, states, err := c.codec.decodePushPull(buf)
	if err != nil {
		c.stats.dropped.Add(1)
		c.dropped("push/pull", "", "gossip: dropped push/pull state: %v", err)
		return
	}
	for _, s := range states {
		c.applyState(s, nil, false)
	}
	for i := range pp.Left {
		c.applyLeave(&pp.Left[i], nil)
	}
}

// dropped logs a refused message of one kind from one sender (empty when
// memberlist does not say who), at most once per kind and sender every few
// seconds, saying how many were not logged: a peer in a loop cannot flood
// the log.
func (c *Cluster) dropped(kind, from, format string, args ...any) {
	ok, n := c.refusals.Allow(kind, from)
	if !ok {
		return
	}
	line := fmt.Sprintf(format, args...)
	if n > 0 {
		line += fmt.Sprintf(" (and %d more not logged)", n)
	}
	c.cfg.Logf("%s", line)
}
