package lease_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// migNode is an A100 node: GPU 0 split into 3g.40gb, 2g.20gb and 1g.10gb
// instances, GPUs 1 and 2 whole.
func migNode() nodeprobe.Snapshot {
	snap := islands(3)
	for i := range snap.GPUs {
		snap.GPUs[i].Model, snap.GPUs[i].MemoryTotalMiB = "NVIDIA A100-SXM4-80GB", 81920
	}
	g := &snap.GPUs[0]
	g.MIG = nodeprobe.MIGEnabled
	g.MIGDevices = []nodeprobe.MIGDevice{
		{Index: 0, UUID: "MIG-aaaa", Profile: "3g.40gb", MemoryTotalMiB: 40192},
		{Index: 1, UUID: "MIG-bbbb", Profile: "2g.20gb", MemoryTotalMiB: 19968},
		{Index: 2, UUID: "MIG-cccc", Profile: "1g.10gb", MemoryTotalMiB: 9728},
	}
	return snap
}

func grant(t *testing.T, tb *lease.Table, c lease.Caller, req lease.Claim, snap nodeprobe.Snapshot) lease.Lease {
	t.Helper()
	l, err := tb.PlanClaim(c, req, snap, t0, lease.DefaultPolicy())
	if err != nil {
		t.Fatalf("claim %+v: %v", req, err)
	}
	tb.Put(l, lease.At(t0))
	return l
}

func TestClaimMIG(t *testing.T) {
	snap := migNode()
	tb := table()
	a := grant(t, tb, alice, lease.Claim{MIG: "3g.40gb"}, snap)
	if env := a.Env(); env["CUDA_VISIBLE_DEVICES"] != "MIG-aaaa" || !slices.Equal(a.GPUs, []int{0}) || a.MIG != "MIG-aaaa" {
		t.Fatalf("lease %+v with CUDA_VISIBLE_DEVICES=%q, want the 3g.40gb instance MIG-aaaa on GPU 0", a, env["CUDA_VISIBLE_DEVICES"])
	}
	if a.Share < 0.48 || a.Share > 0.5 {
		t.Errorf("share %g, want the instance's part of the GPU (40192/81920)", a.Share)
	}
	// By UUID and by GPU:INDEX, beside alice's instance on the same GPU.
	b := grant(t, tb, bob, lease.Claim{MIG: "MIG-cccc"}, snap)
	c := grant(t, tb, carol, lease.Claim{MIG: "0:1"}, snap)
	if b.MIG != "MIG-cccc" || c.MIG != "MIG-bbbb" {
		t.Errorf("by uuid got %s, by index got %s; want MIG-cccc and MIG-bbbb", b.MIG, c.MIG)
	}
	_, err := tb.PlanClaim(bob, lease.Claim{MIG: "3g.40gb"}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "no MIG instance 3g.40gb is free on gpu-01", "held by alice (lease gpu-01-1)")
	_, err = tb.PlanClaim(bob, lease.Claim{MIG: "7g.80gb"}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeInvalid, "no MIG instance 7g.80gb", "3g.40gb, 2g.20gb, 1g.10gb")
	// A GPU split into MIG instances is never a whole GPU.
	_, err = tb.PlanClaim(bob, lease.Claim{GPUs: []int{0}}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "GPU 0 on gpu-01 is split into MIG instances", "--mig")
	whole := grant(t, tb, bob, lease.Claim{Count: 2}, snap)
	if !slices.Equal(whole.GPUs, []int{1, 2}) {
		t.Errorf("-g 2 took %v, want the whole GPUs 1,2", whole.GPUs)
	}
	_, err = table().PlanClaim(bob, lease.Claim{MIG: "1g.10gb"}, islands(2), t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeInvalid, "has no GPU split into MIG instances")
}

