// Package runrecord is the record of how GPUs were used: a short history of
// each GPU's readings (SM utilization, memory, power, temperature) in
// bounded memory, each running lease's figures accumulated from them (mean
// and peak SM, peak memory, time at 0 %, energy, a coarse series over its
// life), and the plain verdicts people read from those figures ("used 1 of
// 4 GPUs"). It is pure: snapshots and times come in, values go out; the
// agent owns the loop, the lock and the disk.
//
// Utilization that the hardware does not report — MIG instances (NVML
// reports none for them), and a GPU shared under memory budgets, where the
// GPU's figure is everybody's — is kept as "not reported", never as 0.
package runrecord

import (
	"math"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Sample is one reading of one GPU. A nil pointer is a figure the hardware
// did not report, which is not zero.
type Sample struct {
	At     time.Time `json:"at"`
	SMPct  *int      `json:"sm_pct,omitempty"`
	MemMiB uint64    `json:"mem_mib"`
	PowerW *float64  `json:"power_w,omitempty"`
	TempC  *int      `json:"temp_c,omitempty"`
}

// DefaultWindow is how far back each GPU's history reaches.
const DefaultWindow = time.Hour

// MaxPoints bounds the points one GPU's history holds: a probe rate faster
// than Window/MaxPoints is folded (averaged) into points that far apart, so
// memory stays bounded whatever the probe interval.
const MaxPoints = 3600

// point is a Sample packed small (24 bytes): unknown SM or temperature is
// noInt, unknown power NaN. k counts the readings folded into it.
type point struct {
	at    int64 // unix milliseconds
	mem   uint32
	power float32
	sm    int16
	temp  int16
	k     uint16
}

const noInt = math.MinInt16

// ring is one GPU's points, oldest first from start.
type ring struct {
	buf   []point
	start int
	n     int
}

func (r *ring) at(i int) *point { return &r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) push(p point) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = p
		r.n++
		return
	}
	r.buf[r.start] = p
	r.start = (r.start + 1) % len(r.buf)
}

// Samples is a node's GPU history: one ring per GPU index, each holding
// the last Window of readings at most Step apart. Not safe for concurrent
// use; the agent calls it under its own lock.
type Samples struct {
	window time.Duration
	step   time.Duration
	rings  map[int]*ring
}

// NewSamples keeps window of history for readings taken every interval
// (both defaulted when zero).
func NewSamples(window, interval time.Duration) *Samples {
	if window <= 0 {
		window = DefaultWindow
	}
	if interval <= 0 {
		interval = time.Second
	}
	step := max(interval, window/MaxPoints)
	return &Samples{window: window, step: step, rings: map[int]*ring{}}
}

// Window is how far back the history reaches; Step how far apart its
// points are at least.
func (s *Samples) Window() time.Duration { return s.window }

// Step is the least time between two points of one GPU.
func (s *Samples) Step() time.Duration { return s.step }

// capacity is how many points a ring needs for the window, with one spare.
func (s *Samples) capacity() int {
	return min(int(s.window/s.step)+2, MaxPoints+2)
}

// Observe adds a snapshot's readings. A GPU that could not be read adds
// nothing; one split into MIG instances adds memory but no utilization.
func (s *Samples) Observe(snap nodeprobe.Snapshot) {
	at := snap.TakenAt.UnixMilli()
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.Error != "" {
			continue
		}
		r := s.rings[g.Index]
		if r == nil {
			r = &ring{buf: make([]point, s.capacity())}
			s.rings[g.Index] = r
		}
		p := point{at: at, mem: uint32(min(g.MemoryUsedMiB, math.MaxUint32)), power: float32(math.NaN()), sm: noInt, temp: noInt, k: 1}
		if g.UtilizationPct != nil && len(g.MIGDevices) == 0 {
			p.sm = int16(*g.UtilizationPct)
		}
		if g.PowerDrawW != nil {
			p.power = float32(*g.PowerDrawW)
		}
		if g.TemperatureC != nil {
			p.temp = int16(*g.TemperatureC)
		}
		if r.n > 0 {
			last := r.at(r.n - 1)
			if at < last.at {
				continue // a clock step back: keep the history in order
			}
			if time.Duration(at-last.at)*time.Millisecond < s.step && last.k < math.MaxUint16 {
				fold(last, p)
				continue
			}
		}
		r.push(p)
	}
}

// fold averages reading p into point q (its time stays the first's; peak
// memory is kept, since memory is what fits or not).
func fold(q *point, p point) {
	k := float64(q.k)
	avg := func(a, b int16) int16 {
		if a == noInt || b == noInt {
			return noInt
		}
		return int16(math.Round((float64(a)*k + float64(b)) / (k + 1)))
	}
	q.sm, q.temp = avg(q.sm, p.sm), avg(q.temp, p.temp)
	q.power = float32((float64(q.power)*k + float64(p.power)) / (k + 1))
	q.mem = max(q.mem, p.mem)
	q.k++
}

// GPUs lists the GPU indexes with a history.
func (s *Samples) GPUs() []int {
	out := make([]int, 0, len(s.rings))
	for i := range s.rings {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// Series is GPU gpu's readings taken at or after since and no older than
// the window before now, oldest first.
func (s *Samples) Series(gpu int, since, now time.Time) []Sample {
	r := s.rings[gpu]
	if r == nil {
		return nil
	}
	from := max(since.UnixMilli(), now.Add(-s.window).UnixMilli())
	out := make([]Sample, 0, r.n)
	for i := 0; i < r.n; i++ {
		p := r.at(i)
		if p.at < from {
			continue
		}
		out = append(out, p.sample())
	}
	return out
}

func (p *point) sample() Sample {
	x := Sample{At: time.UnixMilli(p.at), MemMiB: uint64(p.mem)}
	if p.sm != noInt {
		v := int(p.sm)
		x.SMPct = &v
	}
	if p.temp != noInt {
		v := int(p.temp)
		x.TempC = &v
	}
	if !math.IsNaN(float64(p.power)) {
		v := math.Round(float64(p.power)*10) / 10
		x.PowerW = &v
	}
	return x
}
