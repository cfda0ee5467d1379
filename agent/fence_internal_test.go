package agent

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/queue"
)

// TestFenceTouchIsInTouchOnAtMostOneSideOfAPartition: the rule that
// decides whether an agent's heartbeat is touched (its replicas keep
// serving) and whether it moves others' services. Of any split, at most
// one side is in touch; a single-node cluster always is.
func TestFenceTouchIsInTouchOnAtMostOneSideOfAPartition(t *testing.T) {
	view := func(self string, states map[string]string) queue.ClusterView {
		v := queue.ClusterView{Self: self}
		for _, name := range []string{"node01", "node02", "node03", "node04"} {
			st, ok := states[name]
			if !ok && name != self {
				continue
			}
			v.Nodes = append(v.Nodes, queue.NodeView{Name: name, Self: name == self, State: st, HasState: true})
		}
		return v
	}
	cases := []struct {
		name      string
		self      string
		join      bool
		states    map[string]string
		alone, in bool
	}{
		{"single node, never joined", "node01", false, nil, true, true},
		{"restarted, its peers not heard", "node02", true, nil, false, false},
		{"two nodes, both up", "node02", true, map[string]string{"node01": queue.NodeAlive}, false, true},
		{"two nodes cut: the lowest keeps serving", "node01", false, map[string]string{"node02": queue.NodeDead}, false, true},
		{"two nodes cut: the other fences", "node02", true, map[string]string{"node01": queue.NodeDead}, false, false},
		{"the other left for good: alone", "node02", true, map[string]string{"node01": queue.NodeLeft}, true, true},
		{"three nodes, one cut off", "node01", false, map[string]string{"node02": queue.NodeDead, "node03": queue.NodeDead}, false, false},
		{"three nodes, the majority", "node02", true, map[string]string{"node01": queue.NodeDead, "node03": queue.NodeAlive}, false, true},
		{"four split two and two, with node01", "node01", false, map[string]string{"node02": queue.NodeAlive, "node03": queue.NodeDead, "node04": queue.NodeDead}, false, true},
		{"four split two and two, without node01", "node03", true, map[string]string{"node01": queue.NodeDead, "node02": queue.NodeDead, "node04": queue.NodeAlive}, false, false},
	}
	for _, c := range cases {
		a := &Agent{cfg: Config{Cluster: &ClusterSettings{}}}
		if c.join {
			a.cfg.Cluster.Join = []string{"seed"}
		}
		alone, in := a.touch(view(c.self, c.states))
		if alone != c.alone || in != c.in {
			t.Errorf("%s: alone %v, in touch %v; want %v, %v", c.name, alone, in, c.alone, c.in)
		}
	}
	// A member seen once and then gone from the view (reaped after a
	// partition) still counts: the cut-off node never takes itself for
	// alone.
	a := &Agent{cfg: Config{Cluster: &ClusterSettings{Join: []string{"seed"}}}}
	a.touch(view("node02", map[string]string{"node01": queue.NodeAlive}))
	if alone, in := a.touch(view("node02", nil)); alone || in {
		t.Errorf("node02 after node01 vanished from its view: alone %v, in touch %v; want neither", alone, in)
	}
}

// TestUnheardMembersAreSuspectToTheFence: a member alive in the view but
// not heard from within the bound (or never) counts as suspect for the
// fence; one heard lately, a dead one and this node stay as they are.
func TestUnheardMembersAreSuspectToTheFence(t *testing.T) {
	now := time.Unix(1000, 0)
	v := queue.ClusterView{Self: "node01", Nodes: []queue.NodeView{
		{Name: "node01", Self: true, State: queue.NodeAlive, HasState: true},
		{Name: "node02", State: queue.NodeAlive, HasState: true},
		{Name: "node03", State: queue.NodeAlive, HasState: true},
		{Name: "node04", State: queue.NodeAlive, HasState: true},
		{Name: "node05", State: queue.NodeDead, HasState: true},
	}}
	heard := map[string]time.Time{"node02": now.Add(-4 * time.Second), "node03": now.Add(-6 * time.Second)}
	got := unheardSuspect(v, heard, now, 5*time.Second)
	want := map[string]string{"node01": queue.NodeAlive, "node02": queue.NodeAlive, "node03": queue.NodeSuspect, "node04": queue.NodeSuspect, "node05": queue.NodeDead}
	for _, n := range got.Nodes {
		if n.State != want[n.Name] {
			t.Errorf("%s: got %s, want %s", n.Name, n.State, want[n.Name])
		}
	}
	if v.Nodes[2].State != queue.NodeAlive {
		t.Error("the view given was changed")
	}
	if got, want := heardWithin(3), 5*time.Second; got != want {
		t.Errorf("heardWithin(3): got %s, want %s", got, want)
	}
	if got, want := heardWithin(32), 32*time.Second; got != want {
		t.Errorf("heardWithin(32): got %s, want %s", got, want)
	}
}
