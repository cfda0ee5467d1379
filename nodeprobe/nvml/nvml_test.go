//go:build linux && cgo && nvml

package nvml

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// procRoot is the fake /proc the procfs package's tests read; its processes
// run in the containers hexID1 and hexID2.
var procRoot = filepath.Join("..", "procfs", "testdata", "proc")

const (
	hexID1 = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
	hexID2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// stubServer fills in every device method the prober calls and the server
// mocks leave unset (unset mock methods panic): memory v2 (what MemoryInfo
// holds, nothing reserved), utilisation, temperature, power, processes, PCI
// bus id, PCIe topology (two sockets of four), no NVLink, no process
// names from NVML, and no process utilization sampling. Tests override single funcs after.
func stubServer(s *server.Server) *server.Server {
	s.SystemGetProcessNameFunc = func(int) (string, nvml.Return) { return "", nvml.ERROR_NOT_FOUND }
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			m := dev.MemoryInfo
			return nvml.Memory_v2{Total: m.Total, Free: m.Free, Used: m.Used}, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(30 + i), nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100000 + 1000*i), nvml.SUCCESS }
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(dev.PciBusID), nvml.SUCCESS }
		dev.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if dev.Index/4 == other.(*server.Device).Index/4 {
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetCpuAffinityWithinScopeFunc = func(int, nvml.AffinityScope) ([]uint, nvml.Return) {
			return socketMask(dev.Index / 4), nvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return dev.Index / 4, nvml.SUCCESS }
	}
	return s
}

// socketMask is the affinity mask of socket k of the stub's two: 32
// cores each, the second half of each hyperthreaded (cores k*32 to
// k*32+31 and 64+k*32 on, as Linux numbers a two-socket machine's
// siblings): two words of 64 bits.
func socketMask(k int) []uint {
	m := make([]uint, 128)
	m[0] = 0xffffffff << (32 * k)
	m[1] = 0xffffffff << (32 * k)
	return m
}

func pciInfo(busID string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := 0; i < len(busID) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(busID[i])
	}
	return p
}

// withNVSwitch gives every GPU n NVLinks to NVSwitches, as on HGX boards.
func withNVSwitch(s *server.Server, n int) {
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l >= n {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			return pciInfo(fmt.Sprintf("00000000:%02X:00.0", 0xe0+l%4)), nvml.SUCCESS
		}
	}
}

func testOptions(logs *[]string) nodeprobe.Options {
	return nodeprobe.Options{
		HostName: "gpu01",
		ProcRoot: procRoot,
		Now:      func() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) },
		Logf: func(f string, a ...any) {
			if logs != nil {
				*logs = append(*logs, fmt.Sprintf(f, a...))
			}
		},
	}.WithDefaults()
}

func openMock(t testing.TB, lib nvml.Interface, logs *[]string) *nvmlProbe {
	t.Helper()
	p, err := newNVMLProbe(context.Background(), lib, testOptions(logs))
	if err != nil {
		t.Fatalf("newNVMLProbe: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func snapshot(t testing.TB, p nodeprobe.Probe) nodeprobe.Snapshot {
	t.Helper()
	s, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return s
}

func TestNVMLServers(t *testing.T) {
	tests := []struct {
		name   string
		server *server.Server
		model  string
		mib    uint64
	}{
		{"dgxa100", dgxa100.New(), "Mock NVIDIA A100-SXM4-40GB", 40960},
		{"dgxh100", dgxh100.New(), "NVIDIA H100 80GB HBM3", 81920},
		{"dgxh200", dgxh200.New(), "NVIDIA H200 141GB HBM3e", 144384},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs []string
			s := stubServer(tt.server)
			snap := snapshot(t, openMock(t, s, &logs))
			h := snap.Host
			if h.Name != "gpu01" || h.Backend != nodeprobe.BackendNVML || h.DriverVersion != "550.54.15" || h.CUDAVersion != "12.4" || h.MemoryMiB == 0 {
				t.Errorf("host = %+v, want gpu01 via nvml, driver 550.54.15, CUDA 12.4, memory from the fake meminfo", h)
			}
			if len(snap.GPUs) != 8 {
				t.Fatalf("%d gpus, want 8", len(snap.GPUs))
			}
			for i, g := range snap.GPUs {
				dev := s.Devices[i].(*server.Device)
				want := fmt.Sprintf("idx %d uuid %s bus %s model %s mem %d util %d temp %d power %.0f/%.0f mig %s procs 0 err ",
					i, dev.UUID, dev.PciBusID, tt.model, tt.mib, 10*i, 30+i, 100+float64(i), 700.0, nodeprobe.MIGDisabled)
				got := fmt.Sprintf("idx %d uuid %s bus %s model %s mem %d util %d temp %d power %.0f/%.0f mig %s procs %d err %s",
					g.Index, g.UUID, g.PCIBusID, g.Model, g.MemoryTotalMiB, deref(g.UtilizationPct), deref(g.TemperatureC),
					derefF(g.PowerDrawW), derefF(g.PowerLimitW), g.MIG, len(g.Processes), g.Error)
				if got != want {
					t.Errorf("gpu %d:\n got %s\nwant %s", i, got, want)
				}
				if g.Processes == nil {
					t.Errorf("gpu %d: processes nil, want an empty list (JSON [])", i)
				}
			}
			if len(logs) != 0 {
				t.Errorf("logged %q, want nothing", logs)
			}
		})
	}
}

