package tui

import (
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/chart"
)

// The board draws each GPU's utilization and memory over the last minutes
// from the telemetry it has seen itself: every board carries each node's
// latest probe, and the board keeps the last historyWindow of them per GPU.
// Nothing is asked of the agents for it, so a board opened a minute ago
// draws a minute. (The agents' own sample history, served on demand, can
// replace this ring when the board asks for it.)
const (
	// historyWindow is how far back the board's charts reach.
	historyWindow = 10 * time.Minute
	// historyMax bounds the points kept per GPU whatever the probe rate:
	// at a 2 s probe, ten minutes is 300 points.
	historyMax = 300
	// sparkMin is the narrowest chart worth drawing; below it the board
	// shows the numbers alone.
	sparkMin = 8
)

// sample is one probe of one GPU as the board saw it: utilization (chart.None
// when not reported) and memory used, in percent.
type sample struct {
	at     time.Time
	util   int
	memPct int
}

// history is the board's record of each GPU's recent probes, keyed by node
// and GPU index. It belongs to one board session; only the model's update
// loop touches it.
type history struct {
	gpus map[histKey]*gpuHistory
	// gen counts the boards recorded: a GPU not stamped with the latest
	// left the board, and is forgotten.
	gen uint64
}

type histKey struct {
	node string
	gpu  int
}

// gpuHistory is one GPU's points, oldest first.
type gpuHistory struct {
	pts []sample
	gen uint64
}

// record adds the probe each alive node's GPUs carry, once per probe (the
// same telemetry arrives in many boards), and forgets GPUs no longer on the
// board and points older than the window. A board whose probes it has seen
// allocates nothing (it runs for every board the stream sends).
func (h *history) record(b *api.Board) {
	if h.gpus == nil {
		h.gpus = map[histKey]*gpuHistory{}
	}
	h.gen++
	for ni := range b.Nodes {
		n := &b.Nodes[ni]
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			k := histKey{n.Name, g.Index}
			e := h.gpus[k]
			if e == nil {
				e = &gpuHistory{}
				h.gpus[k] = e
			}
			e.gen = h.gen
			if n.State != api.NodeAlive || n.TelemetryAt.IsZero() {
				continue
			}
			if len(e.pts) > 0 && !n.TelemetryAt.After(e.pts[len(e.pts)-1].at) {
				continue
			}
			s := sample{at: n.TelemetryAt, util: chart.None, memPct: chart.None}
			if g.UtilizationPct != nil {
				s.util = min(max(*g.UtilizationPct, 0), 100)
			}
			if g.MemoryTotalMiB > 0 {
				s.memPct = int(min(g.MemoryUsedMiB*100/g.MemoryTotalMiB, 100))
			}
			pts := append(e.pts, s)
			cut := 0
			for cut < len(pts) && (len(pts)-cut > historyMax || n.TelemetryAt.Sub(pts[cut].at) > historyWindow) {
				cut++
			}
			// Dropping the front reslices; the next growth of the slice
			// copies what is kept, so the array stays about historyMax.
			e.pts = pts[cut:]
		}
	}
	for k, e := range h.gpus {
		if e.gen != h.gen {
			delete(h.gpus, k)
		}
	}
}

// of returns the GPU's points, oldest first.
func (h *history) of(node string, gpu int) []sample {
	if e := h.gpus[histKey{node, gpu}]; e != nil {
		return e.pts
	}
	return nil
}
