package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// servicePolicy is the default policy with room for services on 4 GPUs
// of the cluster (the default is a quarter of it).
func servicePolicy() lease.Policy {
	p := lease.DefaultPolicy()
	p.ServiceGPUs = 4
	return p
}

// replicaOf is the board's lease of me's replica i of service name.
func replicaOf(t *testing.T, nodes []*agenttest.Node, uid int, name string, i int) (lease.Lease, bool) {
	t.Helper()
	b, err := nodes[0].Agent.For(uid).Board(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.Services {
		if l.Service != nil && l.Service.Name == name && l.Service.Replica == i && l.UID == uid {
			return l, true
		}
	}
	return lease.Lease{}, false
}

// TestServiceReplicasAdmission: replicas of one service on a port go to
// distinct nodes; a replica index taken is refused, as is an update's
// Replaces that names no live replica of the caller's; every replica's
// GPUs count against the per-person bound, and the count of services
// counts names, not replicas. Each refusal is one line.
func TestServiceReplicasAdmission(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, OwnTmux: true,
		Policy: servicePolicy()})
	me := nodes[0].Agent.For(u.UID)
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	claim := func(count int, spec service.Spec) (api.ClaimResponse, error) {
		return me.Claim(ctx(t), api.ClaimRequest{Count: count, Run: run, Service: &spec})
	}
	web := service.Spec{Name: "web", Port: 18000, Replicas: 2}
	r0, err := claim(1, web)
	if err != nil {
		t.Fatal(err)
	}
	one := web
	one.Replica = 1
	r1, err := claim(1, one)
	if err != nil {
		t.Fatal(err)
	}
	if r0.Node == r1.Node || r0.Session != "svc-web" || r1.Session != "svc1-web" {
		t.Fatalf("replicas on %s (%s) and %s (%s): want two nodes, sessions svc-web and svc1-web", r0.Node, r0.Session, r1.Node, r1.Session)
	}
	bogus := one
	bogus.Replaces = "node01-999"
	tb := service.Spec{Name: "tb", Replicas: 3, Replica: 2}
	for _, c := range []struct {
		count int
		spec  service.Spec
		want  string
	}{
		{0, one, "you already run replica web/1 (on " + r1.Node + ")"},
		{0, bogus, "lease node01-999 is no live replica of your service web"},
		{1, service.Spec{Name: "x"}, "services may hold at most 2 GPUs per person (leases.service_gpus_per_user) and yours hold 2"},
		{1, service.Spec{Name: "big", Replicas: 3}, "--replicas 3 of 1 GPU each take 3, and your other services hold 2"},
		{0, service.Spec{Name: "web", Port: 18000, Replicas: 3, Replica: 2}, "--replicas 3 needs 3 nodes with no GPU free (replicas on port 18000 each need a node of their own); 2 fit"},
	} {
		_, err := claim(c.count, c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line saying %q", c.spec.Label(), err, c.want)
		}
	}
	// Names, not replicas, count toward the services one person may run.
	for _, name := range []string{"a", "b"} {
		if _, err := claim(0, service.Spec{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		spec := tb
		spec.Replica = i
		if _, err := claim(0, spec); err != nil {
			t.Fatalf("replica %d of a fourth service: %v", i, err)
		}
	}
	if _, err := claim(0, service.Spec{Name: "e"}); err == nil || !strings.Contains(err.Error(), "you run 4 services") {
		t.Fatalf("a fifth service: got %v, want a refusal saying you run 4 services", err)
	}

	// A rolling update's new replica beside the old one on the same node
	// (no port): admitted, in the other session name of the two.
	old, ok := replicaOf(t, nodes, u.UID, "a", 0)
	if !ok {
		t.Fatal("service a is not on the board")
	}
	r, err := me.Claim(ctx(t), api.ClaimRequest{Node: old.Node, Run: run, Service: &service.Spec{Name: "a", Replaces: old.ID}})
	if err != nil {
		t.Fatalf("a new replica of a beside the old: %v", err)
	}
	if r.Node != old.Node || old.Session != "svc-a" || r.Session != "svcu-a" {
		t.Fatalf("new replica on %s in %s beside the old on %s in %s: want one node, sessions svc-a and svcu-a", r.Node, r.Session, old.Node, old.Session)
	}
}

// TestServiceReplicaMovesKeepItsIndexAndAvoidItsSibling: replicas 0 and
// 1 of a service on a port on node02 and node03 of three; node02's agent
// is killed. Past the grace, replica 0 is placed again as replica 0 (its
// session svc-web) on node01, not beside its sibling on node03 (where a
// claim of one GPU would pack otherwise), and replica 1 stays put.
func TestServiceReplicaMovesKeepItsIndexAndAvoidItsSibling(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	const grace = 3 * time.Second
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true, OwnTmux: true,
		Sched: queue.SchedConfig{LostAfter: grace}, Policy: servicePolicy()})
	me := nodes[0].Agent.For(u.UID)
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	for i, node := range []string{"node02", "node03"} {
		if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Node: node, Run: run,
			Service: &service.Spec{Name: "web", Port: 18001, Replicas: 2, Replica: i}}); err != nil {
			t.Fatal(err)
		}
	}
	sib, _ := replicaOf(t, nodes, u.UID, "web", 1)
	nodes[1].Crash()
	var moved lease.Lease
	agenttest.Eventually(t, grace+30*time.Second, "replica 0 placed again off node02", func() bool {
		l, ok := replicaOf(t, nodes, u.UID, "web", 0)
		moved = l
		return ok && l.Node != "node02"
	})
	if moved.Node != "node01" || moved.Session != "svc-web" || moved.Service.Replica != 0 || moved.Service.Replicas != 2 {
		t.Fatalf("replica 0 moved to %s (session %s, replica %d of %d): want node01, svc-web, replica 0 of 2", moved.Node, moved.Session, moved.Service.Replica, moved.Service.Replicas)
	}
	if l, ok := replicaOf(t, nodes, u.UID, "web", 1); !ok || l.ID != sib.ID {
		t.Fatalf("replica 1 after the move: %+v (found %v), want its lease %s untouched", l, ok, sib.ID)
	}
}
