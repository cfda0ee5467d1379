package agent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

var historyUsers = agenttest.Users{"alice": 32001, "bob": 32002, "carol": 32003}

// TestHistoryListsRunsOfThreeUsersOnThreeNodes: alice's lease released on
// node01, bob's ended by an admin on node02, carol's expired on node03,
// and the test's own runs — one exits 0 on node03, one exits 3 on node02
// — are all listed by `dibs history` asked at node01, each with its end
// state (and exit code); a user, state or node filter is applied by the
// nodes that hold the rows; the run's end notice carries its efficiency.
func TestHistoryListsRunsOfThreeUsersOnThreeNodes(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	p := lease.DefaultPolicy()
	p.EndAction = lease.ActionEnd
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true, Users: historyUsers, Policy: p})
	alice, bob, carol := lease.Caller{UID: 32001, User: "alice"}, lease.Caller{UID: 32002, User: "bob"}, lease.Caller{UID: 32003, User: "carol"}
	admin := lease.Caller{UID: 0, User: "root", Admin: true}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	la, err := n1.As(alice).Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.As(alice).Release(ctx(t), api.ReleaseRequest{IDs: []string{la.ID}}); err != nil {
		t.Fatal(err)
	}
	lb, err := n2.As(bob).Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n2.As(admin).Release(ctx(t), api.ReleaseRequest{IDs: []string{lb.ID}}); err != nil {
		t.Fatal(err)
	}
	lc, err := n3.As(carol).Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 1, Duration: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	// It runs a few probes long, so its figures have readings.
	ok, err := n3.Client.Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 1, Duration: "1h", Run: &api.RunSpec{Command: []string{"sleep", "0.5"}}})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := n2.Client.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 2, Duration: "1h", Run: &api.RunSpec{Command: []string{"sh", "-c", "exit 3"}}})
	if err != nil {
		t.Fatal(err)
	}
	me := n1.Me().Caller().User
	want := map[string]lease.RunState{la.ID: lease.StateReleased, lb.ID: lease.StateCancelled, lc.ID: lease.StateExpired, ok.ID: lease.StateCompleted, bad.ID: lease.StateFailed}
	var rep api.HistoryReport
	agenttest.Eventually(t, 20*time.Second, "five ended leases in node01's history", func() bool {
		rep, err = n1.Client.History(ctx(t), api.HistoryRequest{})
		return err == nil && len(rep.Rows) == 5
	})
	for _, r := range rep.Rows {
		if want[r.ID] != r.State {
			t.Errorf("%s ended %s, want %s", r.ID, r.State, want[r.ID])
		}
		if r.Model == "" || r.End.Before(r.Start) || len(r.GPUs) == 0 {
			t.Errorf("%s: model %q, %v to %v, gpus %v", r.ID, r.Model, r.Start, r.End, r.GPUs)
		}
	}
	byID := func(rows []api.HistoryRow) []string {
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, c := range []struct {
		name string
		f    lease.HistoryFilter
		want []string
	}{
		{"bob's", lease.HistoryFilter{User: "bob"}, []string{lb.ID}},
		{"the failed", lease.HistoryFilter{States: []lease.RunState{lease.StateFailed}}, []string{bad.ID}},
		{"node02's", lease.HistoryFilter{Node: "node02"}, byID([]api.HistoryRow{{ID: lb.ID}, {ID: bad.ID}})},
		{"mine on node03", lease.HistoryFilter{User: me, Node: "node03"}, []string{ok.ID}},
		{"the expired", lease.HistoryFilter{States: []lease.RunState{lease.StateExpired}}, []string{lc.ID}},
	} {
		got, err := n3.Client.History(ctx(t), api.HistoryRequest{Filter: c.f})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ids := byID(got.Rows); !slices.Equal(ids, c.want) {
			t.Errorf("%s rows %v, want %v", c.name, ids, c.want)
		}
	}
	one, err := n1.Client.History(ctx(t), api.HistoryRequest{Filter: lease.HistoryFilter{ID: bad.ID}})
	if err != nil || len(one.Rows) != 1 || one.Rows[0].ExitCode == nil || *one.Rows[0].ExitCode != 3 {
		t.Fatalf("history of %s: %+v, %v; want exit code 3", bad.ID, one.Rows, err)
	}
	evs, err := n3.Client.Events(ctx(t), api.EventsRequest{User: me})
	if err != nil {
		t.Fatal(err)
	}
	var notice string
	for _, e := range evs.Events {
		if e.Lease == ok.ID && e.Kind == event.EventEnd {
			notice = e.Text
		}
	}
	if !strings.Contains(notice, "(mean SM 0 %; peak memory 0 of 45 GiB; idle 100 % of its time)") {
		t.Errorf("the end of %s says %q, want its efficiency in one line", ok.ID, notice)
	}
}