func deref(p *int) int {
	if p == nil {
		return -999
	}
	return *p
}

func derefF(p *float64) float64 {
	if p == nil {
		return -999
	}
	return *p
}

// TestNVMLUnknownFields makes one GPU's field fail with each error a real
// driver gives for it, and checks the GPU survives with the field unknown
// while its neighbour still reports it.
func TestNVMLUnknownFields(t *testing.T) {
	type field struct {
		name string
		// static fields are read once at open, so they are broken before it;
		// live fields are broken after a first good probe.
		static  bool
		breakIt func(d *server.Device, ret nvml.Return)
		unknown func(g nodeprobe.GPU) bool
	}
	fields := []field{
		{"utilization", false, func(d *server.Device, r nvml.Return) {
			d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, r }
		}, func(g nodeprobe.GPU) bool { return g.UtilizationPct == nil }},
		{"temperature", false, func(d *server.Device, r nvml.Return) {
			d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, r }
		}, func(g nodeprobe.GPU) bool { return g.TemperatureC == nil }},
		{"power draw", false, func(d *server.Device, r nvml.Return) {
			d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, r }
		}, func(g nodeprobe.GPU) bool { return g.PowerDrawW == nil }},
		{"power limit", false, func(d *server.Device, r nvml.Return) {
			d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, r }
		}, func(g nodeprobe.GPU) bool { return g.PowerLimitW == nil }},
		{"memory", false, func(d *server.Device, r nvml.Return) {
			d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, r }
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, r }
		}, func(g nodeprobe.GPU) bool { return g.MemoryUsedMiB == 0 }},
		{"mig mode", false, func(d *server.Device, r nvml.Return) {
			d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, r }
		}, func(g nodeprobe.GPU) bool { return g.MIG == nodeprobe.MIGUnsupported }},
		{"processes", false, func(d *server.Device, r nvml.Return) {
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, r }
		}, func(g nodeprobe.GPU) bool { return g.Processes != nil && len(g.Processes) == 0 }},
		{"pci info", true, func(d *server.Device, r nvml.Return) {
			d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, r }
		}, func(g nodeprobe.GPU) bool { return g.PCIBusID == "" }},
		{"topology", true, func(d *server.Device, r nvml.Return) {
			d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) { return 0, r }
		}, func(g nodeprobe.GPU) bool {
			// The broken GPU asks about its higher peers; those links are
			// unknown, the ones its lower peers asked about remain.
			for _, l := range g.Links {
				if l.Peer > g.Index {
					return false
				}
			}
			return true
		}},
		{"nvlink", true, func(d *server.Device, r nvml.Return) {
			d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, r }
		}, func(g nodeprobe.GPU) bool {
			for _, l := range g.Links {
				if l.Kind == nodeprobe.LinkNVLink {
					return false
				}
			}
			return true
		}},
	}
	codes := []struct {
		ret   nvml.Return
		quiet bool // unsupported-like: no log line
		lost  bool // the GPU itself is reported broken
	}{
		{nvml.ERROR_NOT_SUPPORTED, true, false},
		{nvml.ERROR_FUNCTION_NOT_FOUND, true, false},
		{nvml.ERROR_NOT_FOUND, true, false},
		{nvml.ERROR_NO_DATA, true, false},
		{nvml.ERROR_NO_PERMISSION, false, false},
		{nvml.ERROR_UNKNOWN, false, false},
		{nvml.ERROR_TIMEOUT, false, false},
		{nvml.ERROR_GPU_IS_LOST, false, true},
		{nvml.ERROR_RESET_REQUIRED, false, true},
	}
	const broken, healthy = 3, 2
	for _, f := range fields {
		for _, c := range codes {
			t.Run(f.name+"/"+c.ret.Error(), func(t *testing.T) {
				s := stubServer(dgxh100.New())
				if f.name == "nvlink" {
					withNVSwitch(s, 18)
				}
				for _, d := range s.Devices {
					dev := d.(*server.Device)
					dev.MemoryInfo.Used = 1000 << 20
					dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
						return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1000 << 20}}, nvml.SUCCESS
					}
				}
				dev := s.Devices[broken].(*server.Device)
				if f.static {
					f.breakIt(dev, c.ret)
				}
				var logs []string
				p := openMock(t, s, &logs)
				if before := snapshot(t, p); !f.static && f.unknown(before.GPUs[broken]) {
					t.Fatalf("gpu %d %s unknown before it was broken: %+v", broken, f.name, before.GPUs[broken])
				}
				if !f.static {
					f.breakIt(dev, c.ret)
				}
				var snap nodeprobe.Snapshot
				for range 3 {
					snap = snapshot(t, p)
				}
				if len(snap.GPUs) != 8 {
					t.Fatalf("%d gpus, want all 8", len(snap.GPUs))
				}
				g := snap.GPUs[broken]
				if !f.unknown(g) {
					t.Errorf("gpu %d %s = %+v, want unknown", broken, f.name, g)
				}
				if f.unknown(snap.GPUs[healthy]) {
					t.Errorf("healthy gpu %d %s unknown too: %+v", healthy, f.name, snap.GPUs[healthy])
				}
				if g.UUID != dev.UUID || g.MemoryTotalMiB != 81920 {
					t.Errorf("gpu %d lost its identity: uuid %q, %d MiB", broken, g.UUID, g.MemoryTotalMiB)
				}
				if wantErr := c.lost && !f.static; (g.Error != "") != wantErr {
					t.Errorf("gpu %d error = %q, want one: %v", broken, g.Error, wantErr)
				}
				if c.quiet && len(logs) != 0 {
					t.Errorf("logged %q for an unsupported field, want nothing", logs)
				}
				if !c.quiet && len(logs) != 1 {
					t.Errorf("logged %q over 3 probes, want exactly one line", logs)
				}
				for _, l := range logs {
					if strings.Contains(l, "\n") || !strings.Contains(l, fmt.Sprint("gpu ", broken)) {
						t.Errorf("log line %q, want one line naming gpu %d", l, broken)
					}
				}
			})
		}
	}
}

