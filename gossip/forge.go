package gossip

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Forging, for tests only. Any agent holding the cluster key can say
// anything in another node's name (refute.go); these let the tests of other
// packages (the agent's, with real agents) play that agent, to show that
// what the agents do with a forgery — a gang ended, a lease shown that
// nobody holds — is undone. Nothing in dibs calls them: an agent only ever
// publishes its own node's state (Publish).

// ForgeLeases sends, as the keyed agent of c can, a lease section in the
// name of node's boot bootID (started at bootedAt) with sequence seq and
// leases, to every member directly and by gossip. For tests only.
func (c *Cluster) ForgeLeases(node, bootID string, bootedAt time.Time, seq uint64, leases []lease.Lease) error {
	b, err := encodeMessage(msgState, &stateMsg{Node: node, BootID: bootID, BootedAt: bootedAt.UnixNano(),
		Seq: seq, Version: 1 << 60, Section: sectionLeases, Leases: &leaseSection{Leases: leases}})
	if err != nil {
		return fmt.Errorf("forge a lease section of %s: %w", node, err)
	}
	c.forge(gossipName(sectionLeases, node), b)
	return nil
}

// ForgeLeave sends a leave notice in the name of node's boot bootID, with
// seq as its last lease sequence (0: as v0.1.0 sends one). For tests only.
func (c *Cluster) ForgeLeave(node, bootID string, bootedAt time.Time, seq uint64) error {
	b, err := encodeMessage(msgLeave, &leaveMsg{Node: node, BootID: bootID, BootedAt: bootedAt.UnixNano(), Seq: seq})
	if err != nil {
		return fmt.Errorf("forge a leave of %s: %w", node, err)
	}
	c.forge(fmt.Sprintf("leave/%s/%d", node, seq), b)
	return nil
}

// ForgeSuspect sends a suspicion of node's boot bootID, as if c's probe of
// it had failed. For tests only.
func (c *Cluster) ForgeSuspect(node, bootID string) error {
	b, err := encodeMessage(msgSuspect, &suspectMsg{Node: node, BootID: bootID, By: c.cfg.NodeName, At: time.Now().UnixNano()})
	if err != nil {
		return fmt.Errorf("forge a suspicion of %s: %w", node, err)
	}
	c.forge("suspect/"+node, b)
	return nil
}

// forge sends b to every member directly and queues it for gossip.
func (c *Cluster) forge(name string, b []byte) {
	c.fanout(b)
	c.queueGossip(name, b)
}
