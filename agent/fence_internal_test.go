package agent

import (
	"testing"

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