// TestNVMLMemory: used memory is what nvidia-smi shows, the Used of NVML's
// v2 call, which leaves out what the driver reserves (615 MiB on an idle
// H200 under driver 580). v1, whose Used counts the reserve, is read only
// where v2 is missing from the driver or unsupported; another v2 failure
// leaves used unknown rather than mixing the two. A failed read keeps the
// last total.
func TestNVMLMemory(t *testing.T) {
	const (
		mib      = 1 << 20
		totalMiB = 143771 // an H200's memory.total in nvidia-smi
		reserved = 615
	)
	tests := []struct {
		name    string
		procMiB uint64 // what processes hold
		noV2    bool   // the driver does not export nvmlDeviceGetMemoryInfo_v2
		// what the calls return after a first good probe
		v2Ret, v1Ret nvml.Return
		wantUsed     uint64
		wantV1       bool // v1 is asked
		wantLost     bool
		wantLogs     int
	}{
		{"idle, v2", 0, false, nvml.SUCCESS, nvml.SUCCESS, 0, false, false, 0},
		{"busy, v2", 1024, false, nvml.SUCCESS, nvml.SUCCESS, 1024, false, false, 0},
		{"v2 not exported", 1024, true, nvml.SUCCESS, nvml.SUCCESS, 1024 + reserved, true, false, 0},
		{"v2 not supported", 1024, false, nvml.ERROR_NOT_SUPPORTED, nvml.SUCCESS, 1024 + reserved, true, false, 0},
		{"v2 function not found", 1024, false, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.SUCCESS, 1024 + reserved, true, false, 0},
		{"v2 not exported, v1 fails", 1024, true, nvml.SUCCESS, nvml.ERROR_UNKNOWN, 0, true, false, 1},
		{"both not supported", 1024, false, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, 0, true, false, 0},
		{"v2 not supported, v1 fails", 1024, false, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_UNKNOWN, 0, true, false, 1},
		{"v2 fails", 1024, false, nvml.ERROR_UNKNOWN, nvml.SUCCESS, 0, false, false, 1},
		{"v2 gpu lost", 1024, false, nvml.ERROR_GPU_IS_LOST, nvml.SUCCESS, 0, false, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stubServer(dgxh200.New())
			v2Ret, v1Ret := nvml.SUCCESS, nvml.SUCCESS
			for _, d := range s.Devices {
				dev := d.(*server.Device)
				dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
					used := (reserved + tt.procMiB) * mib
					return nvml.Memory{Total: totalMiB * mib, Free: totalMiB*mib - used, Used: used}, v1Ret
				}
				dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
					return nvml.Memory_v2{
						Total: totalMiB * mib, Reserved: reserved * mib,
						Free: (totalMiB - reserved - tt.procMiB) * mib, Used: tt.procMiB * mib,
					}, v2Ret
				}
				if tt.noV2 {
					dev.GetMemoryInfo_v2Func = nil // panics if called
				}
			}
			if tt.noV2 {
				s.LookupSymbolFunc = func(sym string) error {
					if sym == "nvmlDeviceGetMemoryInfo_v2" {
						return errors.New("undefined symbol")
					}
					return nil
				}
			}
			var logs []string
			p := openMock(t, s, &logs)
			snapshot(t, p)
			v2Ret, v1Ret = tt.v2Ret, tt.v1Ret
			dev := s.Devices[0].(*server.Device)
			v1Before := len(dev.GetMemoryInfoCalls())
			var g nodeprobe.GPU
			for range 2 {
				g = snapshot(t, p).GPUs[0]
			}
			if g.MemoryUsedMiB != tt.wantUsed || g.MemoryTotalMiB != totalMiB {
				t.Errorf("memory %d/%d MiB, want %d/%d", g.MemoryUsedMiB, g.MemoryTotalMiB, tt.wantUsed, totalMiB)
			}
			if asked := len(dev.GetMemoryInfoCalls()) > v1Before; asked != tt.wantV1 {
				t.Errorf("v1 asked: %v, want %v", asked, tt.wantV1)
			}
			if (g.Error != "") != tt.wantLost {
				t.Errorf("gpu error %q, want one: %v", g.Error, tt.wantLost)
			}
			if len(logs) != tt.wantLogs*8 {
				t.Errorf("logged %q over 2 probes of 8 gpus, want %d line(s) per gpu", logs, tt.wantLogs)
			}
		})
	}
}

