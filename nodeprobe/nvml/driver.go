//go:build linux && cgo && nvml

package nvml

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// This file is the thin layer over NVML: each method makes one or a few NVML
// calls and turns the answer into Go values and errors. It knows nothing of
// dibs's types beyond a few enums; probe.go builds snapshots from it.
// Nothing outside this file and the prober sees an nvml.Return.

// nvmlDriver wraps an nvml.Interface: the real library in production, the
// go-nvml mock in tests.
type nvmlDriver struct {
	lib nvml.Interface
	// hasRemoteType says whether the driver exports
	// nvmlDeviceGetNvLinkRemoteDeviceType (R460+); calling a missing symbol
	// through go-nvml aborts the process rather than returning an error.
	hasRemoteType bool
	// hasMemoryV2 says whether the driver exports nvmlDeviceGetMemoryInfo_v2,
	// missing from old drivers in the same way.
	hasMemoryV2 bool
}

// nvmlError is a failed NVML call. It keeps the return code for the prober's
// decisions but does not wrap it, so errors.As above nodeprobe can never
// reach an nvml.Return.
type nvmlError struct {
	op  string
	ret nvml.Return
}

func (e *nvmlError) Error() string { return e.op + ": " + e.ret.Error() }

// decode turns an NVML return into an error; SUCCESS is nil.
func decode(op string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &nvmlError{op: op, ret: ret}
}

// unsupported reports whether ret means "this device has no such thing" (or
// no value for it yet) rather than a fault: the field is then simply unknown
// and not worth a log line.
func unsupported(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND,
		nvml.ERROR_NOT_FOUND, nvml.ERROR_NO_DATA:
		return true
	}
	return false
}

// gpuLost reports whether err says the GPU itself is gone or must be reset,
// which the board should show rather than a missing number.
func gpuLost(err error) bool {
	e, ok := err.(*nvmlError)
	return ok && (e.ret == nvml.ERROR_GPU_IS_LOST || e.ret == nvml.ERROR_RESET_REQUIRED)
}

// optional decodes a field that a GPU may not have: unsupported returns give
// (false, nil), other failures an error, success true.
func optional(op string, ret nvml.Return) (bool, error) {
	if ret == nvml.SUCCESS {
		return true, nil
	}
	if unsupported(ret) {
		return false, nil
	}
	return false, decode(op, ret)
}

// init loads and initialises NVML, saying in one line why it cannot be used.
func (d *nvmlDriver) init() error {
	switch ret := d.lib.Init(); ret {
	case nvml.SUCCESS:
		ext := d.lib.Extensions()
		d.hasRemoteType = ext.LookupSymbol("nvmlDeviceGetNvLinkRemoteDeviceType") == nil
		d.hasMemoryV2 = ext.LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("NVML: libnvidia-ml.so.1 not found")
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("NVML: the NVIDIA kernel driver is not loaded")
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("NVML: no permission to open /dev/nvidia*")
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("NVML: library and kernel driver versions differ (reboot or reload the driver)")
	default:
		return fmt.Errorf("NVML: init: %s", ret.Error())
	}
}

func (d *nvmlDriver) shutdown() error {
	return decode("NVML shutdown", d.lib.Shutdown())
}

