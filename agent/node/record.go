package node

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/runrecord"
)

// FiguresSaveEvery is how often the running leases' figures are written
// down: an agent killed outright loses at most this much of them; one
// stopped (SIGTERM) writes them as it stops and loses nothing.
const FiguresSaveEvery = time.Minute

// MaxFiguresFile bounds the file the running figures are kept in.
const MaxFiguresFile = 16 << 20

// record is the node's record of its GPUs: each GPU's recent samples and
// each running lease's figures. Its fields are used under the node's wmu;
// saveMu orders the writes of the file.
type record struct {
	samples *runrecord.Samples
	tracker *runrecord.Tracker
	path    string
	saved   time.Time
	saveMu  sync.Mutex
}

// newRecord starts the record, with the figures a stopped agent wrote to
// path (empty: kept in memory only).
func newRecord(path string, window, interval time.Duration) (*record, error) {
	r := &record{samples: runrecord.NewSamples(window, interval), path: path}
	kept, err := readFigures(path)
	r.tracker = runrecord.NewTracker(kept)
	return r, err
}

// readFigures reads the running figures written to path, nil when there
// is no file.
func readFigures(path string) (map[string]*runrecord.Running, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the running leases' figures: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFiguresFile+1))
	if err != nil || len(b) > MaxFiguresFile {
		return nil, fmt.Errorf("read the running leases' figures %s: over %d bytes or unreadable (%v)", path, MaxFiguresFile, err)
	}
	var kept map[string]*runrecord.Running
	if err := json.Unmarshal(b, &kept); err != nil {
		return nil, fmt.Errorf("read the running leases' figures %s: %w", path, err)
	}
	for id, r := range kept {
		if _, ok := lease.NodeOfID(id); !ok || r == nil || len(r.GPUs) > words.MaxGPUsPerNode {
			delete(kept, id)
		}
	}
	return kept, nil
}

// units are the leases whose GPUs are being used now (not reservations).
func units(leases []lease.Lease) []runrecord.Unit {
	out := make([]runrecord.Unit, 0, len(leases))
	for i := range leases {
		l := &leases[i]
		if !l.ReservedUntil.IsZero() || l.Booked {
			continue
		}
		out = append(out, runrecord.Unit{ID: l.ID, Start: l.StartedAt, GPUs: l.GPUs, MIG: l.MIG, BudgetMiB: l.MemMiB, UID: l.UID})
	}
	return out
}

// observeLocked adds the snapshot just taken to the record. Callers hold
// wmu.
func (n *Node) observeLocked() {
	n.rec.samples.Observe(n.snap)
	n.rec.tracker.Observe(n.snap, units(n.table.List()))
}

// finishLocked fills in an ending lease's figures. Callers hold wmu.
func (n *Node) finishLocked(e *lease.LedgerEntry) {
	// A copy: should the end not reach the disk, the lease runs on with
	// its figures (the tracker drops them once the lease is gone).
	f, ok := n.rec.tracker.Running(e.LeaseID)
	if !ok {
		return
	}
	e.Figures = &f
	e.IdleGPUSeconds = min(e.GPUSeconds*f.IdleShare(), e.GPUSeconds)
}

// Crashed makes Close keep from writing the running figures down, as a
// process killed outright could not: what the file holds is what the last
// periodic write left (tests of a crash; the agent's Crash).
func (n *Node) Crashed() { n.crashed.Store(true) }

// saveFigures writes the running figures down when FiguresSaveEvery has
// passed since the last time, or always when force; the file is written
// outside wmu.
func (n *Node) saveFigures(force bool) {
	if n.rec.path == "" || force && n.crashed.Load() {
		return
	}
	n.rec.saveMu.Lock()
	defer n.rec.saveMu.Unlock()
	var kept map[string]*runrecord.Running
	now := n.deps.Clock.Now()
	n.locked(func() error {
		if force || now.Sub(n.rec.saved) >= FiguresSaveEvery {
			kept, n.rec.saved = n.rec.tracker.Kept(), now
		}
		return nil
	})
	if kept == nil {
		return
	}
	b, err := json.Marshal(kept)
	if err == nil {
		// Synced before and after the rename, as the kept runs are: a
		// power cut leaves the last figures or the new, never none.
		err = durable.WriteFile(n.rec.path, b, 0o600)
	}
	if err != nil {
		n.log.Warn("cannot write down the running leases' figures", "err", err)
	}
}

// Samples is GPU gpu's readings since since (within the record's window),
// oldest first, and the window.
func (n *Node) Samples(gpu int, since time.Time) ([]runrecord.Sample, time.Duration) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.rec.samples.Series(gpu, since, n.deps.Clock.Now()), n.rec.samples.Window()
}

// RunningFigures is a running lease's figures so far.
func (n *Node) RunningFigures(id string) (runrecord.Figures, bool) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.rec.tracker.Running(id)
}
