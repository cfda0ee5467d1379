package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// A queued entry's --nodelist and --exclude: it starts only where they
// allow (a MIG entry too), says so as the reason elsewhere, and a
// submission they leave too few nodes for is refused.
func TestScheduleNodeChoice(t *testing.T) {
	nodes := []lease.SchedNode{snode("gpu-01", 2), snode("gpu-02", 4), splitNode("gpu-03")}
	e := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
	e.Exclude = []string{"gpu-01"}
	p := queue.Schedule([]queue.QueueEntry{e}, nodes, nil, t0, queue.SchedConfig{})
	checkList(t, "--exclude gpu-01 (which packs best)", started(p), []string{"gpu-01-q1@gpu-02:[0 1]"})

	m := askMIG("gpu-01-q2", alice, "3g.40gb", t0)
	m.Only = []string{"gpu-01", "gpu-02"}
	p = queue.Schedule([]queue.QueueEntry{m}, nodes, nil, t0, queue.SchedConfig{})
	if r := ranked(t, p, m.ID); len(p.Start) != 0 || r.Reason.Code != queue.WaitMIG {
		t.Errorf("a MIG entry whose nodelist has no MIG: starts %v, reason %+v", started(p), r.Reason)
	}

	g := ask("gpu-01-q3", alice, 2, 2, time.Hour, t0)
	g.Exclude = []string{"gpu-02"}
	p = queue.Schedule([]queue.QueueEntry{g}, nodes, nil, t0, queue.SchedConfig{Explain: true})
	r := ranked(t, p, g.ID)
	if len(p.Start) != 0 || r.Reason.Code == "" {
		t.Errorf("a gang left one whole-GPU node: starts %v, reason %+v", started(p), r.Reason)
	}
	for _, nr := range r.Nodes {
		if nr.Node == "gpu-02" && (nr.Code != queue.WaitNodes || !strings.Contains(nr.Words, "--exclude")) {
			t.Errorf("gpu-02's reason %+v, want its --exclude", nr)
		}
	}
	if err := queue.CheckFeasible(g, nodes, "", nil); err == nil || !strings.Contains(err.Error(), "only 1 of the 2 nodes have 2 GPUs") {
		t.Errorf("feasibility of a gang left one node with GPUs: %v", err)
	}
	g.Exclude = []string{"gpu-09"}
	if err := queue.CheckFeasible(g, nodes, "", nil); err == nil || !strings.Contains(err.Error(), "no node named gpu-09") {
		t.Errorf("feasibility with an unknown node excluded: %v", err)
	}
}
