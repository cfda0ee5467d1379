package gossip

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/hashicorp/memberlist"
)

// TestPendingBootSurvivesADown: a restarted node's state that arrives
// before memberlist has confirmed its new boot is held; when memberlist
// first takes the old boot down (it went silent) and then brings the node
// up with the new boot, the held state is applied. It was dropped with the
// down, so the others saw the new boot without its leases until the next
// push/pull, 30 s later (TestRestartedNodeRejoinsWithNewBoot failed so
// under load).
func TestPendingBootSurvivesADown(t *testing.T) {
	c := &Cluster{peers: map[string]*peerRec{}, conflict: map[string]bool{}, changedCh: make(chan struct{}, 1)}
	oldAt, newAt := time.Unix(1000, 0), time.Unix(1060, 0)
	meta := func(boot string, at time.Time) []byte {
		return nodeMeta{WireMin: minWireVersion, WireMax: wireVersion, BootedAt: at, BootID: boot}.withProtocols(c.protocolRange()).encode()
	}
	c.memberUp(&memberlist.Node{Name: "node02", Meta: meta("oldboot", oldAt)})
	c.applyState(&stateMsg{Node: "node02", BootID: "newboot", BootedAt: newAt.UnixNano(), Seq: 2, Version: 6, Section: sectionLeases,
		Leases: &leaseSection{Leases: []lease.Lease{{ID: "node02-1", User: "erin"}}}}, nil, true)
	if p, _ := c.Peer("node02"); p.NodeState.BootID == "newboot" {
		t.Fatal("the new boot's state was applied before memberlist confirmed the boot")
	}
	c.memberDown(&memberlist.Node{Name: "node02", Meta: meta("oldboot", oldAt)})
	c.memberUp(&memberlist.Node{Name: "node02", Meta: meta("newboot", newAt)})
	p, _ := c.Peer("node02")
	if p.NodeState.BootID != "newboot" || p.NodeState.Version != 6 || len(p.NodeState.Leases) != 1 || p.NodeState.Leases[0].User != "erin" {
		t.Errorf("node02 after its new boot came up: boot %q version %d leases %+v, want newboot, 6, erin's", p.NodeState.BootID, p.NodeState.Version, p.NodeState.Leases)
	}
}
