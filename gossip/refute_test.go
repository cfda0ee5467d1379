package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// forge sends b from the keyed agent f to every member, directly and by
// gossip, as an agent holding the key can.
func forge(t *testing.T, f *tnode, name string, b []byte) {
	t.Helper()
	f.fanout(b)
	f.queueGossip(name, b)
}

// settled reports whether half a second has passed since at. A check that
// a forgery is undone waits for it as well as for its condition: the
// forged message may not have reached a node yet when the condition is
// first checked, and an undone forgery must stay undone.
func settled(at time.Time) (bool, string) {
	if d := time.Since(at); d < 500*time.Millisecond {
		return false, fmt.Sprintf("only %v since the forgery", d)
	}
	return true, ""
}

// showsLeases reports whether every node of nodes (but the one named)
// shows node's leases as held by user, and the version want.
func showsLeases(nodes []*tnode, node, user string, version uint64) (bool, string) {
	for _, n := range nodes {
		if n.cfg.NodeName == node {
			continue
		}
		p, ok := n.Peer(node)
		if !ok || !p.HasState || len(p.NodeState.Leases) == 0 {
			return false, fmt.Sprintf("%s has no leases of %s", n.cfg.NodeName, node)
		}
		if got := p.NodeState.Leases[0].User; got != user || p.NodeState.Version != version {
			return false, fmt.Sprintf("%s shows %s's lease held by %s at version %d, want %s at %d", n.cfg.NodeName, node, got, p.NodeState.Version, user, version)
		}
	}
	return true, ""
}

// Finding 2 of the fourth round: an agent holding the key published a
// leases section in another node's name, with its real boot and a sequence
// of 2^60. Every node showed the forged lease and ignored the real node's
// updates, even after the forger left. Now a sequence that far ahead of its
// boot is refused everywhere, one within the bound is refuted by the node
// it names at once, and the node's later updates are shown.
func TestForgedSectionIsRefuted(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	victim, forger := nodes[1], nodes[2]
	name := victim.cfg.NodeName
	v := victim.agent.setLeases("alice", "real", 0)
	victim.Publish(true)
	waitFor(t, 10*time.Second, func() (bool, string) { return showsLeases(nodes, name, "alice", v) })

	forged := func(seq uint64) []byte {
		return mustEncode(t, msgState, &stateMsg{Node: name, BootID: victim.BootID(), BootedAt: victim.bootedAt.UnixNano(),
			Seq: seq, Version: 1 << 60, Section: sectionLeases,
			Leases: &leaseSection{Leases: []lease.Lease{testLease(name, 7, "mallory", "forged", 0)}}})
	}
	// The attack as found: 2^60.
	forge(t, forger, gossipName(sectionLeases, name), forged(1<<60))
	// The most the bound lets through: minutes ahead of the node's own.
	ahead := victim.lastSeq(secLeases) + uint64(5*time.Minute/time.Millisecond)
	forge(t, forger, gossipName(sectionLeases, name), forged(ahead))
	at := time.Now()
	waitFor(t, 2*time.Second, func() (bool, string) {
		if ok, why := settled(at); !ok {
			return false, why
		}
		if ok, why := showsLeases(nodes, name, "alice", v); !ok {
			return false, why
		}
		if s := victim.lastSeq(secLeases); s <= ahead {
			return false, fmt.Sprintf("%s's own lease sequence is %d, not above the forged %d: not refuted", name, s, ahead)
		}
		return true, ""
	})

	// The node's later updates are not kept out, with the forger gone too.
	forger.Shutdown()
	v = victim.agent.setLeases("bob", "later", 1)
	victim.Publish(true)
	waitFor(t, 2*time.Second, func() (bool, string) { return showsLeases(nodes[:2], name, "bob", v) })
}

// A forged telemetry section is refuted the same way: whoever accepts a
// section that runs ahead of its boot sends it back to its node.
func TestForgedTelemetryIsRefuted(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	victim, forger := nodes[1], nodes[2]
	name := victim.cfg.NodeName
	victim.agent.setSnapshot(testSnapshot(t, "real-host"))
	victim.Publish(false)
	host := func(n *tnode) string {
		p, _ := n.Peer(name)
		return p.NodeState.Snapshot.Host.Name
	}
	waitFor(t, 15*time.Second, func() (bool, string) { return host(nodes[0]) == "real-host", "node00 shows host " + host(nodes[0]) })
	ahead := victim.lastSeq(secTelemetry) + uint64(5*time.Minute/time.Millisecond)
	forge(t, forger, "t/"+name, mustEncode(t, msgState, &stateMsg{Node: name, BootID: victim.BootID(), BootedAt: victim.bootedAt.UnixNano(),
		Seq: ahead, Version: 1 << 60, Section: sectionTelemetry, Telemetry: &telemetrySection{Snapshot: testSnapshot(t, "forged-host")}}))
	at := time.Now()
	waitFor(t, 2*time.Second, func() (bool, string) {
		if ok, why := settled(at); !ok {
			return false, why
		}
		if h := host(nodes[0]); h != "real-host" {
			return false, "node00 shows host " + h
		}
		if s := victim.lastSeq(secTelemetry); s <= ahead {
			return false, fmt.Sprintf("%s's own telemetry sequence is %d, not above the forged %d: not refuted", name, s, ahead)
		}
		return true, ""
	})
	// Its later telemetry is not kept out.
	victim.agent.setSnapshot(testSnapshot(t, "later-host"))
	victim.Publish(false)
	waitFor(t, 2*victim.Cluster.cfg.TelemetryInterval, func() (bool, string) { return host(nodes[0]) == "later-host", "node00 shows host " + host(nodes[0]) })
}

