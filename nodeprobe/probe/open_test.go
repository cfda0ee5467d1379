package probe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestOpenOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts nodeprobe.Options
		want string
	}{
		{"unknown backend", nodeprobe.Options{Backend: "cuda"}, "unknown backend"},
		{"load without spec", nodeprobe.Options{SimLoad: "x.json"}, "--sim-load needs --sim"},
		{"spec with nvml", nodeprobe.Options{Backend: nodeprobe.BackendNVML, Sim: "1xL4"}, "cannot be combined with backend nvml"},
		{"sim without spec", nodeprobe.Options{Backend: nodeprobe.BackendSim}, "needs a spec"},
		{"bad spec", nodeprobe.Options{Sim: "2xK80"}, "unknown model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Open(context.Background(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error = %v (probe %v), want one containing %q", err, p, tt.want)
			}
		})
	}
}

func TestOpenAutoPicksSimWithSpec(t *testing.T) {
	for _, b := range []nodeprobe.Backend{"", nodeprobe.BackendAuto, nodeprobe.BackendSim} {
		p, err := Open(context.Background(), nodeprobe.Options{Backend: b, Sim: "2xL4", HostName: "demo1"})
		if err != nil {
			t.Fatalf("backend %q: %v", b, err)
		}
		snap, err := p.Snapshot(context.Background())
		if err != nil || p.Backend() != nodeprobe.BackendSim || len(snap.GPUs) != 2 || snap.Host.Name != "demo1" {
			t.Errorf("backend %q: got %s with %d gpus on %q (%v), want sim with 2 on demo1", b, p.Backend(), len(snap.GPUs), snap.Host.Name, err)
		}
		p.Close()
	}
}

// fakeSMI puts a shell-script nvidia-smi that prints the fixtures first in
// PATH, so the real runner, LookPath and parsers are exercised together.
func fakeSMI(t *testing.T, gpuFixture, appsFixture string) {
	t.Helper()
	dir := t.TempDir()
	abs := func(n string) string {
		p, err := filepath.Abs(filepath.Join("..", "smi", "testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"--query-gpu=*) cat '" + abs(gpuFixture) + "' ;;\n" +
		"--query-compute-apps=*) cat '" + abs(appsFixture) + "' ;;\n" +
		"*) echo \"unexpected $*\"; exit 2 ;;\nesac\n"
	writeFile(t, filepath.Join(dir, "nvidia-smi"), script)
	if err := os.Chmod(filepath.Join(dir, "nvidia-smi"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+"/bin:/usr/bin")
}

func TestOpenNvidiaSMIThroughPATH(t *testing.T) {
	fakeSMI(t, "h100x8-gpu.csv", "h100x8-apps.csv")
	var logs []string
	p, err := Open(context.Background(), nodeprobe.Options{
		Backend:  nodeprobe.BackendNvidiaSMI,
		ProcRoot: filepath.Join("..", "procfs", "testdata", "proc"),
		Logf:     func(f string, a ...any) { logs = append(logs, f) },
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer p.Close()
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend() != nodeprobe.BackendNvidiaSMI || len(snap.GPUs) != 8 || len(snap.GPUs[0].Processes) != 1 {
		t.Errorf("got %s, %d gpus, gpu 0 processes %+v; want nvidia-smi, 8, one process", p.Backend(), len(snap.GPUs), snap.GPUs[0].Processes)
	}
	if len(logs) != 0 {
		t.Errorf("logged %q, want nothing", logs)
	}
}

func TestOpenAutoWithoutBackends(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var logs []string
	p, err := Open(context.Background(), nodeprobe.Options{Logf: func(f string, a ...any) { logs = append(logs, f) }})
	if err == nil {
		p.Close()
		t.Skip("this host has NVML; the no-backend message cannot be shown here")
	}
	msg := err.Error()
	for _, want := range []string{"no GPU backend: NVML: ", "; nvidia-smi: not in PATH", "--sim 8xH100-80GB", `sim = "8xH100-80GB"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans lines, want one", msg)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "trying nvidia-smi") {
		t.Errorf("logs = %q, want one line about falling back to nvidia-smi", logs)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
