//go:build linux && cgo && nvml

package nvml

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// The tests in this file read a real NVIDIA driver and compare what dibs
// sees with what nvidia-smi prints. They run only when asked, on a machine
// with a GPU: go test -c ./nodeprobe/nvml, then on that machine
// ./nvml.test -test.v -test.run Hardware -nvml.hardware
// (scripts/gpu-check.sh does this and more; docs/probe.md says what it checks).
var hardware = flag.Bool("nvml.hardware", false, "run the tests that need a real NVIDIA GPU and nvidia-smi")

func needHardware(t testing.TB) {
	t.Helper()
	if !*hardware {
		t.Skip("needs a real NVIDIA GPU: run with -nvml.hardware on a GPU machine (scripts/gpu-check.sh)")
	}
}

// smiRows runs nvidia-smi --query-X=fields and splits its CSV answer.
func smiRows(t testing.TB, query, fields string) [][]string {
	t.Helper()
	out, err := exec.Command("nvidia-smi", "--query-"+query+"="+fields, "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("nvidia-smi --query-%s: %v", query, err)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.HasPrefix(line, "No running") {
			continue
		}
		cols := strings.Split(line, ",")
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		rows = append(rows, cols)
	}
	return rows
}

func openHardware(t testing.TB) nodeprobe.Probe {
	t.Helper()
	p, err := Open(context.Background(), nodeprobe.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestHardwareAgreesWithNvidiaSMI: every GPU nvidia-smi lists, dibs lists
// with the same index, UUID, name, bus id, memory size, memory used and MIG
// mode.
func TestHardwareAgreesWithNvidiaSMI(t *testing.T) {
	needHardware(t)
	snap := snapshot(t, openHardware(t))
	rows := smiRows(t, "gpu", "index,uuid,name,pci.bus_id,memory.total,mig.mode.current,memory.used")
	if len(rows) == 0 || len(snap.GPUs) != len(rows) {
		t.Fatalf("dibs sees %d GPUs, nvidia-smi %d", len(snap.GPUs), len(rows))
	}
	for i, r := range rows {
		g := snap.GPUs[i]
		t.Logf("GPU %d: %s %s %s %d/%d MiB used, MIG %s, util %v%%, %v C, %v/%v W, %d links",
			g.Index, g.Model, g.UUID, g.PCIBusID, g.MemoryUsedMiB, g.MemoryTotalMiB, g.MIG,
			shown(g.UtilizationPct), shown(g.TemperatureC), shown(g.PowerDrawW), shown(g.PowerLimitW), len(g.Links))
		mib, _ := strconv.ParseUint(r[4], 10, 64)
		mig := map[string]nodeprobe.MIGMode{"Enabled": nodeprobe.MIGEnabled, "Disabled": nodeprobe.MIGDisabled}[r[5]]
		if mig == "" {
			mig = nodeprobe.MIGUnsupported
		}
		want := []struct{ field, dibs, smi string }{
			{"index", strconv.Itoa(g.Index), r[0]},
			{"uuid", g.UUID, r[1]},
			{"name", g.Model, r[2]},
			{"bus id", normBusID(g.PCIBusID), normBusID(r[3])},
			{"memory MiB", strconv.FormatUint(g.MemoryTotalMiB, 10), strconv.FormatUint(mib, 10)},
			{"MIG mode", string(g.MIG), string(mig)},
		}
		for _, w := range want {
			if w.dibs != w.smi {
				t.Errorf("GPU %d %s: dibs %q, nvidia-smi %q", i, w.field, w.dibs, w.smi)
			}
		}
		// Used memory is read a moment apart by each, so it may move a
		// little; the driver's reserve (hundreds of MiB) must not show.
		const slackMiB = 16
		if used, err := strconv.ParseUint(r[6], 10, 64); err != nil {
			t.Errorf("GPU %d memory.used %q from nvidia-smi: %v", i, r[6], err)
		} else if d := int64(g.MemoryUsedMiB) - int64(used); d < -slackMiB || d > slackMiB {
			t.Errorf("GPU %d memory used: dibs %d MiB, nvidia-smi %d MiB (more than %d MiB apart)", i, g.MemoryUsedMiB, used, slackMiB)
		}
		if g.Error != "" || g.TemperatureC == nil || g.PowerDrawW == nil {
			t.Errorf("GPU %d not fully read: error %q, temperature %v, power %v", i, g.Error, g.TemperatureC, g.PowerDrawW)
		}
	}
}

// TestHardwareSeesAProcessAndItsOwner starts a CUDA program (PyTorch
// holding 1 GiB) and checks that dibs lists it on the GPU nvidia-smi puts
// it on, with the memory nvidia-smi gives, owned by the user who started
// it. This is what the board's "who runs what" rests on.
func TestHardwareSeesAProcessAndItsOwner(t *testing.T) {
	needHardware(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 with torch to start a CUDA process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-c",
		"import torch,time; x=torch.empty(1<<30,dtype=torch.uint8,device='cuda:0'); torch.cuda.synchronize(); print('ready',flush=True); time.sleep(120)")
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start python3: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("CUDA program did not start: %q, %v", line, err)
	}

	p := openHardware(t)
	snap := snapshot(t, p)
	smi := smiRows(t, "compute-apps", "gpu_uuid,pid,used_memory")
	t.Logf("our child is pid %d; nvidia-smi lists %v", cmd.Process.Pid, smi)
	var ours []nodeprobe.Process
	for _, g := range snap.GPUs {
		for _, pr := range g.Processes {
			t.Logf("dibs: GPU %d pid %d user %q uid %d %d MiB %q", g.Index, pr.PID, pr.User, pr.UID, pr.UsedMemoryMiB, pr.Command)
			if pr.PID == cmd.Process.Pid {
				ours = append(ours, pr)
			}
		}
	}
	// Same processes as nvidia-smi, on the same GPUs, with the same memory.
	byKey := map[string]uint64{}
	for _, g := range snap.GPUs {
		for _, pr := range g.Processes {
			byKey[g.UUID+"/"+strconv.Itoa(pr.PID)] = pr.UsedMemoryMiB
		}
	}
	for _, r := range smi {
		mib, _ := strconv.ParseUint(r[2], 10, 64)
		got, ok := byKey[r[0]+"/"+r[1]]
		if !ok {
			t.Errorf("nvidia-smi lists pid %s on %s; dibs does not", r[1], r[0])
		} else if got != mib {
			t.Errorf("pid %s: dibs says %d MiB, nvidia-smi %d MiB", r[1], got, mib)
		}
	}
	if len(byKey) != len(smi) {
		t.Errorf("dibs lists %d processes, nvidia-smi %d", len(byKey), len(smi))
	}
	if len(ours) != 1 {
		t.Fatalf("dibs lists our CUDA program (pid %d) %d times", cmd.Process.Pid, len(ours))
	}
	me := os.Getuid()
	if ours[0].UID != me || ours[0].UsedMemoryMiB < 1024 || !strings.Contains(ours[0].Command, "python3") {
		t.Errorf("our program as dibs shows it: %+v; want uid %d, at least 1024 MiB, command python3", ours[0], me)
	}
}

// BenchmarkHardwareSnapshot is one probe of the real driver: the cost of
// the agent's once-a-second read, NVML calls and /proc included.
func BenchmarkHardwareSnapshot(b *testing.B) {
	needHardware(b)
	p := openHardware(b)
	ctx := context.Background()
	if _, err := p.Snapshot(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func shown[T any](p *T) any {
	if p == nil {
		return "n/a"
	}
	return *p
}
