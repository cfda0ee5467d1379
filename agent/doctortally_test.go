package agent_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

// Issue 23: another node's history crossed as pages of raw entries (156
// pages for 100,000 ended leases). `dibs doctor` now asks each node for
// its running totals, and a node of the previous release (protocol 6),
// which does not know them, for its pages as before: the figures are the
// ones every node's raw ledger gives (`--ledger`, which reads the pages).
func TestDoctorTotalsCrossNodesAndFallBackForProtocol6(t *testing.T) {
	t.Parallel()
	now := time.Now()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*5 + 1)
	}
	var nodes []*agenttest.Node
	seed := ""
	for i, protocol := range []int{0, 0, peer.MinVersion} {
		name := fmt.Sprintf("node%02d", i+1)
		disk := busyLedger(t, name, 3000+500*i, now)
		// A gang that ran on every node: each node holds one rank.
		g := lease.Lease{ID: lease.LeaseID(name, 90000), Node: name, GPUs: []int{0}, User: "user1", UID: 2001, Token: 90000, Kind: lease.KindBatch,
			StartedAt: now.Add(-3*time.Hour + time.Duration(i)*time.Minute), ExpiresAt: now, Entry: "node01-q90000#0", Gang: "node01-q90000", Rank: i,
			QueuedAt: now.Add(-4 * time.Hour)}
		if err := disk.End(g.ID, lease.Ended(g, now.Add(-time.Hour), "released", "")); err != nil {
			t.Fatal(err)
		}
		cs := &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "tally", Key: key, Fast: true, Protocol: protocol}
		if seed != "" {
			cs.Join = []string{seed}
		}
		n := agenttest.Start(t, agenttest.Options{Name: name, Sim: "2xL40S", Quiet: true, Store: disk, Cluster: cs})
		if seed == "" {
			seed = n.Agent.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	agenttest.WaitConverged(t, nodes, 20*time.Second)
	// node02 answers with its totals; node03, of the previous release,
	// does not know them (doctor then reads its pages).
	since := now.Add(-30 * 24 * time.Hour)
	r, err := peer.Call(ctx(t), nodes[0].Agent.Peers(), "node02", peer.DoctorTally, peer.System, peer.TallyRequest{Since: since})
	if err != nil || r.Tally.Leases < 3400 || len(r.Tally.Waits) < 340 || len(r.Tally.GangRanks) != 1 || r.More {
		t.Errorf("node02's tally: %d leases, %d waits, %v gang ranks, more %v, err %v; want 3501, 350, 1 rank, no more",
			r.Tally.Leases, len(r.Tally.Waits), r.Tally.GangRanks, r.More, err)
	}
	if _, err := peer.Call(ctx(t), nodes[0].Agent.Peers(), "node03", peer.DoctorTally, peer.System, peer.TallyRequest{Since: since}); err == nil {
		t.Error("node03, at protocol 6, answered a tally it cannot know")
	}
	for _, window := range []string{"30d", "7d", "36h"} {
		// A page that takes over 5 s (a loaded test machine, -race)
		// leaves its node missing: ask again, for up to 3 minutes (four
		// tries were not always enough under CI's load).
		var fast, raw api.DoctorReport
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
			var err error
			if fast, err = nodes[0].Client.Doctor(ctx(t), api.DoctorRequest{Window: window}); err != nil {
				t.Fatal(err)
			}
			if raw, err = nodes[0].Client.Doctor(ctx(t), api.DoctorRequest{Window: window, Ledger: true}); err != nil {
				t.Fatal(err)
			}
			if fast.Findings != nil && raw.Findings != nil && len(fast.Findings.Missing)+len(raw.Findings.Missing) == 0 {
				break
			}
		}
		if fast.Findings == nil || raw.Findings == nil || len(fast.Findings.Missing) > 0 || len(raw.Findings.Missing) > 0 {
			t.Fatalf("window %s: findings %+v and %+v: a node's history was not read", window, fast.Findings, raw.Findings)
		}
		if window == "30d" && (fast.Findings.Leases != 3000+3500+4000+3 || fast.Findings.Gangs != 1) {
			t.Errorf("window 30d: %d leases and %d gangs, want %d and 1", fast.Findings.Leases, fast.Findings.Gangs, 3000+3500+4000+3)
		}
		f, r := *fast.Findings, *raw.Findings
		// The two calls' windows start a few milliseconds apart: the
		// GPU-hours cut at the start may differ by that much.
		if math.Abs(f.HeldGPUHours-r.HeldGPUHours) > 1e-5*r.HeldGPUHours || math.Abs(f.TopUserShare-r.TopUserShare) > 1e-5 {
			t.Errorf("window %s: %.6f GPU-hours (top share %.9f) from totals, %.6f (%.9f) from the ledger", window, f.HeldGPUHours, f.TopUserShare, r.HeldGPUHours, r.TopUserShare)
		}
		f.HeldGPUHours, f.TopUserShare, f.GangGPUShare = r.HeldGPUHours, r.TopUserShare, r.GangGPUShare
		if !reflect.DeepEqual(figures(f), figures(r)) {
			t.Errorf("window %s: from totals\n%+v\nfrom the ledger\n%+v", window, figures(f), figures(r))
		}
	}
}