// NVML places each process on its MIG instance: a process on someone
// else's instance is a squatter, one on the holder's own is not.
func TestJudgeMIG(t *testing.T) {
	snap := migNode()
	a := held(1, alice, []int{0}, t0, time.Hour)
	a.MIG, a.Share = "MIG-aaaa", 0.5
	mine := nodeprobe.Process{PID: 10, UID: alice.UID, User: "alice", UsedMemoryMiB: 100, MIGDevice: "MIG-aaaa"}
	theirs := nodeprobe.Process{PID: 11, UID: alice.UID, User: "alice", UsedMemoryMiB: 100, MIGDevice: "MIG-bbbb"}
	j := lease.Judge(withProc(snap, 0, mine), []lease.Lease{a}, nil, t0, lease.DefaultPolicy())
	if j[0].Has(lease.FlagSquatted) {
		t.Errorf("alice's process on her instance is judged %v", j[0].Flags)
	}
	j = lease.Judge(withProc(snap, 0, theirs), []lease.Lease{a}, nil, t0, lease.DefaultPolicy())
	if !j[0].Has(lease.FlagSquatted) || j[0].Squatters[0].PID != 11 {
		t.Errorf("a process on an instance nobody holds is judged %+v, want squatted", j[0])
	}
}

// mem is a shared lease of mib on gpu.
func mem(token uint64, c lease.Caller, gpu int, mib uint64) lease.Lease {
	l := held(token, c, []int{gpu}, t0, time.Hour)
	l.MemMiB, l.Share = mib, float64(mib)/81559
	return l
}

func TestClaimShared(t *testing.T) {
	snap := islands(2) // two 81559 MiB H100s
	tb := table()
	a := grant(t, tb, alice, lease.Claim{MemMiB: 20 << 10}, snap)
	b := grant(t, tb, bob, lease.Claim{MemMiB: 30 << 10}, snap)
	if a.GPUs[0] != b.GPUs[0] || a.MemMiB != 20<<10 || a.Env()["DIBS_MEM_BUDGET_MIB"] != "20480" {
		t.Fatalf("shared leases on GPUs %v and %v (budget %d, env %q); want them packed on one GPU", a.GPUs, b.GPUs, a.MemMiB, a.Env()["DIBS_MEM_BUDGET_MIB"])
	}
	if a.Env()["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("CUDA_VISIBLE_DEVICES=%q, want 0", a.Env()["CUDA_VISIBLE_DEVICES"])
	}
	// 81559-51200 = 30359 MiB left on GPU 0: 40G goes to GPU 1, 29G fits GPU 0.
	c := grant(t, tb, carol, lease.Claim{MemMiB: 29 << 10}, snap)
	if c.GPUs[0] != 0 {
		t.Errorf("29G went to GPU %d, want GPU 0 where it fits best", c.GPUs[0])
	}
	// A whole-GPU claim does not take the shared GPU.
	w := grant(t, tb, carol, lease.Claim{Count: 1}, snap)
	if w.GPUs[0] != 1 {
		t.Errorf("-g 1 took GPU %d, want the unshared GPU 1", w.GPUs[0])
	}
	_, err := tb.PlanClaim(bob, lease.Claim{GPUs: []int{0}}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "GPU 0 is shared: alice, bob and carol hold budgets of 79 GiB", "--mem")
	// Budgets never add up past the memory: refused, saying what is free.
	_, err = tb.PlanClaim(bob, lease.Claim{MemMiB: 2 << 10}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "asked for 2 GiB on a shared GPU but at most 663 MiB is free on one GPU of gpu-01 (GPU 0", "ask for 663 MiB or less")
	// A shared lease never lands on a GPU held whole.
	_, err = tb.PlanClaim(bob, lease.Claim{MemMiB: 1 << 10, GPUs: []int{1}}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "GPU 1 is held whole by carol")
}

