package lease

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// socketSnap is a node of four GPUs on two sockets of 8 cores: GPUs 0-1
// local to 0-7, GPUs 2-3 to 8-15.
func socketSnap() nodeprobe.Snapshot {
	snap := nodeprobe.Snapshot{Host: nodeprobe.Host{Backend: nodeprobe.BackendSim}}
	for i := range 4 {
		c := "0-7"
		if i >= 2 {
			c = "8-15"
		}
		snap.GPUs = append(snap.GPUs, nodeprobe.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), CPUs: c})
	}
	return snap
}

// TestChooseCPUs: N of each GPU's local cores, free ones first, two GPUs
// of one socket apart while it has room; sharing only when the socket is
// full; a GPU without local cores or with too few is refused with what to
// do.
func TestChooseCPUs(t *testing.T) {
	snap := socketSnap()
	tests := []struct {
		name   string
		gpus   []int
		n      int
		others [][]string
		want   []string
		err    string
	}{
		{name: "one socket, two GPUs", gpus: []int{2, 3}, n: 4, want: []string{"8-11", "12-15"}},
		{name: "around another lease", gpus: []int{3}, n: 4, others: [][]string{{"8-11"}}, want: []string{"12-15"}},
		{name: "full socket shares the least used", gpus: []int{2}, n: 4, others: [][]string{{"8-11"}, {"12-15"}, {"8-9"}}, want: []string{"10-13"}},
		{name: "both sockets", gpus: []int{0, 2}, n: 2, want: []string{"0-1", "8-9"}},
		{name: "too many", gpus: []int{0}, n: 9, err: "GPU 0 on node01 has 8 local cores (0-7): ask for at most 8 with --cpus-per-gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var others []Lease
			for _, c := range tt.others {
				others = append(others, Lease{ID: "x", Node: "node01", GPUs: []int{2}, CPUs: c})
			}
			got, err := ChooseCPUs("node01", tt.gpus, tt.n, snap, others)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ChooseCPUs = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	snap.GPUs[1].CPUs = ""
	if _, err := ChooseCPUs("node01", []int{1}, 2, snap, nil); err == nil || !strings.Contains(err.Error(), "GPU 1 on node01 reports no local CPUs (the node's sim backend cannot tell), so --cpus-per-gpu has none to choose from: drop it") {
		t.Errorf("GPU without local cores: err = %v", err)
	}
}

// TestPlanClaimChoosesCores: a claim with --cpus-per-gpu gets its cores
// in the lease the table plans (and keeps), the next one gets others; a
// claim without gets none and its session the GPUs' local cores.
func TestPlanClaimChoosesCores(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tb := NewTable("node01", nil, 0, At(now))
	snap := socketSnap()
	alice := Caller{User: "alice", UID: 1001}
	l, err := tb.PlanClaim(alice, Claim{GPUs: []int{2}, CPUsPerGPU: 4}, snap, now, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.CPUs, []string{"8-11"}) {
		t.Fatalf("first lease's cores = %q, want [8-11]", l.CPUs)
	}
	tb.Put(l, At(now))
	l2, err := tb.PlanClaim(alice, Claim{GPUs: []int{3}, CPUsPerGPU: 4}, snap, now, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l2.CPUs, []string{"12-15"}) {
		t.Errorf("second lease's cores = %q, want [12-15]: the first's are taken", l2.CPUs)
	}
	l3, err := tb.PlanClaim(alice, Claim{GPUs: []int{0, 1}}, snap, now, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l3.CPUs) != 0 || !slices.Equal(l3.SessionCPUs(snap), []string{"0-7", "0-7"}) {
		t.Errorf("plain lease: cpus %q, session %q; want none chosen, bound to 0-7", l3.CPUs, l3.SessionCPUs(snap))
	}
	if err := (Claim{GPUs: []int{0}, CPUsPerGPU: 2, AnyCPU: true}).Validate(); err == nil || !strings.Contains(err.Error(), "--cpus any and --cpus-per-gpu contradict each other") {
		t.Errorf("--cpus any with --cpus-per-gpu: Validate = %v", err)
	}
}

// TestSessionCPUsAndEnv: what a session is bound to and told: the chosen
// cores, or each GPU's local ones, or nothing (--cpus any, a GPU that
// reports none); OMP_NUM_THREADS only with chosen cores, shared among the
// session's workers.
func TestSessionCPUsAndEnv(t *testing.T) {
	snap := socketSnap()
	chosen := Lease{GPUs: []int{2, 3}, CPUs: []string{"8-11", "12-15"}}
	tests := []struct {
		name    string
		l       Lease
		workers int
		want    map[string]string
	}{
		{"chosen", chosen, 1, map[string]string{"DIBS_CPUS": "8-15", "DIBS_GPU_CPUS": "8-11;12-15", "DIBS_CPUS_PER_GPU": "4", "OMP_NUM_THREADS": "8"}},
		{"chosen under torchrun", chosen, 2, map[string]string{"DIBS_CPUS": "8-15", "DIBS_GPU_CPUS": "8-11;12-15", "DIBS_CPUS_PER_GPU": "4", "OMP_NUM_THREADS": "4"}},
		{"local", Lease{GPUs: []int{1, 2}}, 1, map[string]string{"DIBS_CPUS": "0-15", "DIBS_GPU_CPUS": "0-7;8-15"}},
		{"any", Lease{GPUs: []int{1}, AnyCPU: true}, 1, nil},
	}
	for _, tt := range tests {
		got := tt.l.CPUEnv(tt.l.SessionCPUs(snap), tt.workers)
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: env = %v, want %v", tt.name, got, tt.want)
		}
	}
	snap.GPUs[0].CPUs = ""
	if got := (&Lease{GPUs: []int{0, 2}}).SessionCPUs(snap); got != nil {
		t.Errorf("a GPU without local cores: session bound to %q, want unbound", got)
	}
}

// TestSharedCoresAndCoresLine: leases that chose the same cores are named
// to each other; a node's line groups GPUs by their cores, or says it
// reports none.
func TestSharedCoresAndCoresLine(t *testing.T) {
	a := Lease{ID: "node01-1", Node: "node01", User: "alice", GPUs: []int{2}, CPUs: []string{"8-11"}}
	b := Lease{ID: "node01-2", Node: "node01", User: "bob", GPUs: []int{3}, CPUs: []string{"10-13"}}
	c := Lease{ID: "node02-1", Node: "node02", User: "carol", GPUs: []int{3}, CPUs: []string{"8-15"}}
	all := []Lease{a, b, c}
	if got := SharedCoresNotice(a, all); !strings.HasPrefix(got, "your lease shares cores 10-11 with bob's lease node01-2:") {
		t.Errorf("notice for alice = %q", got)
	}
	if got := SharedCores(b, all); len(got) != 1 || got[0].Lease.ID != "node01-1" || got[0].CPUs != "10-11" {
		t.Errorf("SharedCores(bob) = %+v, want alice's 10-11 (never another node's)", got)
	}
	if got := CoresLine(socketSnap().GPUs); got != "GPUs 0-1: cores 0-7; GPUs 2-3: cores 8-15" {
		t.Errorf("CoresLine = %q", got)
	}
	if got := CoresLine([]nodeprobe.GPU{{Index: 0}, {Index: 1}}); got != CoresUnknown {
		t.Errorf("CoresLine of GPUs without cores = %q, want %q", got, CoresUnknown)
	}
	users := CoreUsers(socketSnap().GPUs[2], socketSnap().GPUs, []Lease{a, b, {ID: "node01-3", GPUs: []int{3}}, {ID: "node01-4", GPUs: []int{0}}})
	var ids []string
	for _, u := range users {
		ids = append(ids, u.Lease.ID+" "+u.CPUs)
	}
	if want := []string{"node01-1 8-11", "node01-2 10-13", "node01-3 8-15"}; !slices.Equal(ids, want) {
		t.Errorf("CoreUsers of GPU 2 = %q, want %q", ids, want)
	}
}
