package gossip

import (
	"bytes"
	"encoding/json"
	"time"
)

// Refuting what others say in this node's name.
//
// With one shared key, any agent holding it can write anything a node can:
// a section of another node's state, a leave notice, a suspicion. Sections
// are relayed and merged by push/pull, so "accepted only from its sender"
// would break relay. What holds instead is that the node named is never
// silenced, as memberlist lets a node refute a false "suspect" or "dead"
// about itself with a higher incarnation:
//
//   - A node that sees a section in its own name, of its own boot, that it
//     did not write (a higher sequence than its own, or its own sequence
//     with other content) publishes its own again at once with a sequence
//     above the forged one (Cluster.refute). Lease sections that are new
//     to an agent are gossiped on, so a forged one reaches its node within
//     a few gossip rounds; any section whose sequence runs more than
//     echoLead ahead of its boot's age is also sent back to its node by
//     whoever accepts it; and push/pull brings every section back to its
//     node within PushPullInterval.
//   - A sequence may not run further ahead of its boot than maxSeqLead
//     (seqBound). A node's own sequence follows its boot's age in
//     milliseconds (Cluster.nextSeq), so a node's real sections are always
//     within the bound, and a forged sequence can lead the node's own by at
//     most maxSeqLead: the node overtakes it by refuting at once, and its
//     own clock would overtake it within maxSeqLead anyway. A bound on the
//     jump from what an agent holds would not do: a forger raises it by the
//     bound each time, until the sequence runs out (2^64), and an agent that
//     missed the forgery would refuse the node's refutation as too large a
//     jump. Sections whose BootedAt differs from what memberlist reports for
//     that boot are refused too.
//   - A leave notice carries the leaving node's last lease sequence; a
//     leave of a node whose lease section is newer than that does not stand
//     (the node published after it, so it did not leave). A node that sees a
//     leave in its own name while it is not leaving publishes its lease
//     section again above it, and every agent drops the leave.
//   - A suspicion heard from another agent (not this agent's own failed
//     probe) stands until the node's lease section newer than what was held
//     when the suspicion arrived; a node that hears a suspicion of itself
//     publishes its lease section again at once.

// maxSeqLead is how far a section's sequence may run ahead of its boot's
// age in milliseconds, as the receiving agent reckons it from its own clock
// and the boot's BootedAt. It covers the clock skew between two nodes (the
// boot's start is read on the sender's wall clock, its age on the
// receiver's) and bursts of more than one change a millisecond. Ten minutes
// is far above the skew of any cluster whose leases' times mean anything,
// and a forged lead of ten minutes costs the real node nothing (it refutes
// at once; see above) while 2^64 ms is 584 million years.
const maxSeqLead = 10 * time.Minute

// echoLead is how far ahead of its boot's age a section's sequence may run
// before an agent that accepts it sends a copy back to its node: a real
// section is never ahead by more than the clock skew between the two.
const echoLead = time.Second

