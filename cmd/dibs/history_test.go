package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/runrecord"
)

// TestHistoryPrinters: `dibs history` escapes every name from the nodes,
// shows a run's exit code and a MIG run's utilization as not reported;
// one run's efficiency draws each GPU's series as a line — ASCII under
// NO_COLOR — and lists its verdicts.
func TestHistoryPrinters(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	mean, peak, idle, zero, full := 95.0, 100, 2.0, 0.0, 100.0
	busy := runrecord.GPUFigures{GPU: 0, MeanSM: &mean, PeakSM: &peak, IdlePct: &idle, PeakMemMiB: 9 * 1024, MemTotalMiB: 80 * 1024, Series: []byte{0, 50, 100, runrecord.NotReported}}
	dead := runrecord.GPUFigures{GPU: 1, MeanSM: &zero, PeakSM: new(int), IdlePct: &full, MemTotalMiB: 80 * 1024, Series: []byte{0, 0, 0, 0}}
	f := &runrecord.Figures{Seconds: 3600, GPUs: []runrecord.GPUFigures{busy, dead}}
	three := 3
	row := api.RowOf(lease.LedgerEntry{LeaseID: "node01-7", Node: "node01", User: "eve" + hostileText, GPUs: []int{0, 1},
		Start: now.Add(-time.Hour), End: now, GPUSeconds: 7200, Reason: "exit-3", Figures: f}, "NVIDIA H100 80GB HBM3")
	mig := api.HistoryRow{ID: "node02-1", Node: "node02", User: "bob", MIG: "1g.10gb" + hostileText, State: lease.StateReleased, Start: now, End: now,
		Figures: &runrecord.Figures{GPUs: []runrecord.GPUFigures{{GPU: 0, Profile: "1g.10gb", PeakMemMiB: 100, MemTotalMiB: 9856}}}, PeakMemMiB: 100, MemTotalMiB: 9856}
	rep := api.HistoryReport{Since: now, Rows: []api.HistoryRow{row, mig}, NotAsked: []string{"node03" + hostileText}}
	var b bytes.Buffer
	printHistory(&b, rep)
	out := b.String()
	assertTerminalSafe(t, "history", out)
	for _, want := range []string{"failed (exit 3)", "n/r", "2xH100 80GB HBM3", "not listed (an older dibs; upgrade it): node03"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	if row.ExitCode == nil || *row.ExitCode != three || row.State != lease.StateFailed {
		t.Errorf("row exit %v state %s, want 3 and failed", row.ExitCode, row.State)
	}
	for _, plain := range []bool{false, true} {
		b.Reset()
		printEfficiency(&b, api.HistoryReport{Rows: []api.HistoryRow{row}}, plain)
		out := b.String()
		assertTerminalSafe(t, "eff", out)
		line := "▁▄█·"
		if plain {
			line = "_=@?"
			if strings.ContainsFunc(out, func(r rune) bool { return r > 127 && r != '→' }) {
				t.Errorf("plain efficiency has non-ASCII chart characters:\n%s", out)
			}
		}
		for _, want := range []string{line, "SM mean 95 %, peak 100 %, idle 2 %", "→ used 1 of 2 GPUs", "peak memory 9 of 80 GiB: a MIG 1g.10gb or a budget would fit"} {
			if !strings.Contains(out, want) {
				t.Errorf("efficiency (plain %v) lacks %q:\n%s", plain, want, out)
			}
		}
	}
}
