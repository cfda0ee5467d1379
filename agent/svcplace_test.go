package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// TestServiceMovesAsItsOwnerAskedIt: three services on node02, of pool
// fast (node02 and node03; node01 is out of it): one whole GPU asked
// with --pool fast --model L40S, a 10G memory budget and a 3g.40gb MIG
// instance. node02's agent is killed; past the grace each is placed again
// on node03, the other node of the pool, not on node01 (where a plain
// claim of one GPU would pack beside the lease there), holding what it
// held: a whole GPU, a 10G budget on a shared GPU, a 3g.40gb instance.
// The pools its admission recorded carry the policy's service pool.
func TestServiceMovesAsItsOwnerAskedIt(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	const grace = 3 * time.Second
	p := lease.DefaultPolicy()
	p.ServiceGPUs, p.ServiceGPUsPerUser, p.ServicePools = 8, 4, []string{"svc"}
	split := "1xA100-80GB:mig=3g.40gb,2xL40S"
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", split, split}, Quiet: true, OwnTmux: true,
		Tags: [][]string{{"svc"}, {"svc", "fast"}, {"svc", "fast"}}, Sched: queue.SchedConfig{LostAfter: grace}, Policy: p})
	me := nodes[0].Agent.For(u.UID)
	// A lease on node01, where a plain claim of one GPU packs.
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Node: "node01", Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	for _, req := range []api.ClaimRequest{
		{Count: 1, Tags: []string{"fast"}, Model: "L40S", Service: &service.Spec{Name: "web"}},
		{Mem: "10G", Tags: []string{"fast"}, Service: &service.Spec{Name: "mem"}},
		{MIG: "3g.40gb", Tags: []string{"fast"}, Service: &service.Spec{Name: "mig"}},
	} {
		req.Node, req.Run = "node02", run
		if _, err := me.Claim(ctx(t), req); err != nil {
			t.Fatalf("service %s: %v", req.Service.Name, err)
		}
	}
	nodes[1].Crash()
	moved := map[string]lease.Lease{}
	agenttest.Eventually(t, grace+30*time.Second, "the three services placed again off node02", func() bool {
		for _, name := range []string{"web", "mem", "mig"} {
			l, ok := replicaOf(t, nodes, u.UID, name, 0)
			if !ok || l.Node == "node02" {
				return false
			}
			moved[name] = l
		}
		return true
	})
	for name, l := range moved {
		if l.Node != "node03" {
			t.Errorf("%s moved to %s, outside its pool fast: want node03", name, l.Node)
		}
		if pl := l.Service.Place; pl == nil || !slices.Equal(pl.Tags, []string{"fast", "svc"}) {
			t.Errorf("%s moved with placement %+v, want pools fast and svc (the policy's)", name, pl)
		}
	}
	if web := moved["web"]; len(web.GPUs) != 1 || web.Partial() || web.Service.Place == nil || web.Service.Place.Model != "L40S" {
		t.Errorf("web moved holding GPUs %v (MIG %q, %d MiB, placement %+v): want one whole GPU, model L40S", web.GPUs, web.MIG, web.MemMiB, web.Service.Place)
	}
	if mem := moved["mem"]; mem.MemMiB != 10<<10 || mem.MIG != "" {
		t.Errorf("mem moved holding GPUs %v with a budget of %d MiB (MIG %q): want a 10240 MiB budget on a shared GPU", mem.GPUs, mem.MemMiB, mem.MIG)
	}
	mig := moved["mig"]
	var profile string
	for _, n := range nodes[0].Board().Nodes {
		for _, g := range n.GPUs {
			for _, d := range g.MIGDevices {
				if n.Name == mig.Node && d.UUID == mig.MIG {
					profile = d.Profile
				}
			}
		}
	}
	if mig.MIG == "" || profile != "3g.40gb" || mig.Service.Place == nil || mig.Service.Place.MIG != "3g.40gb" {
		t.Errorf("mig moved holding GPUs %v, MIG instance %q (profile %q, placement %+v): want a 3g.40gb instance, the profile recorded", mig.GPUs, mig.MIG, profile, mig.Service.Place)
	}
}
