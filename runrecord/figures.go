package runrecord

import (
	"math"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Unit is what one lease holds, as the figures need it: its GPUs, and
// when it holds part of one GPU, which part (a MIG instance's UUID, or a
// memory budget in MiB and the uid whose processes count against it).
type Unit struct {
	ID string
	// Start is when the lease began: its first reading stands for the
	// time since (up to maxGap), so no probe interval is lost at the start.
	Start     time.Time
	GPUs      []int
	MIG       string
	BudgetMiB uint64
	UID       int
}

// MaxSeries bounds the points of a lease's utilization series over its
// life: the buckets widen (two merge into one) as the lease runs on.
const MaxSeries = 60

// firstBucket is how long a series bucket lasts until the series fills.
const firstBucket = 10 * time.Second

// NotReported marks a series point whose utilization was not reported.
const NotReported = 255

// maxGap bounds the time one reading stands for: after a longer silence
// (the agent was down) the gap counts for nothing rather than for the
// reading that ended it.
const maxGap = time.Minute

// Running is the figures of one running lease so far. Its fields are
// exported so the agent can write it down and read it back across a
// restart; nothing else should change them.
type Running struct {
	Start time.Time `json:"start"`
	Last  time.Time `json:"last"`
	// Seconds is the time observed; IdleSeconds the part of it during
	// which every GPU of the lease whose utilization is reported read 0 %.
	Seconds     float64      `json:"seconds"`
	IdleSeconds float64      `json:"idle_seconds"`
	GPUs        []RunningGPU `json:"gpus"`
}

// RunningGPU is one GPU's part of Running.
type RunningGPU struct {
	GPU         int     `json:"gpu"`
	Profile     string  `json:"profile,omitempty"`
	BudgetMiB   uint64  `json:"budget_mib,omitempty"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	PeakMemMiB  uint64  `json:"peak_mem_mib"`
	ReportedSec float64 `json:"reported_s"`
	SMSec       float64 `json:"sm_s"` // the integral of SM % over time, in %·s
	IdleSec     float64 `json:"idle_s"`
	PeakSM      int     `json:"peak_sm"` // -1 until one is reported
	EnergyJ     float64 `json:"energy_j"`
	// The series: per bucket the %·s and the seconds reported, and the
	// bucket's width.
	BucketSec float64   `json:"bucket_s"`
	BucketSM  []float64 `json:"bucket_sm"`
	BucketRep []float64 `json:"bucket_rep"`
	BucketAll []float64 `json:"bucket_all"`
}

// Tracker keeps the running figures of a node's leases. Not safe for
// concurrent use; the agent calls it under its own lock.
type Tracker struct {
	leases map[string]*Running
}

// NewTracker starts with the running figures a restarted agent wrote down
// (nil for none).
func NewTracker(kept map[string]*Running) *Tracker {
	if kept == nil {
		kept = map[string]*Running{}
	}
	return &Tracker{leases: kept}
}

// Observe adds a snapshot's readings to the figures of units, the leases
// running now; the figures of leases not among them are dropped (Finish
// takes a lease's before its end is written).
func (t *Tracker) Observe(snap nodeprobe.Snapshot, units []Unit) {
	seen := make(map[string]bool, len(units))
	byIndex := make(map[int]*nodeprobe.GPU, len(snap.GPUs))
	for i := range snap.GPUs {
		byIndex[snap.GPUs[i].Index] = &snap.GPUs[i]
	}
	for _, u := range units {
		seen[u.ID] = true
		r := t.leases[u.ID]
		if r == nil {
			first := snap.TakenAt
			if !u.Start.IsZero() && u.Start.Before(first) && first.Sub(u.Start) <= maxGap {
				first = u.Start
			}
			r = &Running{Start: first, Last: first}
			for _, g := range u.GPUs {
				r.GPUs = append(r.GPUs, RunningGPU{GPU: g, PeakSM: -1, BucketSec: firstBucket.Seconds()})
			}
			t.leases[u.ID] = r
		}
		r.observe(snap.TakenAt, u, byIndex)
	}
	for id := range t.leases {
		if !seen[id] {
			delete(t.leases, id)
		}
	}
}

// observe adds one reading: each value stands for the time since the last.
func (r *Running) observe(at time.Time, u Unit, gpus map[int]*nodeprobe.GPU) {
	dt := at.Sub(r.Last)
	if dt < 0 {
		return
	}
	r.Last = at
	if dt > maxGap {
		dt = 0
	}
	sec := dt.Seconds()
	r.Seconds += sec
	idle, anyReported := true, false
	for i := range r.GPUs {
		x := &r.GPUs[i]
		g := gpus[x.GPU]
		if g == nil || g.Error != "" {
			x.add(r.Seconds-sec, sec, -1)
			continue
		}
		mem, total, sm := reading(g, u)
		x.MemTotalMiB, x.BudgetMiB = total, u.BudgetMiB
		x.PeakMemMiB = max(x.PeakMemMiB, mem)
		if prof := profileOf(g, u); prof != "" {
			x.Profile = prof
		}
		if g.PowerDrawW != nil && u.MIG == "" && u.BudgetMiB == 0 {
			x.EnergyJ += *g.PowerDrawW * sec
		}
		if sm >= 0 {
			anyReported = true
			if sm > 0 {
				idle = false
			}
			x.PeakSM = max(x.PeakSM, sm)
		}
		x.add(r.Seconds-sec, sec, sm)
	}
	if anyReported && idle {
		r.IdleSeconds += sec
	}
}

// reading is what one GPU says of unit u's part of it: memory used, the
// memory u may use, and SM % (-1 when not reported for u).
func reading(g *nodeprobe.GPU, u Unit) (mem, total uint64, sm int) {
	sm = -1
	switch {
	case u.MIG != "":
		for _, d := range g.MIGDevices {
			if d.UUID == u.MIG {
				return d.MemoryUsedMiB, d.MemoryTotalMiB, -1
			}
		}
		return 0, 0, -1
	case u.BudgetMiB > 0:
		for _, p := range g.Processes {
			if p.UID == u.UID {
				mem += p.UsedMemoryMiB
			}
		}
		return mem, u.BudgetMiB, -1
	}
	if g.UtilizationPct != nil && len(g.MIGDevices) == 0 {
		sm = *g.UtilizationPct
	}
	return g.MemoryUsedMiB, g.MemoryTotalMiB, sm
}

func profileOf(g *nodeprobe.GPU, u Unit) string {
	if u.MIG == "" {
		return ""
	}
	for _, d := range g.MIGDevices {
		if d.UUID == u.MIG {
			return d.Profile
		}
	}
	return ""
}

// add counts sec seconds at sm % (-1: not reported) that began elapsed
// seconds into the lease, in the totals and the series.
func (x *RunningGPU) add(elapsed, sec float64, sm int) {
	if sec <= 0 {
		return
	}
	if sm >= 0 {
		x.ReportedSec += sec
		x.SMSec += float64(sm) * sec
		if sm == 0 {
			x.IdleSec += sec
		}
	}
	b := int(elapsed / x.BucketSec)
	for b >= MaxSeries {
		x.widen()
		b = int(elapsed / x.BucketSec)
	}
	for len(x.BucketAll) <= b {
		x.BucketAll, x.BucketSM, x.BucketRep = append(x.BucketAll, 0), append(x.BucketSM, 0), append(x.BucketRep, 0)
	}
	x.BucketAll[b] += sec
	if sm >= 0 {
		x.BucketRep[b] += sec
		x.BucketSM[b] += float64(sm) * sec
	}
}

// widen merges the series' buckets two by two.
func (x *RunningGPU) widen() {
	merge := func(a []float64) []float64 {
		out := make([]float64, (len(a)+1)/2, MaxSeries)
		for i, v := range a {
			out[i/2] += v
		}
		return out
	}
	x.BucketAll, x.BucketSM, x.BucketRep = merge(x.BucketAll), merge(x.BucketSM), merge(x.BucketRep)
	x.BucketSec *= 2
}

// Running is lease id's figures so far (a copy), and whether it has any.
func (t *Tracker) Running(id string) (Figures, bool) {
	r := t.leases[id]
	if r == nil {
		return Figures{}, false
	}
	return r.Figures(), true
}

// Finish takes lease id's figures as it ends, nil when it has none.
func (t *Tracker) Finish(id string) *Figures {
	r := t.leases[id]
	if r == nil {
		return nil
	}
	delete(t.leases, id)
	f := r.Figures()
	return &f
}

// Kept is every running lease's figures, for the agent to write down.
func (t *Tracker) Kept() map[string]*Running {
	out := make(map[string]*Running, len(t.leases))
	for id, r := range t.leases {
		c := *r
		c.GPUs = make([]RunningGPU, len(r.GPUs))
		for i, g := range r.GPUs {
			g.BucketAll, g.BucketSM, g.BucketRep = clone(g.BucketAll), clone(g.BucketSM), clone(g.BucketRep)
			c.GPUs[i] = g
		}
		out[id] = &c
	}
	return out
}

func clone(a []float64) []float64 { return append([]float64(nil), a...) }

// Figures is what a lease's GPUs did over its life, as the ledger keeps
// it: small (a few dozen bytes per GPU plus its series).
type Figures struct {
	// Seconds is the time observed (a lease the agent was down for part
	// of counts the part it saw); IdlePct the share of it during which
	// every GPU reported read 0 % (nil: none reported).
	Seconds float64      `json:"seconds"`
	IdlePct *float64     `json:"idle_pct,omitempty"`
	GPUs    []GPUFigures `json:"gpus"`
}

// GPUFigures is one GPU's (or MIG instance's, or budget's) figures. The
// utilization figures are nil when the hardware did not report them.
type GPUFigures struct {
	GPU         int      `json:"gpu"`
	Profile     string   `json:"profile,omitempty"`
	BudgetMiB   uint64   `json:"budget_mib,omitempty"`
	MeanSM      *float64 `json:"mean_sm,omitempty"`
	PeakSM      *int     `json:"peak_sm,omitempty"`
	IdlePct     *float64 `json:"idle_pct,omitempty"`
	PeakMemMiB  uint64   `json:"peak_mem_mib"`
	MemTotalMiB uint64   `json:"mem_total_mib"`
	EnergyWh    float64  `json:"energy_wh"`
	// Series is the mean SM % over equal parts of the lease's life, at
	// most MaxSeries of them; NotReported where none was reported.
	Series []byte `json:"series,omitempty"`
}

// Figures is r made final.
func (r *Running) Figures() Figures {
	f := Figures{Seconds: round1(r.Seconds)}
	reported := false
	for _, x := range r.GPUs {
		g := GPUFigures{GPU: x.GPU, Profile: x.Profile, BudgetMiB: x.BudgetMiB, PeakMemMiB: x.PeakMemMiB, MemTotalMiB: x.MemTotalMiB, EnergyWh: round1(x.EnergyJ / 3600)}
		if x.ReportedSec > 0 {
			reported = true
			mean, idle, peak := round1(x.SMSec/x.ReportedSec), round1(100*x.IdleSec/x.ReportedSec), max(x.PeakSM, 0)
			g.MeanSM, g.IdlePct, g.PeakSM = &mean, &idle, &peak
		}
		g.Series = make([]byte, len(x.BucketAll))
		for i := range x.BucketAll {
			g.Series[i] = NotReported
			if x.BucketRep[i] > 0 {
				g.Series[i] = byte(math.Round(x.BucketSM[i] / x.BucketRep[i]))
			}
		}
		f.GPUs = append(f.GPUs, g)
	}
	if reported && r.Seconds > 0 {
		idle := round1(100 * r.IdleSeconds / r.Seconds)
		f.IdlePct = &idle
	}
	return f
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// Validate checks figures from a disk or a peer: bounded, finite, in range.
func (f *Figures) Validate() error {
	if len(f.GPUs) > 64 {
		return errf("figures of %d GPUs", len(f.GPUs))
	}
	bad := func(p *float64, hi float64) bool {
		return p != nil && (math.IsNaN(*p) || *p < 0 || *p > hi)
	}
	if math.IsNaN(f.Seconds) || f.Seconds < 0 || f.Seconds > 1e9 || bad(f.IdlePct, 100) {
		return errf("figures out of range")
	}
	for _, g := range f.GPUs {
		if g.GPU < 0 || len(g.Series) > MaxSeries || len(g.Profile) > 64 || bad(g.MeanSM, 100) || bad(g.IdlePct, 100) ||
			g.PeakSM != nil && (*g.PeakSM < 0 || *g.PeakSM > 100) || math.IsNaN(g.EnergyWh) || g.EnergyWh < 0 || g.EnergyWh > 1e9 {
			return errf("figures of gpu %d out of range", g.GPU)
		}
	}
	return nil
}
