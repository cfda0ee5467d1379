package agent_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// step advances the fake clock by one probe interval and waits for the
// probe of that moment to reach GPU 0's samples, so each reading of the
// curve is taken once.
func step(t *testing.T, n *agenttest.Node, clk *clock.Fake, d time.Duration) {
	t.Helper()
	clk.Advance(d)
	want := clk.Now()
	tries := 0
	if poll.WaitEvery(2*time.Millisecond, 10*time.Second, func() bool {
		tries++
		r, err := n.Client.Samples(ctx(t), "", 0, want)
		// Samples keep milliseconds.
		if err == nil && len(r.Samples) > 0 && !r.Samples[len(r.Samples)-1].At.Before(want.Truncate(time.Millisecond)) {
			return true
		}
		if tries%50 == 0 && d > 0 {
			// A restarted agent's probe loop makes its ticker after
			// Start returns: a tick before that is lost, so tick again
			// (callers count time by the clock, not by steps).
			clk.Advance(d)
			want = clk.Now()
		}
		return false
	}) {
		return
	}
	r, err := n.Client.Samples(ctx(t), "", 0, time.Time{})
	last := "none"
	if len(r.Samples) > 0 {
		last = r.Samples[len(r.Samples)-1].At.Format(time.TimeOnly + ".000")
	}
	t.Fatalf("no probe at %s (last sample %s of %d, err %v)", want.Format(time.TimeOnly+".000"), last, len(r.Samples), err)
}

// TestRunFiguresFollowTheCurve drives a known utilization curve through
// the simulator on a 4-GPU lease — GPU 0 at 0 % for 60 s then 90 % for
// 120 s, the other three at 0 % — with the agent restarted (SIGTERM) half
// way: `dibs history ID` then says mean SM 60 %, peak 90 %, idle 33 % on
// GPU 0 within one probe interval, the whole run counted across the
// restart, and the verdict "used 1 of 4 GPUs"; `dibs usage` counts the
// idle GPU-hours.
func TestRunFiguresFollowTheCurve(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	const probe = time.Second
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB", Clock: clk, SimOnClock: true, ProbeInterval: probe, Quiet: true})
	used := uint64(9 * 1024)
	load := func(steps ...sim.UtilStep) {
		t.Helper()
		if err := n.Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationSteps: steps, MemoryUsedMiB: &used}}}); err != nil {
			t.Fatal(err)
		}
	}
	load(sim.UtilStep{ForS: 60, Pct: 0}, sim.UtilStep{ForS: 1e6, Pct: 90})
	l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 4, Duration: "2h"})
	if err != nil {
		t.Fatal(err)
	}
	end := clk.Now().Add(180 * time.Second)
	for range 90 {
		step(t, n, clk, probe)
	}
	n.Restart()
	load(sim.UtilStep{ForS: 1e6, Pct: 90})
	for clk.Now().Before(end) {
		step(t, n, clk, probe)
	}
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
		t.Fatal(err)
	}
	rep, err := n.Client.History(ctx(t), api.HistoryRequest{Filter: lease.HistoryFilter{ID: l.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Figures == nil {
		t.Fatalf("history of %s: %+v, want one row with figures", l.ID, rep.Rows)
	}
	r := rep.Rows[0]
	f := r.Figures
	tol := 100 * probe.Seconds() / 180 // one probe interval's share of the run
	g := f.GPUs[0]
	if f.Seconds < 179 || f.Seconds > 181 {
		t.Errorf("figures cover %.0f s, want 180 (the restart must not lose them)", f.Seconds)
	}
	if g.MeanSM == nil || math.Abs(*g.MeanSM-60) > 90*tol/100+0.1 || *g.PeakSM != 90 || math.Abs(*g.IdlePct-100.0/3) > tol+0.1 {
		t.Errorf("gpu 0: mean %v peak %v idle %v, want 60, 90, 33.3 within one probe", deref(g.MeanSM), deref(g.PeakSM), deref(g.IdlePct))
	}
	if g.PeakMemMiB != used || g.MemTotalMiB < 80000 {
		t.Errorf("gpu 0 peak memory %d of %d MiB, want %d of about 80 GiB", g.PeakMemMiB, g.MemTotalMiB, used)
	}
	for _, x := range f.GPUs[1:] {
		if x.MeanSM == nil || *x.MeanSM != 0 || *x.IdlePct != 100 {
			t.Errorf("gpu %d: mean %v idle %v, want 0 and 100", x.GPU, deref(x.MeanSM), deref(x.IdlePct))
		}
	}
	if len(r.Verdicts) == 0 || r.Verdicts[0] != "used 1 of 4 GPUs" {
		t.Errorf("verdicts %q, want \"used 1 of 4 GPUs\" first", r.Verdicts)
	}
	if !strings.Contains(strings.Join(r.Verdicts, "; "), "peak memory 9 of 80 GiB: a MIG 1g.10gb or a budget would fit") {
		t.Errorf("verdicts %q lack the memory one", r.Verdicts)
	}
	if r.State != lease.StateReleased {
		t.Errorf("state %s, want released", r.State)
	}
	// Held but idle: a third of GPU 0's time and all of the others' — 600
	// of its 720 GPU-seconds — and `dibs usage` says so beside the used.
	u, err := n.Client.Usage(ctx(t), "1d")
	if err != nil || len(u.Users) != 1 {
		t.Fatalf("usage %+v, %v", u, err)
	}
	if got := u.Users[0].IdleGPUHours * 3600; math.Abs(got-600) > 6 || math.Abs(r.IdleHours*3600-600) > 6 {
		t.Errorf("idle GPU-seconds %.0f in usage, %.0f in history, want 600 of %.0f", got, r.IdleHours*3600, u.Users[0].GPUHours*3600)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestFiguresSurviveACrashLosingAtMostAMinute: figures are written down
// every minute, so an agent killed outright (nothing written as it dies)
// comes back with all but the last minute of a running lease's figures,
// and goes on adding to them.
func TestFiguresSurviveACrashLosingAtMostAMinute(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	const probe = time.Second
	n := agenttest.Start(t, agenttest.Options{Sim: "1xH100-80GB", Clock: clk, SimOnClock: true, ProbeInterval: probe, Quiet: true})
	l, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "2h"})
	if err != nil {
		t.Fatal(err)
	}
	for range 150 {
		step(t, n, clk, probe)
	}
	n.Crash()
	n.Restart()
	for range 10 {
		step(t, n, clk, probe)
	}
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
		t.Fatal(err)
	}
	rep, err := n.Client.History(ctx(t), api.HistoryRequest{Filter: lease.HistoryFilter{ID: l.ID}})
	if err != nil || len(rep.Rows) != 1 || rep.Rows[0].Figures == nil {
		t.Fatalf("history of %s: %+v, %v", l.ID, rep.Rows, err)
	}
	// 150 s before the crash, the last written at 120 s; 10 s after.
	if got := rep.Rows[0].Figures.Seconds; got < 150-60+10 || got > 150+10+2 {
		t.Errorf("figures cover %.0f s of 160, want all but at most the minute before the crash", got)
	}
}