// The fit check counts memory that processes outside dibs hold.
func TestClaimSharedCountsOutsiders(t *testing.T) {
	server := nodeprobe.Process{PID: 77, UID: 1009, User: "dave", Command: "vllm", UsedMemoryMiB: 60 << 10}
	snap := withProc(islands(1), 0, server)
	snap.GPUs[0].MemoryUsedMiB = 60 << 10
	_, err := table().PlanClaim(alice, lease.Claim{MemMiB: 30 << 10, GPUs: []int{0}}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeConflict, "asked for 30 GiB on GPU 0 of gpu-01 but 19.6 GiB of its 79.6 GiB is free", "60 GiB is used by processes outside dibs")
	if _, err := table().PlanClaim(alice, lease.Claim{MemMiB: 19 << 10}, snap, t0, lease.DefaultPolicy()); err != nil {
		t.Errorf("19G beside a 60G server on an 80G GPU: %v", err)
	}
}

func TestJudgeOverBudget(t *testing.T) {
	snap := islands(1)
	a, b := mem(1, alice, 0, 20<<10), mem(2, bob, 0, 20<<10)
	over := nodeprobe.Process{PID: 5, UID: alice.UID, User: "alice", UsedMemoryMiB: 25 << 10}
	within := nodeprobe.Process{PID: 6, UID: bob.UID, User: "bob", UsedMemoryMiB: 10 << 10}
	j := lease.Judge(withProc(withProc(snap, 0, over), 0, within), []lease.Lease{a, b}, nil, t0, lease.DefaultPolicy())[0]
	if !j.Has(lease.FlagOverBudget) || j.Has(lease.FlagSquatted) {
		t.Fatalf("flags %v, want over-budget and no squatter (both processes belong to holders)", j.Flags)
	}
	if len(j.OverBudget) != 1 || j.OverBudget[0].User != "alice" || j.OverBudget[0].UsedMiB != 25<<10 || j.OverBudget[0].BudgetMiB != 20<<10 {
		t.Errorf("over budget = %+v, want alice using 25 GiB of 20", j.OverBudget)
	}
}

// Usage and fair-share count a shared or MIG lease by its share.
func TestSharedUsageWeight(t *testing.T) {
	l := mem(1, alice, 0, 20<<10)
	l.Share = 0.25
	e := lease.Ended(l, t0.Add(4*time.Hour), "released", "")
	if e.GPUSeconds != 3600 {
		t.Errorf("4h at a quarter of a GPU = %g GPU-seconds, want 3600", e.GPUSeconds)
	}
	u := queue.DecayedUsage(nil, []lease.Lease{l}, t0.Add(4*time.Hour), 0)
	if u["alice"] != 3600 {
		t.Errorf("running usage %g, want 3600", u["alice"])
	}
	b := held(2, bob, []int{0, 1}, t0.Add(time.Hour), time.Hour)
	b.Booked = true
	if e := lease.Ended(b, t0, "unbooked", ""); e.GPUSeconds != 0 {
		t.Errorf("an unbooked booking counts %g GPU-seconds, want none", e.GPUSeconds)
	}
}

func TestClaimModel(t *testing.T) {
	snap := islands(2)
	_, err := table().PlanClaim(alice, lease.Claim{Count: 1, Model: "L40S"}, snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeInvalid, "gpu-01 has no L40S GPU (it has NVIDIA H100 80GB HBM3)")
	if _, err := table().PlanClaim(alice, lease.Claim{Count: 1, Model: "h100"}, snap, t0, lease.DefaultPolicy()); err != nil {
		t.Errorf("-g 1 --model h100 on an H100 node: %v", err)
	}
	mixed := islands(2)
	mixed.GPUs[1].Model = "NVIDIA L40S"
	l, err := table().PlanClaim(alice, lease.Claim{Count: 1, Model: "L40S"}, mixed, t0, lease.DefaultPolicy())
	if err != nil || l.GPUs[0] != 1 {
		t.Errorf("-g 1 --model L40S took %v (%v), want GPU 1, the L40S", l.GPUs, err)
	}
	_, err = table().PlanClaim(alice, lease.Claim{GPUs: []int{0}, Model: "L40S"}, mixed, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeInvalid, "GPU 0 on gpu-01 is an NVIDIA H100 80GB HBM3, not a L40S")
}

