package core

import (
	"slices"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

// TestPlacementOfKeepsWhereTheServiceMayRun: what a service's claim asks
// of where it runs, and its lease does not keep, is recorded for its
// moves and updates; --node is not (it says where it starts), and a
// claim that asks nothing records nothing.
func TestPlacementOfKeepsWhereTheServiceMayRun(t *testing.T) {
	c := lease.Claim{Tags: []string{"svc"}, Model: "H100", CPUsPerGPU: 2, MIG: "3g.40gb",
		Where: lease.NodeChoice{Only: []string{"node01", "node02"}, Exclude: []string{"node03"}}}
	p := placementOf(c)
	if p == nil || !slices.Equal(p.Tags, c.Tags) || p.Model != "H100" || p.CPUsPerGPU != 2 || p.MIG != "3g.40gb" ||
		!slices.Equal(p.Nodelist, c.Where.Only) || !slices.Equal(p.Exclude, c.Where.Exclude) {
		t.Fatalf("placement %+v of claim %+v", p, c)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("the placement of a valid claim fails its check: %v", err)
	}
	c.Where.Only[0] = "changed"
	if p.Nodelist[0] != "node01" {
		t.Error("the placement shares the claim's nodelist")
	}
	if p := placementOf(lease.Claim{MIG: "MIG-abc"}); p != nil {
		t.Errorf("a claim of one MIG instance by UUID asks nothing a move can keep: %+v", p)
	}
}