func TestNVMLStaticFailureKeepsGPU(t *testing.T) {
	s := stubServer(dgxh100.New())
	dev := s.Devices[2].(*server.Device)
	uuid := dev.UUID
	failing := true
	dev.GetUUIDFunc = func() (string, nvml.Return) {
		if failing {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return uuid, nvml.SUCCESS
	}
	var logs []string
	p := openMock(t, s, &logs)
	snap := snapshot(t, p)
	g := snap.GPUs[2]
	if g.Index != 2 || g.UUID != "" || !strings.Contains(g.Error, "uuid") {
		t.Errorf("gpu 2 = %+v, want index 2 with an error about its uuid", g)
	}
	for _, l := range snap.GPUs[1].Links {
		if l.Peer == 2 {
			t.Errorf("gpu 1 has a link to unreadable gpu 2: %+v", l)
		}
	}
	snapshot(t, p)
	if n := len(s.Devices[0].(*server.Device).GetUUIDCalls()); n != 1 {
		t.Errorf("healthy gpu 0 identified %d times while gpu 2 stayed lost, want once", n)
	}
	failing = false
	snap = snapshot(t, p)
	if g := snap.GPUs[2]; g.UUID != uuid || g.Error != "" || len(g.Links) != 7 {
		t.Errorf("after recovery gpu 2 = %+v, want its uuid, no error and 7 links", g)
	}
}

func TestNVMLProcesses(t *testing.T) {
	s := stubServer(dgxh100.New())
	s.SystemGetProcessNameFunc = func(pid int) (string, nvml.Return) {
		if pid == 99999 {
			return "/usr/bin/python3.11", nvml.SUCCESS
		}
		return "", nvml.ERROR_NOT_FOUND
	}
	procs := map[int][]nvml.ProcessInfo{
		0: {{Pid: 4242, UsedGpuMemory: 30000 << 20}},
		1: {{Pid: 4243, UsedGpuMemory: 20000 << 20}, {Pid: 99999, UsedGpuMemory: ^uint64(0)}},
		4: {{Pid: 5151, UsedGpuMemory: 1 << 30}, {Pid: 88888, UsedGpuMemory: 1 << 20}},
	}
	for i, ps := range procs {
		s.Devices[i].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return ps, nvml.SUCCESS
		}
	}
	p := openMock(t, s, nil)
	var lookups int
	p.procs = procfs.NewReader(procRoot, procfs.NewFakeUsers(time.Now, map[int]string{1001: "alice"}, &lookups))
	snap := snapshot(t, p)
	type row struct {
		gpu, pid, uid   int
		user, cmd, cont string
		mem             uint64
	}
	want := []row{
		{0, 4242, 1001, "alice", "python3", "", 30000},
		{1, 4243, 1001, "alice", "python3", hexID1[:12], 20000},
		{1, 99999, -1, "", "python3.11", "", 0}, // gone from /proc; NVML's name; memory not available
		{4, 5151, 1002, "", "python", hexID2[:12], 1024},
		{4, 88888, -1, "", "", "", 1},
	}
	var got []row
	for _, g := range snap.GPUs {
		for _, pr := range g.Processes {
			got = append(got, row{g.Index, pr.PID, pr.UID, pr.User, pr.Command, pr.Container, pr.UsedMemoryMiB})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("processes:\n got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("process %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	snapshot(t, p)
	if lookups != 2 {
		t.Errorf("user lookups over two probes = %d, want 2 (uids 1001 and 1002, cached)", lookups)
	}
}

// migDevice builds a MIG device handle as NVML returns it.
func migDevice(uuid, name string, totalMiB, usedMiB uint64, attrs nvml.DeviceAttributes, procs []nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) {
			if name == "" {
				return "", nvml.ERROR_NOT_SUPPORTED
			}
			return name, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: totalMiB << 20, Used: usedMiB << 20}, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: totalMiB << 20, Used: usedMiB << 20}, nvml.SUCCESS
		},
		GetAttributesFunc:              func() (nvml.DeviceAttributes, nvml.Return) { return attrs, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
	}
}