func cand(name string, snap nodeprobe.Snapshot, tags ...string) lease.Candidate {
	snap.Host.Name, snap.Host.Tags = name, tags
	return lease.Candidate{Node: name, Snap: snap}
}

func TestChooseNodeForModelAndPool(t *testing.T) {
	h100 := islands(4)
	l40s := islands(4)
	for i := range l40s.GPUs {
		l40s.GPUs[i].Model = "NVIDIA L40S"
	}
	cands := []lease.Candidate{cand("h1", h100, "h100", "nvlink"), cand("l1", l40s, "l40s")}
	cands[0].Local = true
	pools := lease.Pools{"h100": {Users: []string{"alice"}}}
	for _, tt := range []struct {
		w    lease.Want
		user string
		want string
		err  string
	}{
		{lease.Want{Count: 1}, "alice", "h1", ""},
		{lease.Want{Count: 1, Model: "L40S"}, "alice", "l1", ""},
		{lease.Want{Count: 1, Tags: []string{"l40s"}}, "alice", "l1", ""},
		{lease.Want{Count: 1, Tags: []string{"h100", "nvlink"}}, "alice", "h1", ""},
		{lease.Want{Count: 1}, "bob", "l1", ""}, // h100 is closed to bob
		{lease.Want{Count: 1, Tags: []string{"h100"}}, "bob", "", "pool h100 is open to alice only"},
		{lease.Want{Count: 1, Tags: []string{"a100"}}, "alice", "", "no node that is up is in pool a100 (the pools are h100, l40s, nvlink)"},
		{lease.Want{Count: 1, Model: "B200"}, "alice", "", "no node has a B200 GPU (they have NVIDIA H100 80GB HBM3, NVIDIA L40S)"},
		{lease.Want{Count: 5, Model: "L40S"}, "alice", "", "no node has 5 L40S GPUs"},
		{lease.Want{MemMiB: 10 << 10, Model: "L40S"}, "alice", "l1", ""},
	} {
		got, err := lease.ChooseNodeFor(cands, tt.w, pools, tt.user)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%+v for %s: got %q, %v; want a refusal saying %q", tt.w, tt.user, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%+v for %s: got %q, %v; want %s", tt.w, tt.user, got, err, tt.want)
		}
	}
}

func TestChooseNodeForMIG(t *testing.T) {
	a, b := cand("a", migNode()), cand("b", migNode())
	taken := held(1, alice, []int{0}, t0, time.Hour)
	taken.MIG, taken.Share = "MIG-aaaa", 0.5
	a.Leases = []lease.Lease{taken}
	got, err := lease.ChooseNodeFor([]lease.Candidate{a, b}, lease.Want{MIG: "3g.40gb"}, nil, "bob")
	if err != nil || got != "b" {
		t.Errorf("3g.40gb went to %q (%v), want b, the node where it is free", got, err)
	}
	got, err = lease.ChooseNodeFor([]lease.Candidate{a, b}, lease.Want{MIG: "1g.10gb"}, nil, "bob")
	if err != nil || got != "a" {
		t.Errorf("1g.10gb went to %q (%v), want a (fewer free instances left: pack)", got, err)
	}
}

