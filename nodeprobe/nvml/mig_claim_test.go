//go:build linux && cgo && nvml

package nvml

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// A MIG instance NVML reports is a claimable unit: a claim by profile gets a
// free instance whose MIG- UUID is what the session's CUDA_VISIBLE_DEVICES
// says, an instance with someone's process on it is not free, and processes
// are judged by the instance NVML places them on.
func TestMIGClaimThroughNVML(t *testing.T) {
	snap := snapshot(t, openMock(t, migServer(t), nil))
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	tb := lease.NewTable("gpu-01", nil, 0, lease.At(now))
	alice := lease.Caller{UID: 1001, User: "alice"}
	l, err := tb.PlanClaim(alice, lease.Claim{MIG: "2g.10gb"}, snap, now, lease.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if env := l.Env(); env["CUDA_VISIBLE_DEVICES"] != "MIG-bbbb" || l.GPUs[0] != 0 {
		t.Fatalf("CUDA_VISIBLE_DEVICES=%q on GPU %v, want MIG-bbbb on GPU 0", env["CUDA_VISIBLE_DEVICES"], l.GPUs)
	}
	tb.Put(l, lease.At(now))
	_, err = tb.PlanClaim(alice, lease.Claim{MIG: "3g.20gb"}, snap, now, lease.DefaultPolicy())
	if err == nil || !strings.Contains(err.Error(), "3g.20gb on GPU 0 has") || !strings.Contains(err.Error(), "process 4242 on it but no lease") {
		t.Errorf("claiming the busy 3g.20gb: %v, want a refusal naming process 4242", err)
	}
	// Whoever owns pid 4242 adopts it: the lease is on its instance only.
	owner := snap.GPUs[0].Processes[0]
	ad, err := tb.PlanAdopt(lease.Caller{UID: owner.UID, User: owner.User}, 4242, 0, "", snap, now, lease.DefaultPolicy())
	if err != nil || ad.MIG != "MIG-aaaa" || ad.CUDAVisibleDevices() != "MIG-aaaa" {
		t.Fatalf("adopting pid 4242: %+v, %v; want a lease on MIG-aaaa", ad, err)
	}
	tb.Put(ad, lease.At(now))
	j := lease.Judge(snap, tb.List(), nil, now, lease.DefaultPolicy())[0]
	if len(j.Squatters) != 1 || j.Squatters[0].PID != 7001 {
		t.Errorf("squatters %+v, want only pid 7001 (on MIG-cccc, which nobody holds)", j.Squatters)
	}
}
