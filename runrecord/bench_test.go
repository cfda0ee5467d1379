package runrecord

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// idle8 is an idle 8-GPU node's snapshot at t.
func idle8(t time.Time) nodeprobe.Snapshot {
	return snapAt(t, []int{0, 0, 0, 0, 0, 0, 0, 0}, 0)
}

// BenchmarkSampler is the record's cost per probe on an 8-GPU node: the
// samples of every GPU and the figures of eight 1-GPU leases (the agent
// probes once a second, so ns/op over 1e9 is its share of one core).
func BenchmarkSampler(b *testing.B) {
	s := NewSamples(time.Hour, time.Second)
	tr := NewTracker(nil)
	var units []Unit
	for g := range 8 {
		units = append(units, Unit{ID: fmt.Sprintf("n-%d", g), GPUs: []int{g}})
	}
	t := t0
	snap := idle8(t)
	b.ReportAllocs()
	for b.Loop() {
		t = t.Add(time.Second)
		snap.TakenAt = t
		s.Observe(snap)
		tr.Observe(snap, units)
	}
}

// BenchmarkSamplesMemory is one node's history memory for 8 GPUs × one
// hour at one probe a second (the heap it holds once full).
func BenchmarkSamplesMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewSamples(time.Hour, time.Second)
		for i := range 3600 {
			s.Observe(idle8(t0.Add(time.Duration(i) * time.Second)))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024, "KiB-held")
		runtime.KeepAlive(s)
	}
}
