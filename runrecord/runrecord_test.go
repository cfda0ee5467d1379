package runrecord

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// snapAt is a snapshot of n 80 GiB GPUs at t with the given SM % and
// memory; a negative SM is not reported.
func snapAt(t time.Time, sm []int, memMiB uint64) nodeprobe.Snapshot {
	s := nodeprobe.Snapshot{TakenAt: t}
	for i, u := range sm {
		g := nodeprobe.GPU{Index: i, MemoryTotalMiB: 81920, MemoryUsedMiB: memMiB}
		if u >= 0 {
			g.UtilizationPct = &u
		}
		p := 300.0
		g.PowerDrawW = &p
		s.GPUs = append(s.GPUs, g)
	}
	return s
}

// TestFiguresFollowACurve feeds a known curve (60 s at 0 %, then 120 s at
// 90 %, sampled each second) to one GPU: the mean, peak and idle share
// come out as the curve's, and so does the energy of 300 W for 180 s.
func TestFiguresFollowACurve(t *testing.T) {
	tr := NewTracker(nil)
	u := []Unit{{ID: "n-1", GPUs: []int{0}}}
	for s := 0; s <= 180; s++ {
		sm := 0
		if s > 60 {
			sm = 90
		}
		tr.Observe(snapAt(t0.Add(time.Duration(s)*time.Second), []int{sm}, 9000), u)
	}
	f := tr.Finish("n-1")
	if f == nil {
		t.Fatal("no figures")
	}
	g := f.GPUs[0]
	if *g.MeanSM != 60 || *g.PeakSM != 90 || *g.IdlePct != 33.3 || *f.IdlePct != 33.3 {
		t.Errorf("mean %v peak %v idle %v/%v, want 60, 90, 33.3", *g.MeanSM, *g.PeakSM, *g.IdlePct, *f.IdlePct)
	}
	if g.EnergyWh != 15 || g.PeakMemMiB != 9000 {
		t.Errorf("energy %v Wh, peak memory %d MiB; want 15, 9000", g.EnergyWh, g.PeakMemMiB)
	}
	if len(g.Series) != 18 || g.Series[0] != 0 || g.Series[17] != 90 {
		t.Errorf("series %v, want 18 buckets from 0 to 90", g.Series)
	}
	want := "idle 33 % of its time; peak memory 8.8 of 80 GiB: a MIG 1g.10gb or a budget would fit"
	if got := strings.Join(f.Verdicts(), "; "); got != want {
		t.Errorf("verdicts %q, want %q", got, want)
	}
}

// TestFourGPURunLoadingOne: a 4-GPU run that keeps one GPU busy is told
// it used 1 of 4; its series never grows past MaxSeries over a long run.
func TestFourGPURunLoadingOne(t *testing.T) {
	tr := NewTracker(nil)
	u := []Unit{{ID: "n-1", GPUs: []int{0, 1, 2, 3}}}
	for s := 0; s <= 4*3600; s += 5 {
		tr.Observe(snapAt(t0.Add(time.Duration(s)*time.Second), []int{95, 0, 0, 0}, 70000), u)
	}
	f := tr.Finish("n-1")
	if got := f.Verdicts(); len(got) == 0 || got[0] != "used 1 of 4 GPUs" {
		t.Errorf("verdicts %q, want used 1 of 4 GPUs first", got)
	}
	for _, g := range f.GPUs {
		if len(g.Series) > MaxSeries || len(g.Series) < MaxSeries/2 {
			t.Errorf("gpu %d series of %d points, want %d to %d", g.GPU, len(g.Series), MaxSeries/2, MaxSeries)
		}
	}
	if !strings.Contains(f.OneLine(), "used 1 of 4 GPUs") {
		t.Errorf("one line %q lacks the verdict", f.OneLine())
	}
}

// TestMIGAndBudgetsReportMemoryOnly: a MIG instance and a budget get
// memory figures and utilization "not reported" — never a 0 that would
// read as idle.
func TestMIGAndBudgetsReportMemoryOnly(t *testing.T) {
	tr := NewTracker(nil)
	units := []Unit{{ID: "n-1", GPUs: []int{0}, MIG: "MIG-a"}, {ID: "n-2", GPUs: []int{1}, BudgetMiB: 20000, UID: 1001}}
	for s := 0; s <= 60; s++ {
		snap := snapAt(t0.Add(time.Duration(s)*time.Second), []int{-1, 50}, 30000)
		snap.GPUs[0].MIGDevices = []nodeprobe.MIGDevice{{UUID: "MIG-a", Profile: "1g.10gb", MemoryTotalMiB: 9856, MemoryUsedMiB: 4000}}
		snap.GPUs[1].Processes = []nodeprobe.Process{{PID: 1, UID: 1001, UsedMemoryMiB: 12000}, {PID: 2, UID: 1002, UsedMemoryMiB: 18000}}
		tr.Observe(snap, units)
	}
	for id, wantMem := range map[string]uint64{"n-1": 4000, "n-2": 12000} {
		f := tr.Finish(id)
		g := f.GPUs[0]
		if g.MeanSM != nil || g.PeakSM != nil || f.IdlePct != nil || g.PeakMemMiB != wantMem {
			t.Errorf("%s: mean %v peak %v idle %v memory %d; want no utilization and %d MiB", id, g.MeanSM, g.PeakSM, f.IdlePct, g.PeakMemMiB, wantMem)
		}
		if !strings.Contains(f.OneLine(), "utilization not reported") || len(f.Verdicts()) != 0 {
			t.Errorf("%s: %q, verdicts %q", id, f.OneLine(), f.Verdicts())
		}
		if g.Series[0] != NotReported {
			t.Errorf("%s: series %v, want not reported", id, g.Series)
		}
	}
}

// TestSamplesStayBounded: a GPU's history at a fast probe rate keeps one
// point per step and never more than the window's worth.
func TestSamplesStayBounded(t *testing.T) {
	s := NewSamples(time.Hour, 100*time.Millisecond)
	if s.Step() != time.Second {
		t.Fatalf("step %v, want 1s (an hour in %d points)", s.Step(), MaxPoints)
	}
	for i := 0; i < 3*3600*10; i++ {
		sm := i % 2 * 100
		s.Observe(snapAt(t0.Add(time.Duration(i)*100*time.Millisecond), []int{sm, -1}, uint64(i%7)))
	}
	now := t0.Add(3 * time.Hour)
	got := s.Series(0, time.Time{}, now)
	if len(got) < 3590 || len(got) > MaxPoints+1 {
		t.Fatalf("%d points, want about %d", len(got), MaxPoints)
	}
	if p := got[len(got)-1]; *p.SMPct != 50 || p.MemMiB != 6 {
		t.Errorf("last point SM %d memory %d, want the average 50 and the peak 6", *p.SMPct, p.MemMiB)
	}
	if mig := s.Series(1, time.Time{}, now); mig[0].SMPct != nil {
		t.Errorf("a GPU without utilization reads %d", *mig[0].SMPct)
	}
}
