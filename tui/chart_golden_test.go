package tui

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/runrecord"
)

// simBoards drives a simulated node (an H100, and an A100 split into MIG
// instances) through a utilization curve on GPU 0, one probe every ten
// seconds, and hands each probe to the board as the agent would: a board
// per probe, its telemetry stamped with the probe's time.
type simBoards struct {
	t   *testing.T
	now time.Time
	sim *sim.Sim
}

func newSimBoards(t *testing.T) *simBoards {
	t.Helper()
	// After the harness's first board (fixedNow); the board's clock follows
	// the probes', as a live board's does.
	sb := &simBoards{t: t, now: fixedNow}
	s, err := sim.New(sim.Options{Spec: "1xH100-80GB,1xA100-80GB:mig=3g.40gb+2g.20gb", HostName: "sim01", Now: func() time.Time { return sb.now }})
	if err != nil {
		t.Fatal(err)
	}
	sb.sim = s
	return sb
}

// probe advances the clock ten seconds, sets GPU 0's utilization (its one
// process, bob's, busy at that less 5 and holding memory in step) and
// returns the board of that probe.
func (sb *simBoards) probe(util int) api.Board {
	sb.t.Helper()
	sb.now = sb.now.Add(10 * time.Second)
	sm := max(util-5, 0)
	uid := uidBob
	mem := uint64(2000 + util*600)
	if err := sb.sim.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationPct: util, Processes: []sim.LoadProcess{
		{PID: 4242, User: "bob", UID: &uid, Command: "python train.py", UsedMemoryMiB: mem, SMUtilPct: &sm},
	}}}}); err != nil {
		sb.t.Fatal(err)
	}
	snap, err := sb.sim.Snapshot(context.Background())
	if err != nil {
		sb.t.Fatal(err)
	}
	n := api.Node{Name: "sim01", State: api.NodeAlive, Host: snap.Host, TelemetryAt: snap.TakenAt}
	for _, g := range snap.GPUs {
		n.GPUs = append(n.GPUs, api.GPU{GPU: g})
	}
	n.GPUs[0].Lease = mkLease("sim01-7", "sim01", "bob", uidBob, []int{0}, 2*time.Hour)
	return api.Board{Self: "sim01", You: lease.Caller{UID: uidAlice, User: "alice"}, GeneratedAt: sb.now, Nodes: []api.Node{n}}
}

// The curve: a run warming up to full load, then winding down.
var (
	rising  = []int{0, 5, 10, 20, 35, 50, 70, 90, 100, 100}
	falling = []int{95, 80, 60, 40, 20, 5, 0, 0}
)

// TestGoldenChart is issue 34's picture: the GPU detail at 100×30 draws
// utilization and memory over the last minutes, from the telemetry the
// board has seen, and the chart moves as the simulated load changes; under
// NO_COLOR it is ASCII; at 80×15 the two charts share a line; a MIG GPU
// says its utilization is not reported rather than drawing zeros.
func TestGoldenChart(t *testing.T) {
	run := func(name string, w, h int, opts Options, curve []int, keys ...string) string {
		t.Helper()
		sb := newSimBoards(t)
		opts.Now = func() time.Time { return sb.now }
		hs := newHarness(t, w, h, opts)
		for _, u := range curve {
			hs.send(BoardMsg(sb.probe(u)))
		}
		hs.keys(keys...)
		got := hs.screen()
		requireGolden(t, name, got)
		return got
	}
	up := run("chart_rising_100x30", 100, 30, Options{}, rising)
	down := run("chart_falling_100x30", 100, 30, Options{}, append(append([]int{}, rising...), falling...))
	if utilLine(up) == utilLine(down) || utilLine(up) == "" {
		t.Errorf("the util chart did not move with the load:\n%s\n%s", utilLine(up), utilLine(down))
	}
	plain := run("chart_nocolor_100x30", 100, 30, Options{NoColor: true}, append(append([]int{}, rising...), falling...))
	for _, r := range utilLine(plain) + memLine(plain) {
		if r > 127 {
			t.Fatalf("NO_COLOR chart has %q:\n%s\n%s", r, utilLine(plain), memLine(plain))
		}
	}
	run("chart_80x24", 80, 24, Options{}, append(append([]int{}, rising...), falling...))
	// A short terminal packs the facts: the two charts share one line.
	compact := run("chart_compact_80x15", 80, 15, Options{}, append(append([]int{}, rising...), falling...))
	if !strings.Contains(compact, " util ▁") || !strings.Contains(compact, " · mem ▁") {
		t.Errorf("at 80×15 the charts are not on one line:\n%s", compact)
	}
	mig := run("chart_mig_100x30", 100, 30, Options{}, rising, "l")
	if !strings.Contains(utilLine(mig), "not reported") {
		t.Errorf("a MIG GPU's util line is %q, want it to say not reported", utilLine(mig))
	}
}