// migServer is a DGX A100 whose GPU 0 is split into three MIG devices
// (slots 0, 3, 5), with processes 4242 on MIG-aaaa and 7001 on MIG-cccc.
func migServer(t *testing.T) *server.Server {
	s := stubServer(dgxa100.New())
	dev := s.Devices[0].(*server.Device)
	dev.MigMode = nvml.DEVICE_MIG_ENABLE
	// Real drivers do not report utilisation for a MIG-enabled GPU.
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		t.Error("processes were asked of the MIG parent; they must come from each MIG device")
		return nil, nvml.ERROR_NO_PERMISSION
	}
	slots := map[int]*mock.Device{
		0: migDevice("MIG-aaaa", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968, 8000, nvml.DeviceAttributes{}, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 8000 << 20}}),
		3: migDevice("MIG-bbbb", "NVIDIA A100-SXM4-40GB MIG 2g.10gb", 9856, 0, nvml.DeviceAttributes{}, nil),
		5: migDevice("MIG-cccc", "", 4864, 100, nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, []nvml.ProcessInfo{{Pid: 7001, UsedGpuMemory: 100 << 20}}),
	}
	dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		t.Error("process utilization was asked of a GPU in MIG mode; NVML samples none there")
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if m, ok := slots[i]; ok {
			return m, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return s
}

func TestNVMLMIG(t *testing.T) {
	var logs []string
	snap := snapshot(t, openMock(t, migServer(t), &logs))
	g := snap.GPUs[0]
	if g.MIG != nodeprobe.MIGEnabled || g.UtilizationPct != nil {
		t.Errorf("gpu 0 mig %s util %v, want enabled with unknown utilisation", g.MIG, g.UtilizationPct)
	}
	want := []nodeprobe.MIGDevice{
		{Index: 0, UUID: "MIG-aaaa", Profile: "3g.20gb", MemoryTotalMiB: 19968, MemoryUsedMiB: 8000},
		{Index: 3, UUID: "MIG-bbbb", Profile: "2g.10gb", MemoryTotalMiB: 9856},
		{Index: 5, UUID: "MIG-cccc", Profile: "1g.5gb", MemoryTotalMiB: 4864, MemoryUsedMiB: 100},
	}
	if fmt.Sprint(g.MIGDevices) != fmt.Sprint(want) {
		t.Errorf("MIG devices:\n got %+v\nwant %+v", g.MIGDevices, want)
	}
	if len(g.Processes) != 2 || g.Processes[0].MIGDevice != "MIG-aaaa" || g.Processes[1].MIGDevice != "MIG-cccc" || g.Processes[1].PID != 7001 {
		t.Errorf("processes = %+v, want 4242 on MIG-aaaa and 7001 on MIG-cccc", g.Processes)
	}
	for _, pr := range g.Processes {
		if pr.SMUtilPct != nil {
			t.Errorf("process %d on %s has SM %d%%, want not reported (NVML samples no processes in MIG mode)", pr.PID, pr.MIGDevice, *pr.SMUtilPct)
		}
	}
	if g1 := snap.GPUs[1]; g1.MIG != nodeprobe.MIGDisabled || len(g1.MIGDevices) != 0 {
		t.Errorf("gpu 1 = mig %s with %d devices, want disabled with none", g1.MIG, len(g1.MIGDevices))
	}
	if len(logs) != 0 {
		t.Errorf("logged %q, want nothing", logs)
	}
}

func TestMIGProfileName(t *testing.T) {
	tests := []struct {
		attrs     nvml.DeviceAttributes
		parentMiB uint64
		want      string
	}{
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, 40960, "1g.5gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 9856}, 81559, "1g.10gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 40192}, 81559, "3g.40gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 7, ComputeInstanceSliceCount: 7, MemorySizeMB: 80896}, 81920, "7g.80gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}, 40960, "1c.3g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, 0, "1g.5gb"},
	}
	for _, tt := range tests {
		if got := migProfileName(tt.attrs, tt.parentMiB); got != tt.want {
			t.Errorf("migProfileName(%+v, %d) = %q, want %q", tt.attrs, tt.parentMiB, got, tt.want)
		}
	}
}