// versions returns the driver version and the CUDA version the driver
// supports ("12.4"); either may be empty when NVML does not say.
func (d *nvmlDriver) versions() (driver, cuda string, err error) {
	driver, ret := d.lib.SystemGetDriverVersion()
	if err := decode("driver version", ret); err != nil {
		return "", "", err
	}
	v, ret := d.lib.SystemGetCudaDriverVersion()
	if ok, err := optional("cuda version", ret); err != nil {
		return driver, "", err
	} else if ok {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	return driver, cuda, nil
}

func (d *nvmlDriver) deviceCount() (int, error) {
	n, ret := d.lib.DeviceGetCount()
	return n, decode("device count", ret)
}

func (d *nvmlDriver) device(i int) (nvml.Device, error) {
	dev, ret := d.lib.DeviceGetHandleByIndex(i)
	return dev, decode("device handle", ret)
}

// processName asks NVML for a process's name; used only when /proc cannot
// tell, so any failure just means "no name".
func (d *nvmlDriver) processName(pid int) string {
	name, ret := d.lib.SystemGetProcessName(pid)
	if ret != nvml.SUCCESS {
		return ""
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// staticInfo is what a device says about itself that cannot change while the
// driver stays loaded.
type staticInfo struct {
	uuid string
	name string
}

// static reads a device's identity. Without it the GPU cannot be named, so
// any failure is an error.
func (d *nvmlDriver) static(dev nvml.Device) (staticInfo, error) {
	var s staticInfo
	var ret nvml.Return
	if s.uuid, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return s, decode("uuid", ret)
	}
	if s.name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return s, decode("name", ret)
	}
	return s, nil
}

// busID returns the PCI bus id as nvidia-smi prints it ("00000000:1B:00.0"),
// "" when NVML does not say.
func (d *nvmlDriver) busID(dev nvml.Device) (string, error) {
	pci, ret := dev.GetPciInfo()
	if ok, err := optional("pci info", ret); !ok {
		return "", err
	}
	return cString(pci.BusId[:]), nil
}

// affinityCPUs is how many CPUs the affinity calls are asked about. NVML
// wants the size of the machine; go-nvml sizes its mask from this in bytes
// where NVML counts in words, so 1024 makes room for 8192 CPUs, MaxCPU.
const affinityCPUs = 1024

// cpuAffinity returns the CPUs local to dev (those of its NUMA node) as a
// Linux CPU list, "" when NVML does not say: a driver without the scoped
// call (before R470) is asked the older whole-device one; a machine whose
// BIOS reports no affinity answers an empty mask, which is "" too.
func (d *nvmlDriver) cpuAffinity(dev nvml.Device) (string, error) {
	mask, ret := dev.GetCpuAffinityWithinScope(affinityCPUs, nvml.AFFINITY_SCOPE_NODE)
	if ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_NOT_SUPPORTED {
		mask, ret = dev.GetCpuAffinity(affinityCPUs)
	}
	if ok, err := optional("cpu affinity", ret); !ok {
		return "", err
	}
	var cpus []int
	for w, bits := range mask {
		for b := 0; b < 64 && bits != 0; b++ {
			if bits&(1<<b) == 0 {
				continue
			}
			bits &^= 1 << b
			if c := w*64 + b; c <= nodeprobe.MaxCPU {
				cpus = append(cpus, c)
			}
		}
	}
	return nodeprobe.FormatCPUList(cpus), nil
}

// numaNode returns dev's NUMA node; ok is false when NVML does not say
// (or says -1: a machine of one node).
func (d *nvmlDriver) numaNode(dev nvml.Device) (int, bool, error) {
	n, ret := dev.GetNumaNodeId()
	if ok, err := optional("numa node", ret); !ok || n < 0 {
		return 0, false, err
	}
	return n, true, nil
}

// memoryMiB returns total and used device memory as nvidia-smi shows them;
// ok is false when the device does not say. The v2 call reports the memory
// the driver and firmware reserve apart from the memory in use, as
// nvidia-smi does: an idle H200 is 0 MiB used, not the 615 MiB v1 counts.
// v1 is read only where v2 is missing or unsupported (older drivers); its
// used then includes the reserve.
func (d *nvmlDriver) memoryMiB(dev nvml.Device) (total, used uint64, ok bool, err error) {
	if d.hasMemoryV2 {
		m, ret := dev.GetMemoryInfo_v2()
		if ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_FUNCTION_NOT_FOUND {
			if ok, err := optional("memory", ret); !ok {
				return 0, 0, false, err
			}
			return m.Total >> 20, m.Used >> 20, true, nil
		}
	}
	m, ret := dev.GetMemoryInfo()
	if ok, err := optional("memory", ret); !ok {
		return 0, 0, false, err
	}
	return m.Total >> 20, m.Used >> 20, true, nil
}

// utilization returns the GPU busy percentage over the driver's last sample
// period; ok is false when the device cannot say (MIG mode, vGPU, no sample
// yet). The readings return values, not pointers, so the prober can place
// them in one allocation per snapshot.
func (d *nvmlDriver) utilization(dev nvml.Device) (pct int, ok bool, err error) {
	u, ret := dev.GetUtilizationRates()
	ok, err = optional("utilization", ret)
	return int(u.Gpu), ok, err
}

func (d *nvmlDriver) temperature(dev nvml.Device) (celsius int, ok bool, err error) {
	t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	ok, err = optional("temperature", ret)
	return int(t), ok, err
}

func (d *nvmlDriver) powerDraw(dev nvml.Device) (watts float64, ok bool, err error) {
	mw, ret := dev.GetPowerUsage()
	ok, err = optional("power draw", ret)
	return float64(mw) / 1000, ok, err
}

func (d *nvmlDriver) powerLimit(dev nvml.Device) (watts float64, ok bool, err error) {
	mw, ret := dev.GetEnforcedPowerLimit()
	ok, err = optional("power limit", ret)
	return float64(mw) / 1000, ok, err
}

// migMode returns the current MIG mode; GPUs without MIG say unsupported.
func (d *nvmlDriver) migMode(dev nvml.Device) (nodeprobe.MIGMode, error) {
	current, _, ret := dev.GetMigMode()
	if ok, err := optional("mig mode", ret); !ok {
		return nodeprobe.MIGUnsupported, err
	}
	if current == nvml.DEVICE_MIG_ENABLE {
		return nodeprobe.MIGEnabled, nil
	}
	return nodeprobe.MIGDisabled, nil
}

// migHandle is one MIG device that exists on a GPU.
type migHandle struct {
	index int
	dev   nvml.Device
}

// migDevices lists the MIG devices a MIG-enabled GPU holds now. Empty slots
// answer NOT_FOUND and are skipped.
func (d *nvmlDriver) migDevices(dev nvml.Device) ([]migHandle, error) {
	n, ret := dev.GetMaxMigDeviceCount()
	if ok, err := optional("max mig device count", ret); !ok {
		return nil, err
	}
	var out []migHandle
	for i := 0; i < n; i++ {
		m, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := decode(fmt.Sprintf("mig device %d", i), ret); err != nil {
			return out, err
		}
		out = append(out, migHandle{index: i, dev: m})
	}
	return out, nil
}

// migInfo describes one MIG device.
type migInfo struct {
	uuid     string
	profile  string // "1g.10gb", as nvidia-smi names it
	totalMiB uint64
	usedMiB  uint64
}

func (d *nvmlDriver) mig(m nvml.Device, parentTotalMiB uint64) (migInfo, error) {
	var mi migInfo
	var ret nvml.Return
	if mi.uuid, ret = m.GetUUID(); ret != nvml.SUCCESS {
		return mi, decode("mig uuid", ret)
	}
	total, used, _, err := d.memoryMiB(m)
	if err != nil {
		return mi, err
	}
	mi.totalMiB, mi.usedMiB = total, used
	// Real NVML names a MIG device "NVIDIA A100-SXM4-40GB MIG 1g.5gb"; the
	// attributes are the fallback when the name does not carry the profile.
	if name, ret := m.GetName(); ret == nvml.SUCCESS {
		if i := strings.LastIndex(name, "MIG "); i >= 0 {
			mi.profile = strings.TrimSpace(name[i+len("MIG "):])
		}
	}
	if mi.profile == "" {
		a, ret := m.GetAttributes()
		if ok, err := optional("mig attributes", ret); err != nil {
			return mi, err
		} else if ok {
			mi.profile = migProfileName(a, parentTotalMiB)
		}
	}
	return mi, nil
}

// migProfileName builds nvidia-smi's profile name from MIG attributes, the
// way go-nvlib does: memory is rounded to eighths of the parent GPU.
func migProfileName(a nvml.DeviceAttributes, parentTotalMiB uint64) string {
	gb := migMemoryGB(a.MemorySizeMB, parentTotalMiB)
	if a.ComputeInstanceSliceCount != 0 && a.ComputeInstanceSliceCount != a.GpuInstanceSliceCount {
		return fmt.Sprintf("%dc.%dg.%dgb", a.ComputeInstanceSliceCount, a.GpuInstanceSliceCount, gb)
	}
	return fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, gb)
}

