package main

import (
	"slices"
	"testing"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// TestUpdateKeepsWhatFlagsLeaveOut: `dibs serve NAME --update -- CMD`
// keeps each replica's port, check, preemptibility, number of replicas and
// what it holds (whole GPUs, a MIG profile, a memory budget) unless a
// flag says otherwise, and names the replica it replaces.
func TestUpdateKeepsWhatFlagsLeaveOut(t *testing.T) {
	b := api.Board{Nodes: []api.Node{{Name: "na", GPUs: []api.GPU{{GPU: nodeprobe.GPU{Index: 0,
		MIGDevices: []nodeprobe.MIGDevice{{UUID: "MIG-aaa", Profile: "3g.40gb"}}}}}}}}
	spec := service.Spec{Name: "llm", Port: 8000, Health: "/health", Preemptible: true, Replicas: 2, Replica: 1}
	whole := lease.Lease{ID: "na-1", Node: "na", GPUs: []int{0, 1}}
	mig := lease.Lease{ID: "na-2", Node: "na", GPUs: []int{0}, MIG: "MIG-aaa"}
	mem := lease.Lease{ID: "na-3", Node: "na", GPUs: []int{0}, MemMiB: 20480}
	for _, c := range []struct {
		l    lease.Lease
		want api.ClaimRequest
	}{
		{whole, api.ClaimRequest{Count: 2}},
		{mig, api.ClaimRequest{MIG: "3g.40gb"}},
		{mem, api.ClaimRequest{Mem: "20480M"}},
	} {
		if got := heldUnits(b, &c.l); got.Count != c.want.Count || got.MIG != c.want.MIG || got.Mem != c.want.Mem {
			t.Errorf("%s holds %+v, want %+v", c.l.ID, got, c.want)
		}
	}
	old := serviceRow{Name: "llm", Replica: 1, Lease: "na-1", spec: spec, units: heldUnits(b, &whole)}
	u := updater{spec: service.Spec{Name: "llm"}, changed: func(string) bool { return false }}
	got := u.next(old)
	if s := got.Service; got.Count != 2 || s.Port != 8000 || s.Health != "/health" || !s.Preemptible || s.Replicas != 2 || s.Replica != 1 {
		t.Errorf("an update with no flags asks for %+v %+v, want the old replica's port, check, preemptibility, replicas and GPUs", got, *s)
	}
	given := []string{"port", "gpus"}
	u = updater{req: api.ClaimRequest{Count: 1}, spec: service.Spec{Name: "llm", Port: 9000}, changed: func(f string) bool { return slices.Contains(given, f) }}
	if got := u.next(old); got.Count != 1 || got.Service.Port != 9000 || got.Service.Health != "/health" {
		t.Errorf("an update with -g 1 --port 9000 asks for %+v %+v", got, *got.Service)
	}
}

// TestUpdateKeepsWherePlacementFlagsLeaveOut: an update with no placement
// flags keeps each replica's pools (the service pool its admission added
// among them), model, --cpus-per-gpu, --cpus any, --nodelist and
// --exclude, as the lease's
// service recorded them; a flag given replaces only its own.
func TestUpdateKeepsWherePlacementFlagsLeaveOut(t *testing.T) {
	spec := service.Spec{Name: "llm", Place: &service.Placement{Tags: []string{"fast", "svc"}, Model: "H100", CPUsPerGPU: 4, Nodelist: []string{"na", "nb"}, Exclude: []string{"nc"}}}
	old := serviceRow{Name: "llm", Lease: "na-1", spec: spec, units: api.ClaimRequest{Count: 1}}
	u := updater{spec: service.Spec{Name: "llm"}, changed: func(string) bool { return false }}
	got := u.next(old)
	if !slices.Equal(got.Tags, []string{"fast", "svc"}) || got.Model != "H100" || got.CPUsPerGPU != 4 || got.CPUs != "" {
		t.Errorf("an update with no flags asks for pools %v, model %q, cpus-per-gpu %d, cpus %q: want fast,svc, H100, 4 and the default", got.Tags, got.Model, got.CPUsPerGPU, got.CPUs)
	}
	if !slices.Equal(got.Only, []string{"na", "nb"}) || !slices.Equal(got.Exclude, []string{"nc"}) {
		t.Errorf("an update with no flags asks for --nodelist %v --exclude %v: want na,nb and nc", got.Only, got.Exclude)
	}
	anyCPU := serviceRow{Name: "llm", Lease: "na-2", spec: service.Spec{Name: "llm"}, units: api.ClaimRequest{Count: 1}, anyCPU: true}
	if got := u.next(anyCPU); got.CPUs != "any" {
		t.Errorf("an update of a --cpus any replica asks for --cpus %q, want any", got.CPUs)
	}
	// A MIG instance the board does not show: the profile admission
	// recorded says what to ask for.
	b := api.Board{Services: []lease.Lease{{ID: "na-3", Node: "na", GPUs: []int{0}, MIG: "MIG-zzz", Share: 0.5,
		Service: &service.Service{Spec: service.Spec{Name: "llm", Place: &service.Placement{MIG: "2g.20gb"}}}}}}
	if rows := serviceRows(b); len(rows) != 1 || u.next(rows[0]).MIG != "2g.20gb" {
		t.Errorf("an update of a replica on a MIG instance the board does not show asks for %+v, want --mig 2g.20gb", rows)
	}
	given := []string{"pool", "cpus"}
	u = updater{req: api.ClaimRequest{Tags: []string{"slow"}, CPUs: "any"}, spec: service.Spec{Name: "llm"}, changed: func(f string) bool { return slices.Contains(given, f) }}
	got = u.next(old)
	if !slices.Equal(got.Tags, []string{"slow"}) || got.Model != "H100" || got.CPUs != "any" || got.CPUsPerGPU != 0 {
		t.Errorf("an update with --pool slow --cpus any asks for pools %v, model %q, cpus %q, cpus-per-gpu %d: want slow, H100, any, 0", got.Tags, got.Model, got.CPUs, got.CPUsPerGPU)
	}
	given = []string{"node"}
	u = updater{req: api.ClaimRequest{Node: "nb"}, spec: service.Spec{Name: "llm"}, changed: func(f string) bool { return slices.Contains(given, f) }}
	if got = u.next(old); got.Node != "nb" || !got.NodeChoice.IsZero() {
		t.Errorf("an update with --node nb asks for node %q, --nodelist %v --exclude %v: want nb alone (the kept lists would clash with it)", got.Node, got.Only, got.Exclude)
	}
}

// TestRestoreClaimStartsTheOldReplicaWhereItWas: an update that stopped
// the old replica and failed starts it again on its node, or, when it was
// started with --nodelist or --exclude, within them (with --node too the
// agent would refuse the claim as saying where twice).
func TestRestoreClaimStartsTheOldReplicaWhereItWas(t *testing.T) {
	old := serviceRow{Name: "llm", Node: "na", Lease: "na-1", spec: service.Spec{Name: "llm", Replaces: "na-0"},
		units: api.ClaimRequest{Count: 1}, job: &job.Job{Command: []string{"serve"}, Dir: "/srv"}}
	req, err := restoreClaim(old)
	if err != nil || req.Node != "na" || req.Count != 1 || req.Service.Replaces != "" || req.Run == nil || req.Run.Dir != "/srv" {
		t.Fatalf("restore of a replica on na: %+v, %v", req, err)
	}
	old.spec.Place = &service.Placement{Nodelist: []string{"na", "nb"}}
	req, err = restoreClaim(old)
	if err != nil || req.Node != "" || !slices.Equal(req.Only, []string{"na", "nb"}) {
		t.Fatalf("restore of a replica started with --nodelist na,nb: node %q, nodelist %v, %v", req.Node, req.Only, err)
	}
	old.job = nil
	if _, err := restoreClaim(old); err == nil {
		t.Error("a replica whose definition the board did not show was restored")
	}
}
