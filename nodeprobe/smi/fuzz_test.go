package smi

import (
	"strings"
	"testing"
)

// The nvidia-smi parsers read another program's output; they must never
// panic, whatever it prints, and what they accept must be well-formed.

func addFixtureSeeds(f *testing.F, files ...string) {
	for _, name := range files {
		f.Add(readFixture(f, name))
	}
}

func FuzzParseQueryGPU(f *testing.F) {
	addFixtureSeeds(f, "h100x8-gpu.csv", "a100-mig-gpu.csv", "consumer-gpu.csv")
	f.Add([]byte(""))
	f.Add([]byte(`0, "GPU-a", "00000000:01:00.0", "NVIDIA L4, quoted", 1, 1, 1, 1, 1.5, 2, [N/A], 1`))
	f.Add([]byte("0, GPU-a, [N/A], NVIDIA L4, N/A, [Not Supported], N/A, N/A, N/A, N/A, N/A, N/A\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gpus, _, err := parseQueryGPU(data)
		if err != nil {
			if gpus != nil {
				t.Fatalf("error %v came with %d gpus", err, len(gpus))
			}
			return
		}
		if len(data) > maxSMIOutput {
			t.Fatalf("accepted %d bytes, over the %d limit", len(data), maxSMIOutput)
		}
		seen := map[int]bool{}
		for _, g := range gpus {
			if g.UUID == "" || strings.ContainsAny(g.UUID, " \t\r\n,") {
				t.Fatalf("accepted uuid %q", g.UUID)
			}
			if g.Model == "" || seen[g.Index] || g.Index < 0 {
				t.Fatalf("accepted gpu %+v (seen %v)", g, seen)
			}
			seen[g.Index] = true
			if u := g.UtilizationPct; u != nil && (*u < 0 || *u > 100) {
				t.Fatalf("accepted utilization %d", *u)
			}
			if p := g.PowerDrawW; p != nil && !(*p >= 0) {
				t.Fatalf("accepted power %v", *p)
			}
		}
	})
}

func FuzzParseComputeApps(f *testing.F) {
	addFixtureSeeds(f, "h100x8-apps.csv", "a100-mig-apps.csv", "consumer-apps.csv")
	f.Add([]byte("No running processes found\n"))
	f.Add([]byte(`GPU-a, 1, "a ""b"", c", 3`))
	f.Fuzz(func(t *testing.T, data []byte) {
		apps, err := parseComputeApps(data)
		if err != nil {
			return
		}
		if len(data) > maxSMIOutput {
			t.Fatalf("accepted %d bytes, over the %d limit", len(data), maxSMIOutput)
		}
		for _, a := range apps {
			if a.pid <= 0 || a.gpuUUID == "" {
				t.Fatalf("accepted app %+v", a)
			}
		}
	})
}

func FuzzParseListGPUs(f *testing.F) {
	addFixtureSeeds(f, "a100-mig-list.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		migs, err := parseListGPUs(data)
		if err != nil {
			return
		}
		for _, m := range migs {
			if m.gpuUUID == "" || m.dev.UUID == "" || m.dev.Profile == "" {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}