func migMemoryGB(migMiB, parentMiB uint64) uint64 {
	if parentMiB == 0 {
		return (migMiB + 1023) / 1024
	}
	const eighths = 8
	// fraction of the parent, rounded up to an eighth, times the parent's
	// size in whole GB (rounded up).
	num := (migMiB*eighths + parentMiB - 1) / parentMiB
	parentGB := (parentMiB + 1023) / 1024
	return (num*parentGB + eighths/2) / eighths
}

// procInfo is one compute process as NVML reports it.
type procInfo struct {
	pid     int
	usedMiB uint64
}

// processes lists the compute processes on dev (a GPU or a MIG device).
func (d *nvmlDriver) processes(dev nvml.Device) ([]procInfo, error) {
	ps, ret := dev.GetComputeRunningProcesses()
	if ok, err := optional("compute processes", ret); !ok {
		return nil, err
	}
	out := make([]procInfo, 0, len(ps))
	for _, p := range ps {
		used := p.UsedGpuMemory
		if used == ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE
			used = 0
		}
		out = append(out, procInfo{pid: int(p.Pid), usedMiB: used >> 20})
	}
	return out, nil
}

// processUtil returns each process's SM utilization on dev from NVML's
// process utilization samples newer than lastSeen (a CPU timestamp in
// microseconds, 0 for all the driver holds), the latest sample per process,
// and the newest timestamp seen (lastSeen when none). ok is false when the
// device does not sample processes (MIG mode, vGPU, older drivers): then
// no process has a figure. NOT_FOUND is an answer, not a gap: the driver
// records samples only while a process keeps the SMs busy, so with none
// since the last probe every process read 0 %.
func (d *nvmlDriver) processUtil(dev nvml.Device, lastSeen uint64) (sm map[int]int, newest uint64, ok bool, err error) {
	samples, ret := dev.GetProcessUtilization(lastSeen)
	if ret == nvml.ERROR_NOT_FOUND {
		return map[int]int{}, lastSeen, true, nil
	}
	if ok, err := optional("process utilization", ret); !ok {
		return nil, lastSeen, false, err
	}
	sm = make(map[int]int, len(samples))
	at := make(map[int]uint64, len(samples))
	newest = lastSeen
	for _, s := range samples {
		pid := int(s.Pid)
		if t, seen := at[pid]; seen && t > s.TimeStamp {
			continue
		}
		at[pid] = s.TimeStamp
		sm[pid] = int(min(s.SmUtil, 100))
		newest = max(newest, s.TimeStamp)
	}
	return sm, newest, true, nil
}

