package peer

import (
	"math"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/runrecord"
)

// GPUSamples asks a node for one GPU's recent readings (the board's
// charts of another node's GPU): asked when wanted, never gossiped.
var GPUSamples = Endpoint[SamplesRequest, SamplesReply]{Name: "gpu-samples"}

// SamplesRequest names the GPU and how far back.
type SamplesRequest struct {
	GPU   int       `json:"gpu"`
	Since time.Time `json:"since,omitzero"`
}

// Validate implements Message.
func (r SamplesRequest) Validate() error {
	if r.GPU < 0 || r.GPU >= words.MaxGPUsPerNode || !words.ValidSince(r.Since) {
		return refusal.Invalidf("bad samples request (gpu %d)", r.GPU)
	}
	return nil
}

// maxReplySamples bounds the readings of one reply: an hour at one a
// second, a few bytes each in columns, well under MaxBody.
const maxReplySamples = runrecord.MaxPoints + 2

// SamplesReply is the readings in columns (an hour of them fits one
// reply): times as milliseconds after Start; -1 for SM, temperature or
// power the GPU did not report.
type SamplesReply struct {
	Window time.Duration `json:"window"`
	Start  time.Time     `json:"start,omitzero"`
	AtMs   []int64       `json:"at_ms,omitempty"`
	SM     []int         `json:"sm,omitempty"`
	MemMiB []uint64      `json:"mem_mib,omitempty"`
	PowerW []float64     `json:"power_w,omitempty"`
	TempC  []int         `json:"temp_c,omitempty"`
}

// Validate implements Message.
func (r SamplesReply) Validate() error {
	n := len(r.AtMs)
	if n > maxReplySamples || len(r.SM) != n || len(r.MemMiB) != n || len(r.PowerW) != n || len(r.TempC) != n || !words.ValidSince(r.Start) {
		return refusal.Invalidf("bad samples reply")
	}
	for i := 0; i < n; i++ {
		if r.AtMs[i] < 0 || r.SM[i] < -1 || r.SM[i] > 100 || math.IsNaN(r.PowerW[i]) || r.PowerW[i] < -1 {
			return refusal.Invalidf("bad sample %d", i)
		}
	}
	return nil
}

// SamplesOf packs readings into a reply.
func SamplesOf(samples []runrecord.Sample, window time.Duration) SamplesReply {
	r := SamplesReply{Window: window}
	if len(samples) > maxReplySamples {
		samples = samples[len(samples)-maxReplySamples:]
	}
	if len(samples) > 0 {
		r.Start = samples[0].At
	}
	for _, x := range samples {
		r.AtMs = append(r.AtMs, x.At.Sub(r.Start).Milliseconds())
		r.SM = append(r.SM, orNone(x.SMPct))
		r.MemMiB = append(r.MemMiB, x.MemMiB)
		r.TempC = append(r.TempC, orNone(x.TempC))
		p := -1.0
		if x.PowerW != nil {
			p = *x.PowerW
		}
		r.PowerW = append(r.PowerW, p)
	}
	return r
}

func orNone(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// Samples unpacks the reply.
func (r SamplesReply) Samples() []runrecord.Sample {
	out := make([]runrecord.Sample, len(r.AtMs))
	for i := range r.AtMs {
		x := runrecord.Sample{At: r.Start.Add(time.Duration(r.AtMs[i]) * time.Millisecond), MemMiB: r.MemMiB[i]}
		if r.SM[i] >= 0 {
			v := r.SM[i]
			x.SMPct = &v
		}
		if r.TempC[i] != -1 {
			v := r.TempC[i]
			x.TempC = &v
		}
		if r.PowerW[i] >= 0 {
			v := r.PowerW[i]
			x.PowerW = &v
		}
		out[i] = x
	}
	return out
}
