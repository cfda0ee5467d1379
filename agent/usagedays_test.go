package agent_test

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestUsageByDayAcrossNodes is what `dibs usage --chart` reads: GPU-hours
// per person per day from every node — heavy's lease on node01 counted
// there, light's on node02 asked of node02 — split at local midnights
// (a 50h window is three or four days, the first starting at the window's
// start), with nothing missing.
func TestUsageByDayAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, Users: testUsers})
	if _, err := nodes[0].As(heavy).Claim(ctx(t), api.ClaimRequest{Node: nodes[0].Opts.Name, Count: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].As(light).Claim(ctx(t), api.ClaimRequest{Node: nodes[1].Opts.Name, Count: 1}); err != nil {
		t.Fatal(err)
	}
	var rep api.DailyUsageReport
	// Each node counts its running leases at the moment it answers, so in
	// the first milliseconds light's node may answer later than heavy's
	// with the larger figure: heavy's two GPUs, held from before light's
	// one, overtake it as soon as both are counted a few ms on.
	agenttest.Eventually(t, 15*time.Second, "node01's chart to count heavy's GPU-hours today above light's", func() bool {
		r, err := nodes[0].As(light).UsageByDay(ctx(t), "50h")
		if err != nil || len(r.Days) == 0 {
			return false
		}
		rep = r
		today := r.Days[len(r.Days)-1].GPUHours
		return today["light"] > 0 && today["heavy"] > today["light"] && len(r.Missing) == 0
	})
	if n := len(rep.Days); n < 3 || n > 4 {
		t.Errorf("a 50h window is %d days, want 3 or 4", n)
	}
	if !rep.Days[0].Start.Equal(rep.Since) {
		t.Errorf("the first day starts %v, want the window's start %v", rep.Days[0].Start, rep.Since)
	}
	for i, d := range rep.Days[1:] {
		if h, m, s := d.Start.Local().Clock(); h != 0 || m != 0 || s != 0 {
			t.Errorf("day %d starts at %v, want a local midnight", i+1, d.Start.Local())
		}
	}
	if _, err := nodes[0].As(light).UsageByDay(ctx(t), "400d"); err == nil {
		t.Error("a 400-day chart was drawn, want a refusal naming --window")
	}
}
