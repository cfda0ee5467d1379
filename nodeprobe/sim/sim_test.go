package sim

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

var simTime = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newTestSim(t testing.TB, spec, loadFile string, logs *[]string) *Sim {
	t.Helper()
	var mu sync.Mutex
	s, err := New(Options{
		Spec:     spec,
		LoadFile: loadFile,
		HostName: "simnode",
		Now:      func() time.Time { return simTime },
		Logf: func(f string, a ...any) {
			if logs != nil {
				mu.Lock()
				*logs = append(*logs, f)
				mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatalf("New(%q): %v", spec, err)
	}
	return s
}

func TestParseSimSpec(t *testing.T) {
	tests := []struct {
		spec    string
		want    []string // model names, in order
		wantErr string
	}{
		{"8xH100-80GB", repeat("NVIDIA H100 80GB HBM3", 8), ""},
		{"2xh100", repeat("NVIDIA H100 80GB HBM3", 2), ""},
		{"4xRTX-PRO-6000,2xL40S", append(repeat("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 4), repeat("NVIDIA L40S", 2)...), ""},
		{" 1X A100-40GB , L4 ", []string{"NVIDIA A100-SXM4-40GB", "NVIDIA L4"}, ""},
		{"H200", []string{"NVIDIA H200"}, ""},
		{"RTX-5090", []string{"NVIDIA GeForce RTX 5090"}, ""},
		{"", nil, "empty"},
		{"8xFOO", nil, "unknown model \"FOO\"; known models: B200, H200, H100-80GB, H100,"},
		{"0xH100", nil, "count"},
		{"999xH100", nil, "count"},
		{"200xH100,200xL4", nil, "more than 256"},
		{"8H100", nil, "not count x model"},
		{"8x", nil, "unknown model"},
		{"H100,,L4", nil, "unknown model \"\""},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			models, err := parseSimSpec(tt.spec)
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
			for _, m := range models {
				got = append(got, m.name)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("models = %q, want %q", got, tt.want)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestSimModelsMemory(t *testing.T) {
	want := map[string]uint64{
		"H100-80GB": 81559, "H100": 81559, "H200": 143771, "A100-80GB": 81920, "A100-40GB": 40960,
		"L40S": 46068, "L4": 23034, "RTX-PRO-6000": 97887, "RTX-5090": 32607, "RTX-4090": 24564,
		"A10G": 23028, "V100": 32768,
	}
	known := simModels()
	for name, mib := range want {
		m, ok := findSimModel(known, name)
		if !ok || m.memMiB != mib {
			t.Errorf("model %s: found %v with %d MiB, want %d MiB", name, ok, m.memMiB, mib)
		}
	}
}

func TestSimIdentityIsDeterministic(t *testing.T) {
	a := newTestSim(t, "4xL4", "", nil)
	b := newTestSim(t, "4xL4", "", nil)
	sa, _ := a.Snapshot(context.Background())
	sb, _ := b.Snapshot(context.Background())
	seen := map[string]bool{}
	for i := range sa.GPUs {
		if sa.GPUs[i].UUID != sb.GPUs[i].UUID {
			t.Errorf("gpu %d: uuid %s then %s, want the same for the same host", i, sa.GPUs[i].UUID, sb.GPUs[i].UUID)
		}
		if seen[sa.GPUs[i].UUID] || len(sa.GPUs[i].UUID) != len("GPU-")+36 {
			t.Errorf("gpu %d: uuid %s repeated or malformed", i, sa.GPUs[i].UUID)
		}
		seen[sa.GPUs[i].UUID] = true
	}
	if simUUID("node01", 0) == simUUID("node02", 0) {
		t.Error("two hosts share gpu 0's uuid")
	}
	if !sa.TakenAt.Equal(simTime) || sa.Host.Name != "simnode" || sa.Host.Backend != nodeprobe.BackendSim {
		t.Errorf("snapshot at %v on %+v, want the injected clock and host", sa.TakenAt, sa.Host)
	}
}

func TestSimTopology(t *testing.T) {
	tests := []struct {
		spec string
		a, b int
		want nodeprobe.LinkKind
		nv   int
	}{
		{"8xH100", 0, 7, nodeprobe.LinkNVLink, 18},
		{"8xA100-80GB", 3, 4, nodeprobe.LinkNVLink, 12},
		{"16xH100", 0, 7, nodeprobe.LinkNVLink, 18},
		{"16xH100", 7, 8, nodeprobe.LinkSystem, 0}, // two boards, two sockets
		{"8xL40S", 0, 1, nodeprobe.LinkSingleSwitch, 0},
		{"8xL40S", 0, 2, nodeprobe.LinkNUMA, 0},
		{"8xL40S", 0, 4, nodeprobe.LinkSystem, 0},
		{"8xV100", 0, 3, nodeprobe.LinkNVLink, 6},
		{"8xV100", 3, 4, nodeprobe.LinkSystem, 0},
		{"8xV100", 4, 7, nodeprobe.LinkNVLink, 6},
		{"4xRTX-PRO-6000,2xL40S", 2, 3, nodeprobe.LinkSingleSwitch, 0},
		{"4xRTX-PRO-6000,2xL40S", 4, 5, nodeprobe.LinkSingleSwitch, 0},
		{"4xRTX-PRO-6000,2xL40S", 0, 5, nodeprobe.LinkSystem, 0},
		{"2xH100,2xH200", 1, 2, nodeprobe.LinkSystem, 0}, // different boards
		{"4xH100,4xH200", 1, 2, nodeprobe.LinkNVLink, 18},
		{"4xH100,4xL40S", 4, 6, nodeprobe.LinkNUMA, 0},
		{"4xH100,4xL40S", 1, 2, nodeprobe.LinkNVLink, 18},
	}
	for _, tt := range tests {
		s := newTestSim(t, tt.spec, "", nil)
		snap, err := s.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got nodeprobe.Link
		for _, l := range snap.GPUs[tt.a].Links {
			if l.Peer == tt.b {
				got = l
			}
		}
		if got.Kind != tt.want || got.NVLinks != tt.nv {
			t.Errorf("%s: link %d-%d = %+v, want %s with %d nvlinks", tt.spec, tt.a, tt.b, got, tt.want, tt.nv)
		}
		for _, g := range snap.GPUs {
			if len(g.Links) != len(snap.GPUs)-1 {
				t.Errorf("%s: gpu %d has %d links, want one per peer", tt.spec, g.Index, len(g.Links))
			}
		}
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSimLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.json")
	writeFile(t, path, `{"gpus":{"0":{"utilization_pct":95,"memory_used_mib":30000,
		"processes":[{"pid":4242,"user":"root","command":"python","used_memory_mib":30000}]}}}`)
	var logs []string
	s := newTestSim(t, "8xH100-80GB", path, &logs)
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := snap.GPUs[0]
	if *g.UtilizationPct != 95 || g.MemoryUsedMiB != 30000 || len(g.Processes) != 1 {
		t.Fatalf("gpu 0 = util %d, mem %d, %d procs; want 95, 30000, 1", *g.UtilizationPct, g.MemoryUsedMiB, len(g.Processes))
	}
	if p := g.Processes[0]; p.PID != 4242 || p.User != "root" || p.UID != 0 || p.Command != "python" {
		t.Errorf("process = %+v, want pid 4242 of root (uid 0) running python", p)
	}
	if *g.PowerDrawW <= *snap.GPUs[1].PowerDrawW || *g.TemperatureC <= *snap.GPUs[1].TemperatureC {
		t.Errorf("busy gpu 0 draws %vW at %dC, idle gpu 1 %vW at %dC; want the busy one hotter", *g.PowerDrawW, *g.TemperatureC, *snap.GPUs[1].PowerDrawW, *snap.GPUs[1].TemperatureC)
	}
	if u := snap.GPUs[1]; *u.UtilizationPct != 0 || u.MemoryUsedMiB != 0 || u.Processes == nil || len(u.Processes) != 0 {
		t.Errorf("unlisted gpu 1 = %+v, want idle with an empty process list", u)
	}

	// The file is re-read at every probe.
	writeFile(t, path, `{"gpus":{"1":{"utilization_pct":40,"processes":[{"pid":1,"user":"no-such-user-dibs","used_memory_mib":512}]}}}`)
	snap, _ = s.Snapshot(context.Background())
	if *snap.GPUs[0].UtilizationPct != 0 || *snap.GPUs[1].UtilizationPct != 40 || snap.GPUs[1].MemoryUsedMiB != 512 {
		t.Errorf("after rewrite: util %d/%d mem1 %d; want 0/40 and memory from the processes", *snap.GPUs[0].UtilizationPct, *snap.GPUs[1].UtilizationPct, snap.GPUs[1].MemoryUsedMiB)
	}
	if p := snap.GPUs[1].Processes[0]; p.UID != -1 || p.User != "no-such-user-dibs" {
		t.Errorf("unknown user's process = %+v, want uid -1 and the name kept", p)
	}

	// A bad file is reported once, and the previous load stays.
	bad := []struct{ name, content, want string }{
		{"unknown field", `{"gpus":{"0":{"utilisation_pct":10}}}`, "unknown field"},
		{"syntax", `{"gpus":`, "decode"},
		{"trailing data", `{"gpus":{}} {}`, "after the JSON"},
		{"gpu out of range", `{"gpus":{"8":{"utilization_pct":1}}}`, "gpu 8: no such gpu"},
		{"utilization over 100", `{"gpus":{"0":{"utilization_pct":101}}}`, "utilization_pct"},
		{"memory over total", `{"gpus":{"0":{"memory_used_mib":90000}}}`, "exceeds"},
		{"processes over total", `{"gpus":{"0":{"processes":[{"pid":1,"used_memory_mib":50000},{"pid":2,"used_memory_mib":50000}]}}}`, "exceeds"},
		{"bad pid", `{"gpus":{"0":{"processes":[{"pid":0}]}}}`, "pid 0"},
		{"too large", `{"gpus":{}}` + strings.Repeat(" ", maxLoadFile), "larger than"},
	}
	for _, tt := range bad {
		logs = nil
		writeFile(t, path, tt.content)
		for range 3 {
			snap, err = s.Snapshot(context.Background())
		}
		if err != nil {
			t.Fatalf("%s: Snapshot failed: %v; a bad load file must not fail the probe", tt.name, err)
		}
		if len(logs) != 1 {
			t.Errorf("%s: logged %d lines over 3 probes, want 1", tt.name, len(logs))
		}
		if lerr := s.LoadErr(); lerr == nil || !strings.Contains(lerr.Error(), tt.want) {
			t.Errorf("%s: LoadErr = %v, want one containing %q", tt.name, lerr, tt.want)
		}
		if *snap.GPUs[1].UtilizationPct != 40 {
			t.Errorf("%s: gpu 1 util = %d, want the previous load's 40", tt.name, *snap.GPUs[1].UtilizationPct)
		}
	}
	writeFile(t, path, `{"gpus":{}}`)
	s.Snapshot(context.Background())
	if err := s.LoadErr(); err != nil {
		t.Errorf("LoadErr after a good file = %v, want nil", err)
	}
}

func TestSimLoadFileMissingAtStart(t *testing.T) {
	_, err := New(Options{Spec: "1xL4", LoadFile: filepath.Join(t.TempDir(), "absent.json")})
	if err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("New with a missing load file: error = %v, want one naming the file", err)
	}
}

func TestSimSetLoadAndPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.json")
	writeFile(t, path, `{"gpus":{"0":{"utilization_pct":90}}}`)
	s := newTestSim(t, "2xL40S", path, nil)
	uid := 0
	err := s.SetLoad(Load{GPUs: map[int]GPULoad{
		0: {UtilizationPct: 10},
		1: {UtilizationPct: 20, Processes: []LoadProcess{{PID: 9, UID: &uid, Command: "train", UsedMemoryMiB: 100}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Snapshot(context.Background())
	if *snap.GPUs[0].UtilizationPct != 90 || *snap.GPUs[1].UtilizationPct != 20 {
		t.Errorf("util = %d/%d, want 90 (file wins) / 20 (scripted)", *snap.GPUs[0].UtilizationPct, *snap.GPUs[1].UtilizationPct)
	}
	root, err := user.LookupId("0")
	if err != nil {
		t.Skipf("no account for uid 0: %v", err)
	}
	if p := snap.GPUs[1].Processes[0]; p.UID != 0 || p.User != root.Username {
		t.Errorf("scripted process = %+v, want uid 0 named %s", p, root.Username)
	}
	if err := s.SetLoad(Load{GPUs: map[int]GPULoad{5: {}}}); err == nil || !strings.Contains(err.Error(), "gpu 5") {
		t.Errorf("SetLoad for a missing gpu: error = %v, want one naming gpu 5", err)
	}
	snap, _ = s.Snapshot(context.Background())
	if *snap.GPUs[1].UtilizationPct != 20 {
		t.Errorf("after a rejected SetLoad util = %d, want the previous 20", *snap.GPUs[1].UtilizationPct)
	}
}

func TestSimSnapshotsAreIndependent(t *testing.T) {
	s := newTestSim(t, "2xH100", "", nil)
	a, _ := s.Snapshot(context.Background())
	a.GPUs[0].Links[0].Kind = "mutated"
	*a.GPUs[0].PowerLimitW = 1
	b, _ := s.Snapshot(context.Background())
	if b.GPUs[0].Links[0].Kind != nodeprobe.LinkNVLink || *b.GPUs[0].PowerLimitW != 700 {
		t.Errorf("changing one snapshot changed the next: %+v, limit %v", b.GPUs[0].Links[0], *b.GPUs[0].PowerLimitW)
	}
}

func TestSimConcurrentSetLoad(t *testing.T) {
	s := newTestSim(t, "8xH100", "", nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			if err := s.SetLoad(Load{GPUs: map[int]GPULoad{i % 8: {UtilizationPct: i % 100}}}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 200 {
		if _, err := s.Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestSimCanceledContext(t *testing.T) {
	s := newTestSim(t, "1xL4", "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Snapshot(ctx); err == nil {
		t.Error("Snapshot with a canceled context succeeded, want an error")
	}
}

// TestSimSocketsGiveEachGPUItsCores: sockets=SxC gives every GPU the cores
// of its socket, so the layers above bind sessions to them; a spec without
// the term reports none, and a bad term says what to write.
func TestSimSocketsGiveEachGPUItsCores(t *testing.T) {
	tests := []struct {
		spec string
		cpus []string
		numa []int
		host int
	}{
		{"2xH100,sockets=2x1", []string{"0", "1"}, []int{0, 1}, 2},
		{"4xH100,sockets=2x16", []string{"0-15", "0-15", "16-31", "16-31"}, []int{0, 0, 1, 1}, 32},
		{"4xL40S,sockets=4x2", []string{"0-1", "2-3", "4-5", "6-7"}, []int{0, 1, 2, 3}, 8},
		{"2xH100", []string{"", ""}, nil, 32},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s, err := New(Options{Spec: tt.spec, HostName: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := s.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if snap.Host.CPUs != tt.host {
				t.Errorf("host CPUs = %d, want %d", snap.Host.CPUs, tt.host)
			}
			for i, g := range snap.GPUs {
				if g.CPUs != tt.cpus[i] {
					t.Errorf("GPU %d cpus = %q, want %q", i, g.CPUs, tt.cpus[i])
				}
				switch {
				case tt.numa == nil && g.NUMANode != nil:
					t.Errorf("GPU %d numa node = %d, want none", i, *g.NUMANode)
				case tt.numa != nil && (g.NUMANode == nil || *g.NUMANode != tt.numa[i]):
					t.Errorf("GPU %d numa node = %v, want %d", i, g.NUMANode, tt.numa[i])
				}
			}
		})
	}
	for _, bad := range []string{"2xH100,sockets=2", "2xH100,sockets=0x4", "2xH100,sockets=2x1,sockets=1x2"} {
		if _, err := New(Options{Spec: bad, HostName: "n1"}); err == nil || !strings.Contains(err.Error(), "sockets") {
			t.Errorf("New(%q) = %v, want an error about sockets", bad, err)
		}
	}
}

// TestLoadUtilizationSteps drives a known curve through the load file's
// utilization_steps, with a fixed power draw: each probe reports the step
// the time since the load took effect falls in, and repeat starts over.
func TestLoadUtilizationSteps(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Options{Spec: "2xL40S", HostName: "n", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	power := 123.0
	if err := s.SetLoad(Load{GPUs: map[int]GPULoad{
		0: {UtilizationSteps: []UtilStep{{ForS: 10, Pct: 0}, {ForS: 20, Pct: 80}}, Repeat: true, PowerW: &power},
		1: {UtilizationSteps: []UtilStep{{ForS: 5, Pct: 40}, {ForS: 5, Pct: 60}}},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after      time.Duration
		gpu0, gpu1 int
	}{{0, 0, 40}, {4 * time.Second, 0, 40}, {9 * time.Second, 0, 60}, {10 * time.Second, 80, 60}, {29 * time.Second, 80, 60}, {30 * time.Second, 0, 60}, {45 * time.Second, 80, 60}} {
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(c.after)
		snap, err := s.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := *snap.GPUs[0].UtilizationPct; got != c.gpu0 {
			t.Errorf("after %v gpu 0 reads %d %%, want %d", c.after, got, c.gpu0)
		}
		if got := *snap.GPUs[1].UtilizationPct; got != c.gpu1 {
			t.Errorf("after %v gpu 1 reads %d %%, want %d", c.after, got, c.gpu1)
		}
		if got := *snap.GPUs[0].PowerDrawW; got != power {
			t.Errorf("after %v gpu 0 draws %v W, want %v", c.after, got, power)
		}
	}
	if err := s.SetLoad(Load{GPUs: map[int]GPULoad{0: {UtilizationSteps: []UtilStep{{ForS: 1, Pct: 101}}}}}); err == nil {
		t.Error("a step of 101 % was taken")
	}
}

// TestLoadProcessSM scripts per-process SM utilization: a process given
// one reports it, a process without one reports none ("not reported", not
// 0), and a figure outside 0..100 is refused with the pid named.
func TestLoadProcessSM(t *testing.T) {
	s, err := New(Options{Spec: "1xL40S", HostName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	sm := 85
	if err := s.SetLoad(Load{GPUs: map[int]GPULoad{0: {UtilizationPct: 90, Processes: []LoadProcess{
		{PID: 10, User: "bob", Command: "train", UsedMemoryMiB: 1000, SMUtilPct: &sm},
		{PID: 11, User: "bob", Command: "eval", UsedMemoryMiB: 500},
	}}}}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ps := snap.GPUs[0].Processes
	if len(ps) != 2 || ps[0].SMUtilPct == nil || *ps[0].SMUtilPct != 85 || ps[1].SMUtilPct != nil {
		t.Errorf("processes = %+v, want pid 10 at SM 85%% and pid 11 not reported", ps)
	}
	bad := 101
	err = s.SetLoad(Load{GPUs: map[int]GPULoad{0: {Processes: []LoadProcess{{PID: 12, SMUtilPct: &bad}}}}})
	if err == nil || !strings.Contains(err.Error(), "pid 12: sm_util_pct 101 not in 0..100") {
		t.Errorf("SetLoad with SM 101%% = %v, want a refusal naming pid 12", err)
	}
	l, err := decodeLoad([]byte(`{"gpus":{"0":{"processes":[{"pid":1,"used_memory_mib":1,"sm_util_pct":40}]}}}`))
	if err != nil || *l.GPUs[0].Processes[0].SMUtilPct != 40 {
		t.Errorf("load file with sm_util_pct: %+v, %v; want it read", l, err)
	}
}
