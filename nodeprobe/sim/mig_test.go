package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestSimMIGSpec(t *testing.T) {
	tests := []struct {
		spec    string
		want    string // profiles of GPU 0, '+'-joined; "" for a whole GPU
		wantErr string
	}{
		{"1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb", "3g.40gb+2g.20gb+1g.10gb", ""},
		{"2xH100:MIG=1g.10gb+1g.10gb", "1g.10gb+1g.10gb", ""},
		{"A100-40GB:mig=7g.40gb", "7g.40gb", ""},
		{"1xL40S:mig=1g.10gb", "", "L40S has no MIG"},
		{"1xA100-80GB:mig=4g.40gb+4g.40gb", "", "take 8 compute slices"},
		{"1xA100-40GB:mig=3g.20gb+3g.20gb+1g.10gb", "", "take 50 GB"},
		{"1xA100-80GB:mig=3g40gb", "", "not a MIG profile"},
		{"1xA100-80GB:mig=", "", "not an option"},
		{"1xA100-80GB:nvlink=off", "", "not an option"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			gpus, err := parseSimSpec(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range gpus[0].migs {
				got = append(got, p.name)
			}
			if strings.Join(got, "+") != tt.want {
				t.Errorf("MIG instances %q, want %q", got, tt.want)
			}
		})
	}
}

// A GPU split into MIG instances shows as NVML shows one: MIG enabled, no
// utilisation, one MIG device per instance with a MIG- UUID, and its
// processes attributed to their instance.
func TestSimMIGSnapshot(t *testing.T) {
	s := newTestSim(t, "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xL4", "", nil)
	one := 1
	if err := s.SetLoad(Load{GPUs: map[int]GPULoad{0: {UtilizationPct: 50, Processes: []LoadProcess{
		{PID: 10, User: "nobody", Command: "eval", UsedMemoryMiB: 5000, MIG: &one},
	}}}}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := snap.GPUs[0]
	if g.MIG != nodeprobe.MIGEnabled || g.UtilizationPct != nil || len(g.MIGDevices) != 3 {
		t.Fatalf("GPU 0: mig %s, util %v, %d instances; want enabled, unknown, 3", g.MIG, g.UtilizationPct, len(g.MIGDevices))
	}
	seen := map[string]bool{}
	for k, d := range g.MIGDevices {
		if !strings.HasPrefix(d.UUID, "MIG-") || len(d.UUID) != len("MIG-")+36 || seen[d.UUID] || d.Index != k {
			t.Errorf("instance %d: index %d uuid %q; want index %d and a fresh MIG-<uuid>", k, d.Index, d.UUID, k)
		}
		seen[d.UUID] = true
	}
	if d := g.MIGDevices[0]; d.Profile != "3g.40gb" || d.MemoryTotalMiB != 40*migMiBPerGB {
		t.Errorf("instance 0 = %+v, want 3g.40gb with %d MiB", d, 40*migMiBPerGB)
	}
	if g.Processes[0].MIGDevice != g.MIGDevices[1].UUID || g.MIGDevices[1].MemoryUsedMiB != 5000 || g.MIGDevices[0].MemoryUsedMiB != 0 {
		t.Errorf("process on %q, instance memory %d/%d; want it on instance 1, which uses 5000 MiB", g.Processes[0].MIGDevice, g.MIGDevices[1].MemoryUsedMiB, g.MIGDevices[0].MemoryUsedMiB)
	}
	if snap.GPUs[1].MIG != nodeprobe.MIGUnsupported || snap.GPUs[1].UtilizationPct == nil {
		t.Errorf("GPU 1 (L4) mig %s util %v, want unsupported with a reading", snap.GPUs[1].MIG, snap.GPUs[1].UtilizationPct)
	}
	// Snapshots own their instances.
	snap.GPUs[0].MIGDevices[0].Profile = "changed"
	again, _ := s.Snapshot(context.Background())
	if again.GPUs[0].MIGDevices[0].Profile != "3g.40gb" {
		t.Error("changing a snapshot's MIG devices changed the simulator")
	}
}

func TestSimMIGLoadNamesInstance(t *testing.T) {
	s := newTestSim(t, "1xA100-80GB:mig=3g.40gb+1g.10gb,1xL4", "", nil)
	zero, five := 0, 5
	for _, tt := range []struct {
		gpu     int
		mig     *int
		wantErr string
	}{
		{0, nil, "say which one"},
		{0, &five, "no such MIG instance"},
		{1, &zero, "not split into MIG"},
	} {
		err := s.SetLoad(Load{GPUs: map[int]GPULoad{tt.gpu: {Processes: []LoadProcess{{PID: 1, UsedMemoryMiB: 1, MIG: tt.mig}}}}})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("gpu %d mig %v: error %v, want %q", tt.gpu, tt.mig, err, tt.wantErr)
		}
	}
}