// figures are a finding's ledger figures (the samples' shares move with
// every probe).
func figures(f doctor.Findings) doctor.Findings {
	return doctor.Findings{Users: f.Users, UsersPerWeek: f.UsersPerWeek, UsersMaxWeek: f.UsersMaxWeek, Leases: f.Leases, HeldGPUHours: f.HeldGPUHours,
		TopUser: f.TopUser, TopUserShare: f.TopUserShare, Queued: f.Queued, WaitP50: f.WaitP50, WaitP95: f.WaitP95, WaitMax: f.WaitMax,
		Gangs: f.Gangs, GangWaitP50: f.GangWaitP50, GangWaitMax: f.GangWaitMax, GangGPUShare: f.GangGPUShare, Preemptions: f.Preemptions, Overdue: f.Overdue}
}

// BenchmarkHistoryPeer measures `dibs doctor` (its 30-day figures
// included) asked at a node whose peer holds 100,000 ended leases: the
// peer's history crosses the cluster as totals (issue 23; before, 156
// pages of raw entries).
func BenchmarkHistoryPeer(b *testing.B) {
	const ended = 100_000
	now := time.Now()
	key := make([]byte, 32)
	var nodes []*agenttest.Node
	seed := ""
	for i, n := range []int{0, ended} {
		name := fmt.Sprintf("node%02d", i+1)
		cs := &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "bench", Key: key, Fast: true}
		if seed != "" {
			cs.Join = []string{seed}
		}
		node := agenttest.Start(b, agenttest.Options{Name: name, Sim: "2xL40S", Quiet: true, Store: busyLedger(b, name, n, now), Cluster: cs, ProbeInterval: time.Second})
		if seed == "" {
			seed = node.Agent.GossipAddr()
		}
		nodes = append(nodes, node)
	}
	agenttest.WaitConverged(b, nodes, 30*time.Second)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		r, err := nodes[0].Client.Doctor(context.Background(), api.DoctorRequest{})
		if err == nil && (r.Findings == nil || r.Findings.Leases < ended*99/100 || len(r.Findings.Missing) > 0) {
			err = fmt.Errorf("doctor counted %+v", r.Findings)
		}
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportPercentiles(b, lat)
}

// The totals follow the ledger as it changes between two doctor calls:
// leases end (one across a midnight), and past ledger_per_user_day a
// person's leases fold into the day's row. Each call's figures are the
// ones a walk over the ledger gives (`--ledger`).
func TestDoctorTotalsFollowEndedAndFoldedLeases(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	n := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "2xL40S", Quiet: true, Clock: clk, LedgerPerUserDay: 3})
	check := func(step string, wantLeases int) {
		t.Helper()
		fast, err := n.Client.Doctor(ctx(t), api.DoctorRequest{Window: "7d"})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := n.Client.Doctor(ctx(t), api.DoctorRequest{Window: "7d", Ledger: true})
		if err != nil {
			t.Fatal(err)
		}
		f, r := *fast.Findings, *raw.Findings
		if math.Abs(f.HeldGPUHours-r.HeldGPUHours) > 1e-9 {
			t.Errorf("%s: %.6f GPU-hours from totals, %.6f from the ledger", step, f.HeldGPUHours, r.HeldGPUHours)
		}
		f.HeldGPUHours, f.TopUserShare, f.GangGPUShare = r.HeldGPUHours, r.TopUserShare, r.GangGPUShare
		if !reflect.DeepEqual(figures(f), figures(r)) {
			t.Errorf("%s: from totals\n%+v\nfrom the ledger\n%+v", step, figures(f), figures(r))
		}
		if f.Leases != wantLeases {
			t.Errorf("%s: doctor counts %d leases, want %d", step, f.Leases, wantLeases)
		}
	}
	hold := func(d time.Duration) {
		t.Helper()
		l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "4h"})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(d)
		if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
			t.Fatal(err)
		}
	}
	check("an empty ledger", 0)
	hold(time.Hour)
	check("one lease", 1)
	// 10:00 to 23:30: three more, the last two folded into one row.
	for _, want := range []int{2, 3, 4} {
		hold(20 * time.Minute)
		check("a lease ended", want)
	}
	clk.Advance(12 * time.Hour)
	hold(time.Hour) // across midnight: it ends on 2 December
	check("a lease across midnight", 5)
	// Two more one by one, then a new row, then a lease folded into it
	// (the day keeps as many rows: only the fold says it changed).
	for _, want := range []int{6, 7, 8, 8} {
		hold(10 * time.Minute)
		check("a lease ended on 2 December", want)
	}
}
