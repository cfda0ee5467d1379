package agent

import (
	"slices"
	"testing"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// TestMovedClaimAsksForWhatTheLeaseHeldWhereItWasAsked: a move claims
// what the lost replica held as a claim asks for it — whole GPUs (none for
// -g 0), a memory budget as a size, a MIG instance by its profile, read
// from the lost node's last snapshot or else from the profile admission
// recorded (refused when neither knows it) — in the pools, on the model,
// with the cores it was asked with, within its --nodelist and --exclude,
// and --cpus any.
func TestMovedClaimAsksForWhatTheLeaseHeldWhereItWasAsked(t *testing.T) {
	v := queue.ClusterView{Nodes: []queue.NodeView{{Name: "node02", Snap: nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0,
		MIGDevices: []nodeprobe.MIGDevice{{UUID: "MIG-aaa", Profile: "3g.40gb"}}}}}}}}
	place := &service.Placement{Tags: []string{"fast", "svc"}, Model: "H100", CPUsPerGPU: 4, Nodelist: []string{"node02", "node03"}, Exclude: []string{"node04"}}
	svc := func(p *service.Placement) *service.Service {
		return &service.Service{Spec: service.Spec{Name: "llm", Place: p}}
	}
	held := lease.Lease{ID: "node02-1", Node: "node02", GPUs: []int{0, 1}, Job: &job.Job{Command: []string{"x"}}, Service: svc(place)}
	req, err := movedClaim(v, held)
	if err != nil || req.Count != 2 || req.MIG != "" || req.Mem != "" || !slices.Equal(req.Tags, place.Tags) || req.Model != "H100" || req.CPUsPerGPU != 4 || req.CPUs != "" {
		t.Errorf("two whole GPUs in pools fast, svc on H100 with 4 cores each: claim %+v (%v)", req, err)
	}
	if !slices.Equal(req.Only, place.Nodelist) || !slices.Equal(req.Exclude, place.Exclude) {
		t.Errorf("a service started with --nodelist node02,node03 --exclude node04 moves with --nodelist %v --exclude %v", req.Only, req.Exclude)
	}
	none := lease.Lease{ID: "node02-2", Node: "node02", AnyCPU: true, Service: svc(nil)}
	if req, err := movedClaim(v, none); err != nil || req.Count != 0 || req.Tags != nil || req.CPUs != "any" {
		t.Errorf("a -g 0 service with --cpus any: claim %+v (%v)", req, err)
	}
	mem := lease.Lease{ID: "node02-3", Node: "node02", GPUs: []int{1}, MemMiB: 10240, Service: svc(nil)}
	if req, err := movedClaim(v, mem); err != nil || req.Mem != "10240M" || req.Count != 0 {
		t.Errorf("a 10G budget: claim %+v (%v), want --mem 10240M", req, err)
	}
	if m, err := lease.ParseMem("10240M"); err != nil || m != 10240 {
		t.Errorf("the claim's --mem reads back as %d MiB (%v)", m, err)
	}
	mig := lease.Lease{ID: "node02-4", Node: "node02", GPUs: []int{0}, MIG: "MIG-aaa", Service: svc(nil)}
	if req, err := movedClaim(v, mig); err != nil || req.MIG != "3g.40gb" || req.Count != 0 {
		t.Errorf("a MIG instance the snapshot shows: claim %+v (%v), want --mig 3g.40gb", req, err)
	}
	unseen := lease.Lease{ID: "node02-5", Node: "node02", GPUs: []int{0}, MIG: "MIG-zzz", Service: svc(&service.Placement{MIG: "2g.20gb"})}
	if req, err := movedClaim(v, unseen); err != nil || req.MIG != "2g.20gb" {
		t.Errorf("a MIG instance the snapshot does not show, asked by profile: claim %+v (%v), want --mig 2g.20gb", req, err)
	}
	unseen.Service = svc(nil)
	if _, err := movedClaim(v, unseen); err == nil {
		t.Error("a MIG instance whose profile nothing shows was claimed anyway")
	}
}