func TestPoolLimits(t *testing.T) {
	p := lease.DefaultPolicy()
	p.Pools = lease.Pools{"h100": {MaxTime: 8 * time.Hour, Users: []string{"alice", "bob"}}}
	snap := islands(2)
	snap.Host.Tags = []string{"h100"}
	l, err := table().PlanClaim(alice, lease.Claim{Count: 1, Kind: lease.KindBatch}, snap, t0, p)
	if err != nil || l.ExpiresAt.Sub(l.StartedAt) != 8*time.Hour {
		t.Errorf("a default 24h batch lease in pool h100 got %s (%v), want the pool's 8h", l.ExpiresAt.Sub(l.StartedAt), err)
	}
	_, err = table().PlanClaim(alice, lease.Claim{Count: 1, Duration: 10 * time.Hour}, snap, t0, p)
	checkRefusal(t, err, refusal.CodeInvalid, "10h is over pool h100's maximum of 8h", "--for 8h")
	_, err = table().PlanClaim(carol, lease.Claim{Count: 1}, snap, t0, p)
	checkRefusal(t, err, refusal.CodeForbidden, "pool h100 is open to alice, bob only")
	_, err = table().PlanClaim(alice, lease.Claim{Count: 1, Tags: []string{"l40s"}}, snap, t0, p)
	checkRefusal(t, err, refusal.CodeInvalid, "gpu-01 is not in pool l40s (its pools: h100)")

	p.Pools["h100"] = lease.PoolLimits{MaxGPUs: 2}
	v := queue.NewClusterView(queue.NodeView{Name: node, Snap: snap, Leases: []lease.Lease{held(1, alice, []int{0}, t0, time.Hour)}}, nil, t0)
	if err := v.PoolQuota(p.Pools, snap.Host.Tags, "alice", 1); err != nil {
		t.Errorf("a second GPU within a quota of 2: %v", err)
	}
	checkRefusal(t, v.PoolQuota(p.Pools, snap.Host.Tags, "alice", 2), refusal.CodeConflict, "pool h100 allows 2 GPUs per person and you hold 1 there")
}

// Placement reads the pools' limits before it chooses: a node whose pool
// refuses the claim is passed over while another can take it, and when
// none can, the refusal is the closest fit's (a node with room whose pool
// refuses), in words that make sense.
func TestChooseNodeForPoolLimits(t *testing.T) {
	h100 := islands(4)
	l40s := islands(2)
	for i := range l40s.GPUs {
		l40s.GPUs[i].Model = "NVIDIA L40S"
	}
	pools := lease.Pools{"l40s": {MaxGPUs: 1, MaxTime: 2 * time.Hour}}
	busyH100 := cand("h1", h100, "h100")
	for i := range 4 {
		busyH100.Leases = append(busyH100.Leases, held(uint64(i+1), bob, []int{i}, t0, time.Hour))
	}
	for _, tt := range []struct {
		name  string
		cands []lease.Candidate
		w     lease.Want
		want  string
		err   string
	}{
		{"-g 2 passes over the pool that allows 1", []lease.Candidate{cand("h1", h100, "h100"), cand("l1", l40s, "l40s")}, lease.Want{Count: 2}, "h1", ""},
		{"-g 1 holding one in the pool goes elsewhere", []lease.Candidate{cand("h1", h100, "h100"), cand("l1", l40s, "l40s")}, lease.Want{Count: 1, Held: map[string]float64{"l40s": 1}}, "h1", ""},
		{"--for 3h passes over the pool's 2h", []lease.Candidate{cand("h1", h100, "h100"), cand("l1", l40s, "l40s")}, lease.Want{Count: 1, Duration: 3 * time.Hour}, "h1", ""},
		{"-g 1 packs into the pool when it may", []lease.Candidate{cand("h1", h100, "h100"), cand("l1", l40s, "l40s")}, lease.Want{Count: 1}, "l1", ""},
		{"H100s busy, pool full: the pool's limit, and what is elsewhere", []lease.Candidate{busyH100, cand("l1", l40s, "l40s")}, lease.Want{Count: 1, Held: map[string]float64{"l40s": 1}}, "",
			"pool l40s allows 1 GPU per person and you hold 1 there already: release it (`dibs ls` shows its id), or ask outside the pool (no other node has room now: "},
		{"-g 2 only the pool could ever take", []lease.Candidate{cand("l1", l40s, "l40s")}, lease.Want{Count: 2}, "",
			"pool l40s allows 1 GPU per person and 2 were asked for: ask for at most 1 there, or outside the pool"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lease.ChooseNodeFor(tt.cands, tt.w, pools, "alice")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("got %q, %v; want a refusal saying %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %s", got, err, tt.want)
			}
		})
	}
}