// TestChartNarrow: a pane too narrow for a chart worth reading shows the
// numbers alone, and one probe is no chart yet.
func TestChartNarrow(t *testing.T) {
	sb := newSimBoards(t)
	var h history
	for _, u := range rising {
		b := sb.probe(u)
		h.record(&b)
	}
	c := &common{st: newStyles(true, false)}
	c.hist = h
	n := &sb.probe(0).Nodes[0]
	c.hist.record(&api.Board{Nodes: []api.Node{*n}})
	if got := (detail{c}).charts(n, &n.GPUs[0], sparkMin+2); got != nil {
		t.Errorf("charts in %d cells = %q, want none (the span takes the room)", sparkMin+2, got)
	}
	if got := (detail{c}).charts(n, &n.GPUs[0], 30); len(got) != 2 {
		t.Errorf("charts in 30 cells = %q, want a util and a mem line", got)
	}
	var one history
	b := sb.probe(50)
	one.record(&b)
	c.hist = one
	if got := (detail{c}).charts(&b.Nodes[0], &b.Nodes[0].GPUs[0], 60); got != nil {
		t.Errorf("charts after one probe = %q, want none", got)
	}
}

// TestHistoryBounded: the board keeps at most historyMax points and
// historyWindow of time per GPU, one point per probe however many boards
// carry it, and forgets a GPU that left the board.
func TestHistoryBounded(t *testing.T) {
	sb := newSimBoards(t)
	var h history
	for i := range 2 * historyMax {
		b := sb.probe(i % 100)
		h.record(&b)
		h.record(&b) // the same probe again: not a second point
	}
	pts := h.of("sim01", 0)
	if len(pts) > historyMax {
		t.Errorf("kept %d points, want at most %d", len(pts), historyMax)
	}
	if span := pts[len(pts)-1].at.Sub(pts[0].at); span > historyWindow {
		t.Errorf("kept %v of history, want at most %v", span, historyWindow)
	}
	for i := 1; i < len(pts); i++ {
		if !pts[i].at.After(pts[i-1].at) {
			t.Fatalf("points %d and %d share a time: a probe was kept twice", i-1, i)
		}
	}
	h.record(&api.Board{})
	if len(h.gpus) != 0 {
		t.Errorf("kept %d GPUs after they left the board, want 0", len(h.gpus))
	}
}

func utilLine(screen string) string { return detailRow(screen, " util ") }
func memLine(screen string) string  { return detailRow(screen, " mem ") }

// detailRow is the detail pane's row with that label.
func detailRow(screen, label string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.HasPrefix(l, label) {
			return l
		}
	}
	return ""
}

// samplingBackend is the fake agent with the samples endpoint: it gives
// every GPU five minutes of readings at a steady 100 % SM and half its
// memory, ending before the board's first probe.
type samplingBackend struct {
	*fakeBackend
	asked []string
	end   time.Time
}

func (s *samplingBackend) Samples(ctx context.Context, node string, gpu int, since time.Time) (api.SamplesReport, error) {
	s.fakeBackend.mu.Lock()
	s.asked = append(s.asked, fmt.Sprintf("%s/%d", node, gpu))
	s.fakeBackend.mu.Unlock()
	rep := api.SamplesReport{Node: node, GPU: gpu}
	for i := 30; i > 0; i-- {
		sm := 100
		rep.Samples = append(rep.Samples, runrecord.Sample{At: s.end.Add(-time.Duration(i) * 10 * time.Second), SMPct: &sm, MemMiB: 81559 / 2})
	}
	return rep, nil
}

// TestChartStartsFromTheAgentsSamples: with an agent that keeps samples,
// the board asks it once for the history of the GPU under the cursor and
// draws it before its own points, so a fresh board's chart is not empty;
// the board's own probes stay at the right.
func TestChartStartsFromTheAgentsSamples(t *testing.T) {
	sb := newSimBoards(t)
	be := &samplingBackend{fakeBackend: &fakeBackend{board: testBoard(), queue: testQueue(), usage: testUsage(), events: testEvents()}, end: sb.now.Add(5 * time.Second)}
	hs := newHarness(t, 100, 30, Options{Backend: be, Now: func() time.Time { return sb.now }})
	for _, u := range []int{0, 0, 0} {
		hs.send(BoardMsg(sb.probe(u)))
	}
	line := utilLine(hs.screen())
	if !strings.Contains(line, strings.Repeat("█", 30)+"▁▁▁") {
		t.Errorf("util line %q, want the agent's 30 readings at 100 %% before the board's 3 at 0 %%", line)
	}
	asked := 0
	for _, a := range be.asked {
		if a == "sim01/0" {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("asked the agent for sim01/0's samples %d times (%v), want once", asked, be.asked)
	}
}