// pcieLink returns how two GPUs meet on the PCIe tree; ok is false when NVML
// cannot say.
func (d *nvmlDriver) pcieLink(a, b nvml.Device) (nodeprobe.LinkKind, bool, error) {
	lvl, ret := a.GetTopologyCommonAncestor(b)
	if ok, err := optional("topology", ret); !ok {
		return "", false, err
	}
	switch lvl {
	case nvml.TOPOLOGY_INTERNAL:
		return nodeprobe.LinkSameBoard, true, nil
	case nvml.TOPOLOGY_SINGLE:
		return nodeprobe.LinkSingleSwitch, true, nil
	case nvml.TOPOLOGY_MULTIPLE:
		return nodeprobe.LinkMultiSwitch, true, nil
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return nodeprobe.LinkHostBridge, true, nil
	case nvml.TOPOLOGY_NODE:
		return nodeprobe.LinkNUMA, true, nil
	default:
		return nodeprobe.LinkSystem, true, nil
	}
}

// nvlinkRemote is where one active NVLink of a GPU leads.
type nvlinkRemote struct {
	busID    string // normalised, see normBusID
	toSwitch bool
}

// nvlinks lists the active NVLinks of dev. A GPU without NVLink gives none.
func (d *nvmlDriver) nvlinks(dev nvml.Device) ([]nvlinkRemote, error) {
	var out []nvlinkRemote
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		state, ret := dev.GetNvLinkState(l)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			break // past the device's last link
		}
		if ok, err := optional("nvlink state", ret); err != nil {
			return out, err
		} else if !ok {
			if l == 0 {
				return nil, nil // no NVLink on this device
			}
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		var r nvlinkRemote
		if d.hasRemoteType {
			if t, ret := dev.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
				r.toSwitch = t == nvml.NVLINK_DEVICE_TYPE_SWITCH
			}
		}
		pci, ret := dev.GetNvLinkRemotePciInfo(l)
		if ok, err := optional("nvlink remote", ret); err != nil {
			return out, err
		} else if ok {
			r.busID = normBusID(cString(pci.BusId[:]))
		}
		out = append(out, r)
	}
	return out, nil
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(buf)
}

// normBusID puts a PCI bus id in one spelling ("00000000:1b:00.0") so ids
// from GetPciInfo and GetNvLinkRemotePciInfo compare equal whatever the
// domain width and case.
func normBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return id
	}
	dom = strings.TrimLeft(dom, "0")
	if len(dom) < 8 {
		dom = strings.Repeat("0", 8-len(dom)) + dom
	}
	return dom + ":" + rest
}