// TestRunsAreNeverFolded: past a person's daily cap of ledger rows, plain
// claims fold into one row (shown with their count), but runs — leases
// with a session — stay one by one, so `dibs history` lists every run.
func TestRunsAreNeverFolded(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Quiet: true, LedgerPerUserDay: 1})
	var runs []string
	for range 3 {
		l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
			t.Fatal(err)
		}
		r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", Run: &api.RunSpec{Command: []string{"true"}}})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r.ID)
		agenttest.Eventually(t, 10*time.Second, r.ID+" to end", func() bool {
			h, err := n.Client.History(ctx(t), api.HistoryRequest{Filter: lease.HistoryFilter{ID: r.ID}})
			return err == nil && len(h.Rows) == 1
		})
	}
	rep, err := n.Client.History(ctx(t), api.HistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	folded := 0
	for _, r := range rep.Rows {
		switch {
		case r.State == lease.StateFolded:
			folded += r.Folded
		case r.ExitCode != nil:
			listed = append(listed, r.ID)
		}
	}
	if !slices.Equal(listed, runs) {
		t.Errorf("runs listed %v, want every one: %v", listed, runs)
	}
	if folded != 2 {
		t.Errorf("the folded row counts %d plain claims, want 2 (the first is kept one by one)", folded)
	}
}

// TestARunLoopFoldsPastItsOwnCap: runs are kept one by one far past the
// plain claims' daily cap (lease.RunsPerLedgerDay times it), and only then
// fold, so a `dibs run -- true` loop cannot grow the ledger without bound
// the way the claims' cap once let it.
func TestARunLoopFoldsPastItsOwnCap(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Quiet: true, LedgerPerUserDay: 1})
	var listed, folded int
	count := func() int {
		rep, err := n.Client.History(ctx(t), api.HistoryRequest{})
		if err != nil {
			return -1
		}
		listed, folded = 0, 0
		for _, r := range rep.Rows {
			if r.State == lease.StateFolded {
				folded += r.Folded
			} else {
				listed++
			}
		}
		return listed + folded
	}
	total := lease.RunsPerLedgerDay + 2
	for i := range total {
		r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", Run: &api.RunSpec{Command: []string{"true"}}})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		agenttest.Eventually(t, 10*time.Second, r.ID+" to end in the ledger", func() bool { return count() == i+1 })
	}
	if listed != lease.RunsPerLedgerDay || folded != 2 {
		t.Errorf("history lists %d runs one by one and %d folded, want %d and 2", listed, folded, lease.RunsPerLedgerDay)
	}
}

// TestHistoryNamesOlderNodesNotAsked: a node that speaks an older agent
// protocol than RunHistory's is not asked (it would refuse the request it
// does not know); `dibs history` names it as not listed and lists the rest.
func TestHistoryNamesOlderNodesNotAsked(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true, Protocols: []int{0, peer.RunHistorySince - 1}})
	l, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
		t.Fatal(err)
	}
	rep, err := nodes[0].Client.History(ctx(t), api.HistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].ID != l.ID || !slices.Equal(rep.NotAsked, []string{"node02"}) || len(rep.Missing) != 0 {
		t.Errorf("history %+v, want %s listed and node02 not asked", rep, l.ID)
	}
}

// TestSamplesOfAnotherNodesGPU: a GPU's recent readings are asked of its
// node when wanted (never gossiped); a GPU split into MIG instances has
// memory readings and no utilization ("not reported"), never a 0.
func TestSamplesOfAnotherNodesGPU(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xA100-80GB:mig=3g.40gb+3g.40gb,1xH100-80GB"}, Quiet: true})
	var mig, whole api.SamplesReport
	agenttest.Eventually(t, 10*time.Second, "a few of node02's readings at node01", func() bool {
		var err1, err2 error
		mig, err1 = nodes[0].Client.Samples(ctx(t), "node02", 0, time.Time{})
		whole, err2 = nodes[0].Client.Samples(ctx(t), "node02", 1, time.Time{})
		return err1 == nil && err2 == nil && len(mig.Samples) >= 3 && len(whole.Samples) >= 3
	})
	if mig.Node != "node02" || mig.Window != time.Hour {
		t.Errorf("samples of %s over %v, want node02's over an hour", mig.Node, mig.Window)
	}
	for _, s := range mig.Samples {
		if s.SMPct != nil {
			t.Fatalf("a MIG-split GPU reads %d %% utilization, want none reported", *s.SMPct)
		}
	}
	if s := whole.Samples[len(whole.Samples)-1]; s.SMPct == nil || s.PowerW == nil || s.TempC == nil {
		t.Errorf("a whole GPU's reading %+v lacks utilization, power or temperature", s)
	}
	if _, err := nodes[0].Client.Samples(ctx(t), "node09", 0, time.Time{}); err == nil || !strings.Contains(err.Error(), "no node") {
		t.Errorf("samples of a node not in the cluster: %v", err)
	}
}