func TestNVMLTopology(t *testing.T) {
	level := func(lvl nvml.GpuTopologyLevel) func(*server.Server) {
		return func(s *server.Server) {
			for _, d := range s.Devices {
				d.(*server.Device).GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) { return lvl, nvml.SUCCESS }
			}
		}
	}
	tests := []struct {
		name  string
		setup func(*server.Server)
		a, b  int
		want  nodeprobe.Link
	}{
		{"nvswitch", func(s *server.Server) { withNVSwitch(s, 18) }, 0, 7, nodeprobe.Link{Peer: 7, Kind: nodeprobe.LinkNVLink, NVLinks: 18}},
		{"pcie, same socket", func(*server.Server) {}, 0, 3, nodeprobe.Link{Peer: 3, Kind: nodeprobe.LinkNUMA}},
		{"pcie, other socket", func(*server.Server) {}, 0, 4, nodeprobe.Link{Peer: 4, Kind: nodeprobe.LinkSystem}},
		{"same board", level(nvml.TOPOLOGY_INTERNAL), 2, 5, nodeprobe.Link{Peer: 5, Kind: nodeprobe.LinkSameBoard}},
		{"single switch", level(nvml.TOPOLOGY_SINGLE), 5, 2, nodeprobe.Link{Peer: 2, Kind: nodeprobe.LinkSingleSwitch}},
		{"multi switch", level(nvml.TOPOLOGY_MULTIPLE), 1, 6, nodeprobe.Link{Peer: 6, Kind: nodeprobe.LinkMultiSwitch}},
		{"host bridge", level(nvml.TOPOLOGY_HOSTBRIDGE), 1, 6, nodeprobe.Link{Peer: 6, Kind: nodeprobe.LinkHostBridge}},
		{"direct bridge between a pair", func(s *server.Server) {
			// GPUs 0 and 1 joined by an NVLink bridge of 4 links, as on
			// workstation boards; the rest have no NVLink.
			for _, pair := range [][2]int{{0, 1}, {1, 0}} {
				dev := s.Devices[pair[0]].(*server.Device)
				peer := s.Devices[pair[1]].(*server.Device).PciBusID
				dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
					if l >= 4 {
						return 0, nvml.ERROR_INVALID_ARGUMENT
					}
					return nvml.FEATURE_ENABLED, nvml.SUCCESS
				}
				dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) { return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS }
				// The remote id comes back in the long, lower-case spelling.
				dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
					return pciInfo("0000" + strings.ToLower(peer)), nvml.SUCCESS
				}
			}
		}, 1, 0, nodeprobe.Link{Peer: 0, Kind: nodeprobe.LinkNVLink, NVLinks: 4}},
		{"old driver without the remote type call", func(s *server.Server) {
			withNVSwitch(s, 18)
			s.LookupSymbolFunc = func(sym string) error {
				if sym == "nvmlDeviceGetNvLinkRemoteDeviceType" {
					return errors.New("undefined symbol")
				}
				return nil
			}
			for _, d := range s.Devices {
				d.(*server.Device).GetNvLinkRemoteDeviceTypeFunc = nil // panics if called
			}
		}, 0, 7, nodeprobe.Link{Peer: 7, Kind: nodeprobe.LinkSystem}},
		{"bridged gpu to an unbridged one is pcie", func(s *server.Server) {
			dev := s.Devices[0].(*server.Device)
			dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
				if l == 0 {
					return nvml.FEATURE_DISABLED, nvml.SUCCESS
				}
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
		}, 0, 2, nodeprobe.Link{Peer: 2, Kind: nodeprobe.LinkNUMA}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stubServer(dgxh100.New())
			tt.setup(s)
			snap := snapshot(t, openMock(t, s, nil))
			var got nodeprobe.Link
			for _, l := range snap.GPUs[tt.a].Links {
				if l.Peer == tt.b {
					got = l
				}
			}
			if got != tt.want {
				t.Errorf("link %d-%d = %+v, want %+v", tt.a, tt.b, got, tt.want)
			}
			if n := len(snap.GPUs[tt.a].Links); n != 7 {
				t.Errorf("gpu %d has %d links, want 7", tt.a, n)
			}
		})
	}
}

func TestNVMLCachesStaticFacts(t *testing.T) {
	s := stubServer(dgxh100.New())
	p := openMock(t, s, nil)
	const probes = 4
	for range probes {
		snapshot(t, p)
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		got := fmt.Sprintf("uuid %d name %d pci %d nvlink %d topology %d utilization %d",
			len(dev.GetUUIDCalls()), len(dev.GetNameCalls()), len(dev.GetPciInfoCalls()),
			len(dev.GetNvLinkStateCalls()), len(dev.GetTopologyCommonAncestorCalls()), len(dev.GetUtilizationRatesCalls()))
		// Each pair's PCIe distance is asked once, by the lower index.
		want := fmt.Sprintf("uuid 1 name 1 pci 1 nvlink 1 topology %d utilization %d", 7-i, probes)
		if got != want {
			t.Errorf("gpu %d calls over %d probes:\n got %s\nwant %s", i, probes, got, want)
		}
	}
}

