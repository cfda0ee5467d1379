package lease_test

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// TestEndedServiceIsAValidLedgerEntry: a service's lease (no GPU, an end
// a century away, its job held for every node) passes the shape check
// every node runs on what it hears, and ends into a ledger row every node
// accepts, with no time limit, its GPU-hours counted for the time it ran.
func TestEndedServiceIsAValidLedgerEntry(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, gpus := range [][]int{nil, {0, 1}} {
		l := lease.Lease{ID: "node01-7", Node: "node01", GPUs: gpus, User: "alice", UID: 1001, Token: 7, Kind: lease.KindService,
			StartedAt: t0, ExpiresAt: t0.Add(lease.ServiceSpan), Session: "svc-llm", Job: &job.Job{Command: []string{"vllm", "serve", "m"}},
			Service: &service.Service{Spec: service.Spec{Name: "llm", Port: 8000}}}
		if err := l.Validate(); err != nil {
			t.Fatalf("service lease with GPUs %v: %v", gpus, err)
		}
		e := lease.Ended(l, t0.Add(2*time.Hour), string(lease.EndCrashLoop), "")
		if err := e.Validate(); err != nil {
			t.Fatalf("its ledger entry (GPUs %v): %v", gpus, err)
		}
		if e.Limit != 0 || e.GPUSeconds != float64(len(gpus))*7200 {
			t.Errorf("GPUs %v: limit %s, GPU-seconds %g, want 0 and %d", gpus, e.Limit, e.GPUSeconds, len(gpus)*7200)
		}
	}
}

// TestServicePlacementIsBoundedOnEveryLease: a service's placement (the
// pools, model and cores its owner asked for, which every node holds)
// passes the shape check as a claim's would, and one no claim could have
// asked for (too many pools, a pool no node could carry, a model with a
// control character, a core count out of range) is refused, on the
// claim and on a lease heard from a peer alike.
func TestServicePlacementIsBoundedOnEveryLease(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	lease0 := func(p *service.Placement) lease.Lease {
		return lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{0}, User: "alice", UID: 1001, Token: 7, Kind: lease.KindService,
			StartedAt: t0, ExpiresAt: t0.Add(lease.ServiceSpan), Session: "svc-llm", Job: &job.Job{Command: []string{"vllm"}},
			Service: &service.Service{Spec: service.Spec{Name: "llm", Place: p}}}
	}
	good := &service.Placement{Tags: []string{"fast", "svc.a_b-1"}, Model: "H100 80GB", CPUsPerGPU: 8}
	if l := lease0(good); l.Validate() != nil {
		t.Fatalf("a lease placed in pools fast and svc, on H100s with 8 cores each: %v", l.Validate())
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = "p"
	}
	for _, bad := range []*service.Placement{
		{Tags: many},
		{Tags: []string{"-x"}},
		{Tags: []string{"a b"}},
		{Tags: []string{"\x1b[2J"}},
		{Model: "H100\x1b]0;x\x07"},
		{Model: string(make([]byte, 65))},
		{CPUsPerGPU: -1},
		{CPUsPerGPU: 1025},
		{MIG: "3g.40gb\x1b[2J"},
		{MIG: "3g 40gb"},
	} {
		l := lease0(bad)
		if err := l.Validate(); err == nil {
			t.Errorf("a lease placed %+v passed the shape check", *bad)
		}
		if err := l.Service.Spec.Check(); err == nil {
			t.Errorf("a service placed %+v passed Spec.Check", *bad)
		}
	}
}
