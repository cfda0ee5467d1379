package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// A MIG instance of a simulated A100 is a claimable unit: `dibs run --mig
// 3g.40gb` gets it, and its session sees the instance's MIG- UUID as CUDA
// requires; the board shows the GPU as its instances.
func TestMIGRunSeesItsInstance(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB"})
	inst := n.Board().Nodes[0].GPUs[0].MIGDevices[0]
	out := filepath.Join(agenttest.PublicDir(t), "env")
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{MIG: "3g.40gb", Run: &api.RunSpec{
		Command: []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES" > ` + out + `; sleep 60`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inst.UUID, "MIG-") || r.CUDAVisibleDevices != inst.UUID || r.MIG != inst.UUID {
		t.Fatalf("granted %+v, want the 3g.40gb instance %s", r, inst.UUID)
	}
	agenttest.Eventually(t, 5*time.Second, "the session to write its CUDA_VISIBLE_DEVICES", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.TrimSpace(string(b)) == inst.UUID
	})
	_, err = n.Client.Claim(ctx(t), api.ClaimRequest{MIG: "3g.40gb"})
	if apiCode(err) != "conflict" || !strings.Contains(err.Error(), "no MIG instance 3g.40gb is free") {
		t.Errorf("a second 3g.40gb: %v, want a conflict saying none is free", err)
	}
	small, err := n.Client.Claim(ctx(t), api.ClaimRequest{MIG: "1g.10gb"})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil || whole.CUDAVisibleDevices != "1" {
		t.Errorf("-g 1 got %q (%v), want the whole GPU 1", whole.CUDAVisibleDevices, err)
	}
	g := n.Board().Nodes[0].GPUs[0]
	if g.Lease != nil || len(g.Shares) != 2 || g.Shares[0].ID != r.ID || g.Shares[1].ID != small.ID || g.Free(api.NodeAlive) {
		t.Errorf("GPU 0 on the board: lease %v, shares %v; want its two held instances and not free", g.Lease, g.Shares)
	}
}

// Budgets on a shared GPU pack, never add up past its memory, keep whole
// claims off it, and a holder over budget is flagged on every board.
func TestSharedGPUBudgets(t *testing.T) {
	t.Parallel()
	users := agenttest.Users{"alice": 2101, "bob": 2102}
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xH100-80GB", "1xL4"}, Users: users, Quiet: true})
	alice, bob := lease.Caller{UID: 2101, User: "alice"}, lease.Caller{UID: 2102, User: "bob"}
	a, err := nodes[1].As(alice).Claim(ctx(t), api.ClaimRequest{Mem: "20G", Model: "H100"})
	if err != nil || a.Node != "node01" || a.MemMiB != 20<<10 {
		t.Fatalf("alice's 20G: %+v, %v; want a budget on node01's H100", a, err)
	}
	b, err := nodes[0].As(bob).Claim(ctx(t), api.ClaimRequest{Mem: "30G", Node: "node01"})
	if err != nil || !slices.Equal(b.GPUs, a.GPUs) {
		t.Fatalf("bob's 30G: %+v, %v; want it on the same GPU", b, err)
	}
	_, err = nodes[0].As(bob).Claim(ctx(t), api.ClaimRequest{Mem: "40G", Node: "node01"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "at most 29.6 GiB is free") {
		t.Errorf("40G beside 50G of budgets on an 80G GPU: %v, want a refusal saying 29.6 GiB is free", err)
	}
	_, err = nodes[0].As(bob).Claim(ctx(t), api.ClaimRequest{Count: 1, Node: "node01"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "GPU 0 shared") {
		t.Errorf("a whole GPU on the shared node: %v, want a conflict", err)
	}
	uid := 2101
	if err := nodes[0].Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationPct: 80, Processes: []sim.LoadProcess{
		{PID: 500, UID: &uid, Command: "python eval.py", UsedMemoryMiB: 25 << 10},
	}}}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 10*time.Second, n.Opts.Name+"'s board to flag alice over budget", func() bool {
			for _, bn := range n.Board().Nodes {
				if bn.Name == "node01" {
					g := bn.GPUs[0]
					return slices.Contains(g.Flags, lease.FlagOverBudget) && len(g.OverBudget) == 1 && g.OverBudget[0].User == "alice" &&
						!slices.Contains(g.Flags, lease.FlagSquatted)
				}
			}
			return false
		})
	}
}

// --model and --pool choose the node on a mixed cluster, on every claim.
func TestModelAndPoolChooseTheNode(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{
		Specs: []string{"2xH100-80GB", "2xL40S"}, Tags: [][]string{{"h100", "nvlink"}, {"l40s"}}, Quiet: true,
	})
	me := nodes[0].Me()
	for _, tt := range []struct {
		req  api.ClaimRequest
		want string
	}{
		{api.ClaimRequest{Mem: "10G", Model: "l40s"}, "node02"},
		{api.ClaimRequest{Count: 1, Model: "L40S"}, "node02"},
		{api.ClaimRequest{Count: 1, Tags: []string{"h100", "nvlink"}}, "node01"},
		{api.ClaimRequest{Mem: "5G", Tags: []string{"l40s"}}, "node02"},
	} {
		r, err := me.Claim(ctx(t), tt.req)
		if err != nil || r.Node != tt.want {
			t.Errorf("claim %+v landed on %q (%v), want %s", tt.req, r.Node, err, tt.want)
		}
	}
	_, err := me.Claim(ctx(t), api.ClaimRequest{Count: 1, Model: "L40S", Node: "node01"})
	if err == nil || !strings.Contains(err.Error(), "node01 has no L40S GPU (it has NVIDIA H100 80GB HBM3)") {
		t.Errorf("--model L40S --node node01: %v, want the reason", err)
	}
	_, err = me.Claim(ctx(t), api.ClaimRequest{Count: 1, Tags: []string{"a100"}})
	if err == nil || !strings.Contains(err.Error(), "no node that is up is in pool a100 (the pools are h100, l40s, nvlink)") {
		t.Errorf("--pool a100: %v, want the pools there are", err)
	}
	// A booking in a pool is made (and withdrawn) by the node in it.
	bk, err := nodes[1].Me().Book(ctx(t), api.BookRequest{Count: 1, Tags: []string{"h100"}, Start: time.Now().Add(time.Hour), Duration: "1h"})
	if err != nil || bk.Node != "node01" {
		t.Fatalf("booking in pool h100 from node02: %+v, %v; want it on node01", bk, err)
	}
	if bs, _ := nodes[1].Me().Bookings(ctx(t)); len(bs.Bookings) != 1 || bs.Bookings[0].ID != bk.ID {
		t.Errorf("node02 lists bookings %v, want %s", bs.Bookings, bk.ID)
	}
	if err := nodes[1].Me().Unbook(ctx(t), bk.ID); err != nil {
		t.Errorf("unbooking from node02: %v", err)
	}
	// Queued, the pool holds too.
	s, err := nodes[1].Me().Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", Tags: []string{"h100"}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the queued claim to start in pool h100", func() bool {
		for _, bn := range nodes[1].Board().Nodes {
			for _, g := range bn.GPUs {
				if g.Lease != nil && strings.HasPrefix(g.Lease.Entry, s.ID+"#") {
					return bn.Name == "node01"
				}
			}
		}
		return false
	})
}
