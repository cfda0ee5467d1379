package sim

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkSimSnapshot8 is one probe of eight simulated GPUs with a load
// file (re-read each time) giving three of them processes.
func BenchmarkSimSnapshot8(b *testing.B) {
	path := filepath.Join(b.TempDir(), "load.json")
	writeFile(b, path, `{"gpus":{
		"0":{"utilization_pct":95,"memory_used_mib":30000,"processes":[{"pid":4242,"user":"root","command":"python","used_memory_mib":30000}]},
		"1":{"utilization_pct":97,"processes":[{"pid":4243,"uid":0,"command":"python","used_memory_mib":30000}]},
		"5":{"utilization_pct":12,"processes":[{"pid":5151,"user":"nobody-dibs-bench","command":"jupyter","used_memory_mib":1024,"container":"3f4e5a6b7c8d"}]}}}`)
	s := newTestSim(b, "8xH100-80GB", path, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		snap, err := s.Snapshot(ctx)
		if err != nil || len(snap.GPUs) != 8 {
			b.Fatalf("Snapshot: %d gpus, %v", len(snap.GPUs), err)
		}
	}
}