func TestNVMLDeviceCountChange(t *testing.T) {
	s := stubServer(dgxh100.New())
	p := openMock(t, s, nil)
	if n := len(snapshot(t, p).GPUs); n != 8 {
		t.Fatalf("%d gpus, want 8", n)
	}
	s.Devices = s.Devices[:4]
	snap := snapshot(t, p)
	if len(snap.GPUs) != 4 || len(snap.GPUs[0].Links) != 3 {
		t.Errorf("after losing 4 gpus: %d gpus, gpu 0 with %d links; want 4 and 3", len(snap.GPUs), len(snap.GPUs[0].Links))
	}
}

func TestNVMLOpenErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*server.Server)
		want  string
	}{
		{"library missing", func(s *server.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND } },
			"NVML: libnvidia-ml.so.1 not found"},
		{"driver not loaded", func(s *server.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED } },
			"NVML: the NVIDIA kernel driver is not loaded"},
		{"no permission", func(s *server.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_NO_PERMISSION } },
			"NVML: no permission"},
		{"version mismatch", func(s *server.Server) {
			s.InitFunc = func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }
		}, "NVML: library and kernel driver versions differ"},
		{"other init failure", func(s *server.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN } },
			"NVML: init: "},
		{"no gpus", func(s *server.Server) { s.Devices = nil }, "NVML: no NVIDIA GPUs found"},
		{"device count fails", func(s *server.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "NVML: device count: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stubServer(dgxh100.New())
			tt.setup(s)
			_, err := newNVMLProbe(context.Background(), s, testOptions(nil))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error = %v, want one line starting %q", err, tt.want)
			}
			var ret nvml.Return
			if errors.As(err, &ret) {
				t.Errorf("error %v exposes nvml.Return %d; nothing above nodeprobe may see it", err, ret)
			}
			inits, shutdowns := len(s.InitCalls()), len(s.ShutdownCalls())
			if s.InitFunc() == nvml.SUCCESS && shutdowns != inits {
				t.Errorf("init %d times, shutdown %d; a failed open must shut NVML down", inits, shutdowns)
			}
		})
	}
}

