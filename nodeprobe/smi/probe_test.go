package smi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// procRoot is the fake /proc the procfs package's tests read; its processes
// run in the containers hexID1 and hexID2.
var procRoot = filepath.Join("..", "procfs", "testdata", "proc")

const (
	hexID1 = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
	hexID2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// fixtureRunner answers nvidia-smi invocations from testdata files, keyed by
// the first argument's query name.
type fixtureRunner struct {
	t     *testing.T
	files map[string]string // "gpu", "apps", "list" -> fixture name
	errs  map[string]error
	calls []string
}

func (f *fixtureRunner) run(_ context.Context, name string, args ...string) ([]byte, error) {
	key := ""
	switch {
	case len(args) > 0 && strings.HasPrefix(args[0], "--query-gpu="+queryGPUFields):
		key = "gpu"
	case len(args) > 0 && strings.HasPrefix(args[0], "--query-compute-apps="+queryAppsFields):
		key = "apps"
	case len(args) == 1 && args[0] == "-L":
		key = "list"
	default:
		f.t.Fatalf("unexpected command %s %q", name, args)
	}
	if len(args) > 1 && args[1] != "--format=csv,noheader,nounits" {
		f.t.Fatalf("%s: format %q", key, args[1])
	}
	f.calls = append(f.calls, key)
	if err := f.errs[key]; err != nil {
		return nil, err
	}
	return readFixture(f.t, f.files[key]), nil
}

func smiTestOptions(logs *[]string) nodeprobe.Options {
	return nodeprobe.Options{
		HostName: "node01",
		ProcRoot: procRoot,
		SysRoot:  filepath.Join("testdata", "no-sysfs"), // no GPU's locality known
		Now:      func() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) },
		Logf:     func(f string, a ...any) { *logs = append(*logs, f) },
	}.WithDefaults()
}

func TestSMIProbeSnapshot(t *testing.T) {
	type proc struct {
		gpu, pid  int
		uid       int
		command   string
		mem       uint64
		container string
	}
	tests := []struct {
		name      string
		files     map[string]string
		errs      map[string]error
		gpus      int
		procs     []proc
		migs      map[int]int // gpu -> MIG devices
		wantCalls string
		wantLogs  int
	}{
		{
			name:  "8xH100 with processes",
			files: map[string]string{"gpu": "h100x8-gpu.csv", "apps": "h100x8-apps.csv"},
			gpus:  8,
			procs: []proc{
				{0, 4242, 1001, "python3", 30000, ""},
				{1, 4243, 1001, "python3", 30000, hexID1[:12]},
				{4, 5151, 1002, "python", 1012, hexID2[:12]},
			},
			wantCalls: "gpu gpu apps",
		},
		{
			name:  "MIG A100 lists MIG devices",
			files: map[string]string{"gpu": "a100-mig-gpu.csv", "apps": "a100-mig-apps.csv", "list": "a100-mig-list.txt"},
			gpus:  2,
			procs: []proc{
				{0, 7001, 0, "python", 18000, "aabbccddeeff"},
				{0, 7002, -1, "", 0, ""}, // not in the fake /proc, no name from nvidia-smi
			},
			migs:      map[int]int{0: 3},
			wantCalls: "gpu gpu apps list",
		},
		{
			name:      "failing process query keeps the gpus",
			files:     map[string]string{"gpu": "consumer-gpu.csv"},
			errs:      map[string]error{"apps": errors.New("exit status 1")},
			gpus:      2,
			wantCalls: "gpu gpu apps",
			wantLogs:  1,
		},
		{
			name:      "consumer card, vanished pids keep nvidia-smi's names",
			files:     map[string]string{"gpu": "consumer-gpu.csv", "apps": "consumer-apps.csv"},
			gpus:      2,
			procs:     []proc{{0, 3130, -1, "python", 200, ""}, {0, 3131, -1, "Xorg", 0, ""}},
			wantCalls: "gpu gpu apps",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs []string
			fr := &fixtureRunner{t: t, files: tt.files, errs: tt.errs}
			p, err := newSMIProbe(context.Background(), "nvidia-smi", fr.run, smiTestOptions(&logs))
			if err != nil {
				t.Fatalf("newSMIProbe: %v", err)
			}
			snap, err := p.Snapshot(context.Background())
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			if got := strings.Join(fr.calls, " "); got != tt.wantCalls {
				t.Errorf("nvidia-smi calls = %q, want %q", got, tt.wantCalls)
			}
			if len(snap.GPUs) != tt.gpus || snap.Host.Name != "node01" || snap.Host.Backend != nodeprobe.BackendNvidiaSMI || snap.Host.DriverVersion == "" {
				t.Errorf("got %d gpus, host %+v; want %d gpus on node01 via nvidia-smi with a driver version", len(snap.GPUs), snap.Host, tt.gpus)
			}
			if !snap.TakenAt.Equal(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)) {
				t.Errorf("TakenAt = %v, want the injected clock", snap.TakenAt)
			}
			var got []proc
			for _, g := range snap.GPUs {
				for _, pr := range g.Processes {
					got = append(got, proc{g.Index, pr.PID, pr.UID, pr.Command, pr.UsedMemoryMiB, pr.Container})
				}
				if want := tt.migs[g.Index]; len(g.MIGDevices) != want {
					t.Errorf("gpu %d: %d MIG devices, want %d", g.Index, len(g.MIGDevices), want)
				}
			}
			if len(got) != len(tt.procs) {
				t.Fatalf("processes = %+v, want %+v", got, tt.procs)
			}
			for i := range got {
				if got[i] != tt.procs[i] {
					t.Errorf("process %d = %+v, want %+v", i, got[i], tt.procs[i])
				}
			}
			if len(logs) != tt.wantLogs {
				t.Errorf("logged %q, want %d lines", logs, tt.wantLogs)
			}
		})
	}
}

func TestSMIProbeOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		run  commandRunner
		want string
	}{
		{"driver down", func(context.Context, string, ...string) ([]byte, error) {
			return nil, errors.New("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: exit status 9")
		}, "nvidia-smi: NVIDIA-SMI has failed"},
		{"no gpus", func(context.Context, string, ...string) ([]byte, error) { return nil, nil }, "nvidia-smi: no GPUs listed"},
		{"garbage", func(context.Context, string, ...string) ([]byte, error) { return []byte("what, is, this"), nil }, "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs []string
			_, err := newSMIProbe(context.Background(), "nvidia-smi", tt.run, smiTestOptions(&logs))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRunCommand(t *testing.T) {
	// A runaway program's output is cut at the parsers' limit plus one
	// byte, which they refuse, however much it prints.
	if out, err := runCommand(context.Background(), "sh", "-c", "head -c 5000000 /dev/zero"); err != nil || len(out) != maxSMIOutput+1 {
		t.Errorf("runCommand of 5 MB = %d bytes, %v; want %d (the limit and one)", len(out), err, maxSMIOutput+1)
	}
	out, err := runCommand(context.Background(), "sh", "-c", "echo hello")
	if err != nil || string(out) != "hello\n" {
		t.Errorf("runCommand(echo) = %q, %v; want \"hello\\n\", nil", out, err)
	}
	_, err = runCommand(context.Background(), "sh", "-c", "echo 'driver is sad'; echo more; exit 9")
	if err == nil || !strings.HasPrefix(err.Error(), "driver is sad: exit status 9") {
		t.Errorf("runCommand(failing) error = %v, want the first line then the exit status", err)
	}
}

// TestSMILocalCPUsFromSysfs: the nvidia-smi backend gives each GPU the
// local CPUs and NUMA node sysfs keeps under its PCI bus id; a GPU sysfs
// says nothing of (no directory, numa_node -1) reports none.
func TestSMILocalCPUsFromSysfs(t *testing.T) {
	sys := t.TempDir()
	for id, files := range map[string][2]string{
		"0000:1b:00.0": {"0-31,64-95\n", "0\n"},
		"0000:43:00.0": {"0-31,64-95\n", "-1\n"},
	} {
		dir := filepath.Join(sys, "bus", "pci", "devices", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"local_cpulist": files[0], "numa_node": files[1]} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var logs []string
	opts := smiTestOptions(&logs)
	opts.SysRoot = sys
	fr := &fixtureRunner{t: t, files: map[string]string{"gpu": "h100x8-gpu.csv", "apps": "h100x8-apps.csv"}}
	p, err := newSMIProbe(context.Background(), "nvidia-smi", fr.run, opts)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := snap.GPUs
	if g[0].CPUs != "0-31,64-95" || g[0].NUMANode == nil || *g[0].NUMANode != 0 {
		t.Errorf("GPU 0: cpus %q numa %v, want 0-31,64-95 on node 0", g[0].CPUs, g[0].NUMANode)
	}
	if g[1].CPUs != "0-31,64-95" || g[1].NUMANode != nil {
		t.Errorf("GPU 1: cpus %q numa %v, want 0-31,64-95 and no node (sysfs says -1)", g[1].CPUs, g[1].NUMANode)
	}
	if g[2].CPUs != "" || g[2].NUMANode != nil {
		t.Errorf("GPU 2: cpus %q numa %v, want none (sysfs has no such device)", g[2].CPUs, g[2].NUMANode)
	}
	if len(logs) != 0 {
		t.Errorf("logs %q: a device sysfs does not list is not worth a line", logs)
	}
	for in, want := range map[string]string{"00000000:1B:00.0": "0000:1b:00.0", "0000:C1:00.0": "0000:c1:00.0", "00010000:1B:00.0": "", "junk": "", "00000000:../x": ""} {
		if got := sysfsBusID(in); got != want {
			t.Errorf("sysfsBusID(%q) = %q, want %q", in, got, want)
		}
	}
}