// Forged suspect and leave notices about a live node: every node goes on
// showing it alive, and when it then restarts it is shown dead (restarting,
// so its ranks hold for the grace), not left (its ranks ended at once).
// Probes are slow here so that only the refutation can clear a suspicion
// within the 2 s. A forged leave without a sequence replayed while the node
// is away is not taken either.
func TestForgedSuspectAndLeaveAreRefuted(t *testing.T) {
	nodes := startCluster(t, 3, func(c *Config) { c.ProbeInterval = 10 * time.Second })
	victim, forger := nodes[1], nodes[2]
	name := victim.cfg.NodeName
	v := victim.agent.setLeases("alice", "real", 0)
	victim.Publish(true)
	waitFor(t, 10*time.Second, func() (bool, string) { return showsLeases(nodes, name, "alice", v) })
	alive := func() (bool, string) {
		for _, n := range []*tnode{nodes[0], forger} {
			if p, _ := n.Peer(name); p.State != StateAlive {
				return false, fmt.Sprintf("%s shows %s %s", n.cfg.NodeName, name, p.State)
			}
		}
		return true, ""
	}

	before := victim.lastSeq(secLeases)
	forge(t, forger, "suspect/"+name, mustEncode(t, msgSuspect, &suspectMsg{Node: name, BootID: victim.BootID(), By: forger.cfg.NodeName}))
	at := time.Now()
	waitFor(t, 2*time.Second, func() (bool, string) {
		if ok, why := settled(at); !ok {
			return false, why
		}
		if ok, why := alive(); !ok {
			return false, why
		}
		if victim.lastSeq(secLeases) == before {
			return false, name + " has not refuted the suspicion"
		}
		return true, ""
	})

	// A leave as v0.1.0 sends it, and one that claims a later sequence.
	before = victim.lastSeq(secLeases)
	forge(t, forger, "leave/"+name, mustEncode(t, msgLeave, &leaveMsg{Node: name, BootID: victim.BootID(), BootedAt: victim.bootedAt.UnixNano()}))
	later := before + uint64(time.Minute/time.Millisecond)
	forge(t, forger, "leave2/"+name, mustEncode(t, msgLeave, &leaveMsg{Node: name, BootID: victim.BootID(), BootedAt: victim.bootedAt.UnixNano(), Seq: later}))
	waitFor(t, 2*time.Second, func() (bool, string) {
		for _, n := range []*tnode{nodes[0], forger} {
			n.mu.RLock()
			left := n.peers[name].leftBoot
			n.mu.RUnlock()
			if left != "" {
				return false, fmt.Sprintf("%s still holds that %s left", n.cfg.NodeName, name)
			}
		}
		if s := victim.lastSeq(secLeases); s <= later {
			return false, fmt.Sprintf("%s's lease sequence is %d, not above the forged leave's %d", name, s, later)
		}
		return alive()
	})

	// The victim's agent restarts: it steps out without a leave notice.
	// While it is away it cannot refute, so the forged leave without a
	// sequence, sent again, must not be taken: only v0.1.0 leaves without
	// one, and a copy reaching a node after the refutation would stand.
	if err := victim.Restart(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The copy is written with its fields in another order: the same
	// leave in bytes no node has seen, so no duplicate check stops it.
	replay, err := frame(msgLeave, fmt.Appendf(nil, `{"t":%d,"b":%q,"n":%q}`, victim.bootedAt.UnixNano(), victim.BootID(), name))
	if err != nil {
		t.Fatal(err)
	}
	forge(t, forger, "leave/"+name, replay)
	at = time.Now()
	waitFor(t, 10*time.Second, func() (bool, string) {
		if ok, why := settled(at); !ok {
			return false, why
		}
		for _, n := range []*tnode{nodes[0], forger} {
			if p, _ := n.Peer(name); p.State != StateDead {
				return false, fmt.Sprintf("%s shows %s %s during its restart, want %s (restarting, its ranks held)", n.cfg.NodeName, name, p.State, StateDead)
			}
		}
		return true, ""
	})
}