func TestNVMLSnapshotErrors(t *testing.T) {
	s := stubServer(dgxh100.New())
	p := openMock(t, s, nil)
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	_, err := p.Snapshot(context.Background())
	var ret nvml.Return
	if err == nil || !strings.Contains(err.Error(), "device count") || errors.As(err, &ret) {
		t.Errorf("Snapshot error = %v, want a device count error without an nvml.Return inside", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Snapshot(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Snapshot with canceled context: %v, want context.Canceled", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("NVML shut down %d times, want 1", n)
	}
}

func TestNormBusID(t *testing.T) {
	tests := map[string]string{
		"00000000:1B:00.0": "00000000:1b:00.0",
		"0000:1b:00.0":     "00000000:1b:00.0",
		"1:1B:00.0":        "00000001:1b:00.0",
		"odd":              "odd",
	}
	for in, want := range tests {
		if got := normBusID(in); got != want {
			t.Errorf("normBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNVMLCPUAffinity: each GPU's local CPUs and NUMA node come from NVML
// (the scoped call, or the whole-device one on a driver without it), and a
// GPU whose affinity NVML cannot tell reports none rather than a guess.
func TestNVMLCPUAffinity(t *testing.T) {
	t.Run("scoped", func(t *testing.T) {
		s := stubServer(dgxh100.New())
		snap := snapshot(t, openMock(t, s, nil))
		for _, g := range snap.GPUs {
			want := "0-31,64-95"
			if g.Index >= 4 {
				want = "32-63,96-127"
			}
			if g.CPUs != want {
				t.Errorf("GPU %d cpus = %q, want %q", g.Index, g.CPUs, want)
			}
			if g.NUMANode == nil || *g.NUMANode != g.Index/4 {
				t.Errorf("GPU %d numa node = %v, want %d", g.Index, g.NUMANode, g.Index/4)
			}
		}
	})
	t.Run("old driver", func(t *testing.T) {
		s := stubServer(dgxh100.New())
		var asked []nvml.AffinityScope
		for _, d := range s.Devices {
			dev := d.(*server.Device)
			dev.GetCpuAffinityWithinScopeFunc = func(_ int, sc nvml.AffinityScope) ([]uint, nvml.Return) {
				asked = append(asked, sc)
				return nil, nvml.ERROR_FUNCTION_NOT_FOUND
			}
			dev.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
				if n < 128 {
					t.Errorf("GetCpuAffinity asked about %d CPUs, fewer than a big machine has", n)
				}
				return []uint{1 << uint(dev.Index)}, nvml.SUCCESS
			}
			dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return -1, nvml.SUCCESS }
		}
		snap := snapshot(t, openMock(t, s, nil))
		for _, g := range snap.GPUs {
			if want := fmt.Sprint(g.Index); g.CPUs != want {
				t.Errorf("GPU %d cpus = %q, want %q", g.Index, g.CPUs, want)
			}
			if g.NUMANode != nil {
				t.Errorf("GPU %d numa node = %d, want none (NVML said -1)", g.Index, *g.NUMANode)
			}
		}
		if len(asked) == 0 || asked[0] != nvml.AFFINITY_SCOPE_NODE {
			t.Errorf("scopes asked = %v, want the NUMA node's first", asked)
		}
	})
	t.Run("none", func(t *testing.T) {
		s := stubServer(dgxh100.New())
		for _, d := range s.Devices {
			dev := d.(*server.Device)
			dev.GetCpuAffinityWithinScopeFunc = func(int, nvml.AffinityScope) ([]uint, nvml.Return) {
				return make([]uint, 128), nvml.SUCCESS // a BIOS that reports nothing
			}
			dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		}
		dev0 := s.Devices[0].(*server.Device)
		dev0.GetCpuAffinityWithinScopeFunc = func(int, nvml.AffinityScope) ([]uint, nvml.Return) {
			return nil, nvml.ERROR_UNKNOWN
		}
		var logs []string
		snap := snapshot(t, openMock(t, s, &logs))
		for _, g := range snap.GPUs {
			if g.CPUs != "" || g.NUMANode != nil {
				t.Errorf("GPU %d cpus = %q, numa %v; want none", g.Index, g.CPUs, g.NUMANode)
			}
			if g.Error != "" {
				t.Errorf("GPU %d error %q: an unknown affinity is no fault of the GPU", g.Index, g.Error)
			}
		}
		if !strings.Contains(strings.Join(logs, "\n"), "gpu 0: local CPUs unknown") {
			t.Errorf("logs %q do not say GPU 0's CPUs are unknown", logs)
		}
	})
}

// TestNVMLProcessUtilization walks the process utilization path: the latest
// sample per process wins, a figure over 100 is clamped, a listed process
// without a sample reads 0, the next probe asks only for newer samples (and
// NOT_FOUND then means idle, not unknown), an unsupported device leaves
// every process "not reported", a failure does too and is logged, and a
// GPU with no processes is not asked.
func TestNVMLProcessUtilization(t *testing.T) {
	s := stubServer(dgxh100.New())
	procs := map[int][]nvml.ProcessInfo{
		0: {{Pid: 4242, UsedGpuMemory: 30000 << 20}},
		1: {{Pid: 4243, UsedGpuMemory: 20000 << 20}, {Pid: 99999, UsedGpuMemory: 1 << 30}},
		2: {{Pid: 5151, UsedGpuMemory: 1 << 30}},
		3: {{Pid: 6161, UsedGpuMemory: 1 << 30}},
	}
	for i, ps := range procs {
		s.Devices[i].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return ps, nvml.SUCCESS
		}
	}
	var asked []uint64 // GPU 0's lastSeen arguments, probe by probe
	dev := func(i int) *server.Device { return s.Devices[i].(*server.Device) }
	dev(0).GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		asked = append(asked, lastSeen)
		if lastSeen >= 200 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		// Out of order on purpose: the later sample (ts 200) wins.
		return []nvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: 200, SmUtil: 70}, {Pid: 4242, TimeStamp: 100, SmUtil: 30}}, nvml.SUCCESS
	}
	dev(1).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{{Pid: 4243, TimeStamp: 50, SmUtil: 150}}, nvml.SUCCESS
	}
	// GPU 2 keeps the stub's ERROR_NOT_SUPPORTED.
	dev(3).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_UNKNOWN
	}
	dev(4).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		t.Error("process utilization was asked of GPU 4, which runs no process")
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	var logs []string
	p := openMock(t, s, &logs)
	sm := func(snap nodeprobe.Snapshot, gpu, k int) string {
		v := snap.GPUs[gpu].Processes[k].SMUtilPct
		if v == nil {
			return "not reported"
		}
		return fmt.Sprintf("%d%%", *v)
	}
	first := snapshot(t, p)
	for _, c := range []struct {
		gpu, k int
		want   string
	}{
		{0, 0, "70%"},          // latest of two samples
		{1, 0, "100%"},         // 150 clamped
		{1, 1, "0%"},           // listed, no sample: idle
		{2, 0, "not reported"}, // the device does not sample processes
		{3, 0, "not reported"}, // the read failed
	} {
		if got := sm(first, c.gpu, c.k); got != c.want {
			t.Errorf("first probe: gpu %d process %d SM = %s, want %s", c.gpu, c.k, got, c.want)
		}
	}
	second := snapshot(t, p)
	if got := sm(second, 0, 0); got != "0%" {
		t.Errorf("second probe: gpu 0 process 0 SM = %s, want 0%% (no sample since the last: NOT_FOUND)", got)
	}
	if fmt.Sprint(asked) != "[0 200]" {
		t.Errorf("gpu 0 was asked for samples after %v, want [0 200] (all, then newer than the last seen)", asked)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "gpu 3: process utilization unknown") {
		t.Errorf("logs = %q, want one line for gpu 3's failed read", logs)
	}
}
