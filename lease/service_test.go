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
