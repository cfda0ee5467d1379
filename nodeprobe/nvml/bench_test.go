//go:build linux && cgo && nvml

package nvml

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// BenchmarkNVMLSnapshot8 is one probe of a mocked DGX H100 (eight GPUs on
// NVSwitch) with three processes attributed from the fake /proc in testdata.
// The mock answers instantly, so this is the CPU dibs spends around NVML.
func BenchmarkNVMLSnapshot8(b *testing.B) {
	s := stubServer(dgxh100.New())
	withNVSwitch(s, 18)
	procs := map[int][]nvml.ProcessInfo{
		0: {{Pid: 4242, UsedGpuMemory: 30000 << 20}},
		1: {{Pid: 4243, UsedGpuMemory: 30000 << 20}},
		4: {{Pid: 5151, UsedGpuMemory: 1 << 30}},
	}
	for i, ps := range procs {
		s.Devices[i].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return ps, nvml.SUCCESS
		}
	}
	p := openMock(b, s, nil)
	ctx := context.Background()
	if _, err := p.Snapshot(ctx); err != nil { // first probe reads the static facts
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		snap, err := p.Snapshot(ctx)
		if err != nil || len(snap.GPUs[0].Processes) != 1 {
			b.Fatalf("Snapshot: %+v, %v", snap.GPUs[0].Processes, err)
		}
	}
}
