package tui

import (
	"context"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/chart"
)

// The board draws each GPU's utilization and memory over the last minutes
// from the telemetry it has seen itself: every board carries each node's
// latest probe, and the board keeps the last historyWindow of them per GPU.
// The first time the cursor lands on a GPU, the board also asks the agent
// for what it kept of that GPU (sampler), so a fresh board's chart does
// not start empty; after that, live telemetry alone extends it.
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
	// asked holds the GPUs whose history was asked of their agent.
	asked map[histKey]bool
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
			delete(h.asked, k) // back on the board later: asked again
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

// sampler is a Backend that can also give a GPU's recent readings as its
// agent kept them (api.Client can, through `POST /v1/samples`, and the SSH
// board's bound service). With one, the board starts the chart of the GPU
// under the cursor from the agent's history instead of an empty line; when
// it cannot (a backend without it, an agent too old to answer) the charts
// grow from what the board sees.
type sampler interface {
	Samples(ctx context.Context, node string, gpu int, since time.Time) (api.SamplesReport, error)
}

var _ sampler = (*api.Client)(nil)

// samplesMsg is an agent's answer for one GPU's history.
type samplesMsg struct {
	node string
	gpu  int
	rep  api.SamplesReport
	err  error
}

// fetchSamples asks the agent, once per GPU per board session, for the
// history of the GPU under the cursor.
func (m *Model) fetchSamples() tea.Cmd {
	if _, ok := m.backend.(sampler); !ok || m.view != viewBoard {
		return nil
	}
	n, g := m.grid.cursorGPU()
	if n == nil || g == nil || n.State != api.NodeAlive {
		return nil
	}
	k := histKey{n.Name, g.Index}
	if m.hist.asked == nil {
		m.hist.asked = map[histKey]bool{}
	}
	if m.hist.asked[k] {
		return nil
	}
	m.hist.asked[k] = true
	since := m.now().Add(-historyWindow)
	return m.ask("", func(ctx context.Context, be Backend) tea.Msg {
		r, err := be.(sampler).Samples(ctx, k.node, k.gpu, since)
		return samplesMsg{node: k.node, gpu: k.gpu, rep: r, err: err}
	})
}

// seed puts the agent's readings from before the board's first point in
// front of it: the board's own points stay as they are. A failed answer
// is dropped (the chart grows from live telemetry).
func (h *history) seed(msg samplesMsg, b *api.Board) {
	if msg.err != nil || len(msg.rep.Samples) == 0 {
		return
	}
	var totalMiB uint64
	found := false
	for ni := range b.Nodes {
		if n := &b.Nodes[ni]; n.Name == msg.node {
			for gi := range n.GPUs {
				if n.GPUs[gi].Index == msg.gpu {
					totalMiB, found = n.GPUs[gi].MemoryTotalMiB, true
				}
			}
		}
	}
	if !found {
		return
	}
	k := histKey{msg.node, msg.gpu}
	e := h.gpus[k]
	if e == nil {
		e = &gpuHistory{gen: h.gen}
		h.gpus[k] = e
	}
	var older []sample
	for _, s := range msg.rep.Samples {
		if len(e.pts) > 0 && !s.At.Before(e.pts[0].at) {
			break
		}
		p := sample{at: s.At, util: chart.None, memPct: chart.None}
		if s.SMPct != nil {
			p.util = min(max(*s.SMPct, 0), 100)
		}
		if totalMiB > 0 {
			p.memPct = int(min(s.MemMiB*100/totalMiB, 100))
		}
		older = append(older, p)
	}
	pts := append(older, e.pts...)
	newest := pts[len(pts)-1].at
	cut := 0
	for cut < len(pts) && (len(pts)-cut > historyMax || newest.Sub(pts[cut].at) > historyWindow) {
		cut++
	}
	e.pts = pts[cut:]
}