// ageMillis is the age in milliseconds at now of a boot that started at
// bootedAt (0 for a boot in the future).
func ageMillis(bootedAt, now time.Time) uint64 {
	d := now.Sub(bootedAt)
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// seqBound is the highest sequence accepted now for a boot that started at
// bootedAt (unix nanoseconds).
func seqBound(bootedAt int64, now time.Time) uint64 {
	return ageMillis(time.Unix(0, bootedAt), now) + uint64(maxSeqLead/time.Millisecond)
}

// bootStart is the BootedAt this agent trusts for boot of r: memberlist's
// (the node's own alive messages) when it reports that boot, else that of
// a section of the boot already held, else claimed. ok is false when claimed
// differs from the trusted one.
func (r *peerRec) bootStart(boot string, claimed int64) (at int64, ok bool) {
	switch {
	case r.hasMeta && r.meta.BootID == boot:
		at = r.meta.BootedAt.UnixNano()
	default:
		at = claimed
		for _, h := range r.held {
			if h != nil && h.msg.BootID == boot {
				at = h.msg.BootedAt
				break
			}
		}
	}
	return at, at == claimed
}

// checkSeq refuses a sequence of boot for r that runs too far ahead of the
// boot's age, or comes with another BootedAt than the boot's. c.mu is held.
func (c *Cluster) checkSeq(r *peerRec, kind, boot string, bootedAt int64, seq uint64) bool {
	at, ok := r.bootStart(boot, bootedAt)
	switch {
	case !ok:
		c.stats.dropped.Add(1)
		c.dropped("forged", r.name, "gossip: dropped a %s of %s: its boot %s started at %d, not %d as memberlist says (forged?)", kind, r.name, boot, bootedAt, at)
		return false
	case seq > seqBound(at, time.Now()):
		c.stats.dropped.Add(1)
		c.dropped("forged", r.name, "gossip: dropped a %s of %s: sequence %d runs more than %v ahead of its boot (forged?)", kind, r.name, seq, maxSeqLead)
		return false
	}
	return true
}

// ahead reports whether seq of a boot that started at bootedAt runs more
// than echoLead ahead of the boot's age.
func ahead(bootedAt int64, seq uint64) bool {
	return seq > ageMillis(time.Unix(0, bootedAt), time.Now())+uint64(echoLead/time.Millisecond)
}

// echo sends a copy of a section that runs ahead of its boot back to its
// node, so a forged one is refuted at once (see above). Best effort: one
// packet, when it fits.
func (c *Cluster) echo(m *stateMsg, wire []byte) {
	if !ahead(m.BootedAt, m.Seq) {
		return
	}
	if wire == nil {
		b, err := c.codec.encode(msgState, m)
		if err != nil {
			return
		}
		wire = b
	}
	if len(wire) > c.packetBudget {
		return
	}
	ml := c.list()
	if ml == nil {
		return
	}
	n, err := c.target(m.Node)
	if err != nil {
		return
	}
	if err := ml.SendBestEffort(&n, wire); err == nil {
		c.stats.messagesOut.Add(1)
	}
}

// refuteState publishes this node's section again, above m, when m is a
// section of this boot that this agent did not write.
func (c *Cluster) refuteState(m *stateMsg) {
	if m.BootID != c.bootID || c.leaving.Load() || m.Seq > seqBound(c.bootedAt.UnixNano(), time.Now()) {
		// Another boot's (memberlist orders boots), or one that every
		// other agent refuses anyway: chasing it would take this node's
		// own sequence past what they accept.
		return
	}
	i := sectionIndex(m.Section)
	own, js, norm, ok := c.ownSection(i)
	if !ok {
		return
	}
	forged := m.Seq > own
	if m.Seq == own && !m.Partial {
		// Push/pull brings this node's own section back every round; the
		// comparison runs off pubMu (a section may be a megabyte), and
		// this node's side of it once per revision.
		if norm == nil {
			norm = normalSection(js)
			c.keepNorm(i, own, norm)
		}
		b, err := json.Marshal(m)
		forged = norm != nil && err == nil && !bytes.Equal(norm, b)
	}
	if forged {
		c.dropped("refute", m.Section, "gossip: another agent published this node's %s (sequence %d); publishing this node's own above it", m.Section, m.Seq)
		c.refute(i, m.Seq)
	}
}

// ownSection is this node's section i as last published: its sequence,
// its JSON and its normal form (nil until made); not ok before the first.
func (c *Cluster) ownSection(i int) (seq uint64, js, norm []byte, ok bool) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	ls := &c.local[i]
	if ls.msg == nil {
		return 0, nil, nil, false
	}
	return ls.msg.Seq, ls.json, ls.norm, true
}

// keepNorm keeps norm as the normal form of section i while its revision
// is still seq.
func (c *Cluster) keepNorm(i int, seq uint64, norm []byte) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if ls := &c.local[i]; ls.msg != nil && ls.msg.Seq == seq {
		ls.norm = norm
	}
}

// normalSection is this agent's section js as another agent's copy of it
// reads once decoded and encoded again, to compare the two; nil if it does
// not decode.
func normalSection(js []byte) []byte {
	own, err := decodeStateJSON(js)
	if err != nil {
		return nil
	}
	b, err := json.Marshal(own)
	if err != nil {
		return nil
	}
	return b
}

// refuteLeave publishes this node's lease section again, above m, when m
// says this boot left and it has not.
func (c *Cluster) refuteLeave(m *leaveMsg) {
	if m.BootID != c.bootID || c.forGood.Load() || c.leaving.Load() {
		return
	}
	above := m.Seq
	if above > seqBound(c.bootedAt.UnixNano(), time.Now()) {
		above = 0 // refused everywhere; a new revision is enough
	}
	c.dropped("refute", "leave", "gossip: another agent said this node left; publishing its lease section again to refute it")
	c.refute(secLeases, above)
}

// refuteSuspect publishes this node's lease section again when another
// agent says this boot is suspect: every agent that marked it so on that
// word clears the mark when a newer section arrives.
func (c *Cluster) refuteSuspect(m *suspectMsg) {
	if m.BootID != c.bootID || c.leaving.Load() {
		return
	}
	c.refute(secLeases, 0)
}

// refute makes the next revision of section i exceed above and be
// published at once, even if its content did not change.
func (c *Cluster) refute(i int, above uint64) {
	c.askRefute(i, above)
	select {
	case c.urgentCh <- struct{}{}:
	default:
	}
}

// askRefute marks section i for a refuting revision above above.
func (c *Cluster) askRefute(i int, above uint64) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	ls := &c.local[i]
	ls.floor = max(ls.floor, above)
	ls.refute = true
}

// nextSeq is the sequence of a new revision of ls: above the last one and
// any refuted, and at least this boot's age in milliseconds, so that a
// forged sequence is overtaken and the bound (seqBound) always admits this
// node's own. pubMu is held.
func (c *Cluster) nextSeq(ls *localSection) uint64 {
	seq := max(ageMillis(c.bootedAt, c.startedAt)+uint64(time.Since(c.startedAt)/time.Millisecond), ls.floor+1, 1)
	if ls.msg != nil {
		seq = max(seq, ls.msg.Seq+1)
	}
	return seq
}

// lastSeq is the sequence of this node's section i as last revised.
func (c *Cluster) lastSeq(i int) uint64 {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if m := c.local[i].msg; m != nil {
		return m.Seq
	}
	return 0
}
