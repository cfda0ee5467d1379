package runrecord

import (
	"fmt"
	"math"
	"strings"
)

// UsedPct is the mean SM utilization from which a GPU counts as used by a
// run: below it the GPU was held for nothing but the odd kernel.
const UsedPct = 5

// IdleVerdictPct is the idle share from which a run is told it sat idle.
const IdleVerdictPct = 25

// Verdicts are the plain findings a person reads from a run's figures,
// the most telling first; none when the figures say nothing worth saying.
func (f *Figures) Verdicts() []string {
	var out []string
	reported, used := 0, 0
	for _, g := range f.GPUs {
		if g.MeanSM == nil {
			continue
		}
		reported++
		if *g.MeanSM >= UsedPct {
			used++
		}
	}
	if reported > 1 && reported == len(f.GPUs) && used < reported {
		out = append(out, fmt.Sprintf("used %d of %d GPUs", used, reported))
	}
	if f.IdlePct != nil && *f.IdlePct >= IdleVerdictPct {
		out = append(out, fmt.Sprintf("idle %.0f %% of its time", *f.IdlePct))
	}
	if v := f.memoryVerdict(); v != "" {
		out = append(out, v)
	}
	return out
}

// memoryVerdict says when a whole GPU was held for a small part of its
// memory: a MIG slice or a budget would have left the rest to others.
func (f *Figures) memoryVerdict() string {
	var peak, total uint64
	for _, g := range f.GPUs {
		if g.Profile != "" || g.BudgetMiB > 0 {
			return "" // a MIG instance or a budget already
		}
		peak, total = max(peak, g.PeakMemMiB), max(total, g.MemTotalMiB)
	}
	if total < 16<<10 || peak == 0 || peak*2 > total {
		return ""
	}
	return fmt.Sprintf("peak memory %s of %s GiB: a MIG %s or a budget would fit", gib(peak), gib(total), smallestProfile(peak, total))
}

// smallestProfile names the smallest MIG slice of a GPU with total MiB
// (the A100/H100 pattern: an eighth, a quarter, a half) that holds peak.
func smallestProfile(peak, total uint64) string {
	totalGB := math.Round(float64(total) / 1024)
	for _, p := range []struct {
		g    int
		part float64
	}{{1, 8}, {2, 4}, {3, 2}} {
		gb := totalGB / p.part
		if float64(peak)/1024 <= gb {
			return fmt.Sprintf("%dg.%.0fgb", p.g, gb)
		}
	}
	return "3g." + fmt.Sprintf("%.0fgb", totalGB/2)
}

// gib writes MiB as whole GiB, rounded up (a tenth below 10 GiB).
func gib(mib uint64) string {
	g := float64(mib) / 1024
	if g < 10 && math.Ceil(g) != g {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", math.Ceil(g*10)/10), ".0")
	}
	return fmt.Sprintf("%.0f", math.Ceil(g))
}

// OneLine is a run's efficiency in one line, for the notice at its end:
// the mean SM of its GPUs, its peak memory, and its verdicts.
func (f *Figures) OneLine() string {
	var parts []string
	var sum float64
	n := 0
	var peak, total uint64
	for _, g := range f.GPUs {
		if g.MeanSM != nil {
			sum += *g.MeanSM
			n++
		}
		peak, total = max(peak, g.PeakMemMiB), max(total, g.MemTotalMiB)
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("mean SM %.0f %%", sum/float64(n)))
	} else if len(f.GPUs) > 0 {
		parts = append(parts, "utilization not reported")
	}
	if total > 0 {
		parts = append(parts, fmt.Sprintf("peak memory %s of %s GiB", gib(peak), gib(total)))
	}
	for _, v := range f.Verdicts() {
		if !strings.HasPrefix(v, "peak memory") {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, "; ")
}

// IdleShare is the share (0 to 1) of the GPU time the figures cover that
// was spent at 0 %: each GPU's idle share, averaged over the GPUs (a GPU
// whose utilization was not reported counts as not idle).
func (f *Figures) IdleShare() float64 {
	if len(f.GPUs) == 0 {
		return 0
	}
	var sum float64
	for _, g := range f.GPUs {
		if g.IdlePct != nil {
			sum += *g.IdlePct / 100
		}
	}
	return sum / float64(len(f.GPUs))
}
