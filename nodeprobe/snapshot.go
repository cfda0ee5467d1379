// Package nodeprobe says what the hardware of one node is doing: its GPUs, their
// load, the processes on them and who owns those processes. Everything above it
// (leases, gossip, the board) decides from a Snapshot and never talks to NVML,
// nvidia-smi or /proc itself. This package holds only the types; the
// backends that read the hardware live in sub-packages (nvml, smi, sim, with
// procfs for process owners) and probe.Open picks one, so importing the
// types never links NVML or os/exec.
package nodeprobe

import (
	"context"
	"time"
)

// Backend names which source answered a probe, so a person reading `dibs probe`
// or the board knows how much to trust the numbers.
type Backend string

// The backends dibs knows, in the order Auto tries the real ones.
const (
	BackendNVML      Backend = "nvml"
	BackendNvidiaSMI Backend = "nvidia-smi"
	BackendSim       Backend = "sim"
)

// Probe reports the current state of this node's GPUs. Implementations are safe
// for use by one goroutine at a time; the agent probes from a single loop.
type Probe interface {
	// Snapshot reads the hardware now. An error means no GPU could be read at
	// all; a field that one GPU does not support is left unknown instead.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Backend says which source this probe reads.
	Backend() Backend
	// Close releases the library or files the probe holds.
	Close() error
}

// Snapshot is what one probe saw on one node at one moment.
type Snapshot struct {
	TakenAt time.Time `json:"taken_at"`
	Host    Host      `json:"host"`
	GPUs    []GPU     `json:"gpus"`
}

// Host holds the facts about the machine that placement and `dibs status` show.
type Host struct {
	Name          string  `json:"name"`
	CPUs          int     `json:"cpus"`
	MemoryMiB     uint64  `json:"memory_mib"`
	DriverVersion string  `json:"driver_version,omitempty"`
	CUDAVersion   string  `json:"cuda_version,omitempty"`
	Backend       Backend `json:"backend"`
	// Tags are the node's pools ("h100", "nvlink") from the agent's config,
	// not from the hardware: the agent stamps them on every snapshot so
	// they travel (and are checked) with the host facts, and claims can ask
	// for a pool (--pool, --tag).
	Tags []string `json:"tags,omitempty"`
}

// GPU is one physical GPU as nvidia-smi numbers it. Pointer fields are nil when
// the driver does not report them (ERROR_NOT_SUPPORTED, "[N/A]"), which is
// different from zero.
type GPU struct {
	Index          int         `json:"index"`
	UUID           string      `json:"uuid"`
	PCIBusID       string      `json:"pci_bus_id,omitempty"`
	Model          string      `json:"model"`
	MemoryTotalMiB uint64      `json:"memory_total_mib"`
	MemoryUsedMiB  uint64      `json:"memory_used_mib"`
	UtilizationPct *int        `json:"utilization_pct"`
	TemperatureC   *int        `json:"temperature_c"`
	PowerDrawW     *float64    `json:"power_draw_w"`
	PowerLimitW    *float64    `json:"power_limit_w"`
	MIG            MIGMode     `json:"mig_mode"`
	MIGDevices     []MIGDevice `json:"mig_devices,omitempty"`
	Links          []Link      `json:"links,omitempty"`
	Processes      []Process   `json:"processes"`
	// CPUs are the logical CPUs local to the GPU (those of its NUMA node,
	// NVML's ideal CPU set, sysfs local_cpulist), as a Linux CPU list
	// ("0-15,32-47", ParseCPUList): a session on the GPU is bound to them
	// so its data loaders do not run on the other socket. Empty when the
	// backend could not tell; the board then says so instead of guessing.
	CPUs string `json:"cpus,omitempty"`
	// NUMANode is the GPU's NUMA node; nil when unknown (or a machine of
	// one node that reports -1).
	NUMANode *int `json:"numa_node,omitempty"`
	// Error says why this GPU could not be read fully (the GPU is lost, its
	// UUID is unreadable); empty when it answered. The board shows a GPU with
	// an error as down, never as free.
	Error string `json:"error,omitempty"`
}

// MIGMode says whether a GPU is split into MIG devices.
type MIGMode string

// MIG modes. Unsupported is what consumer and pre-Ampere GPUs report.
const (
	MIGUnsupported MIGMode = "unsupported"
	MIGDisabled    MIGMode = "disabled"
	MIGEnabled     MIGMode = "enabled"
)

// MIGDevice is one MIG slice of a GPU: a claimable unit of its own, addressed
// by its UUID in CUDA_VISIBLE_DEVICES.
type MIGDevice struct {
	Index          int    `json:"index"`
	UUID           string `json:"uuid"`
	Profile        string `json:"profile"`
	MemoryTotalMiB uint64 `json:"memory_total_mib"`
	MemoryUsedMiB  uint64 `json:"memory_used_mib"`
}

// LinkKind says how directly two GPUs talk. Placement keeps GPUs of one claim
// as close as the topology allows.
type LinkKind string

// Link kinds from closest to farthest; they follow NVML's topology levels with
// NVLink above them all.
const (
	LinkNVLink       LinkKind = "nvlink"
	LinkSameBoard    LinkKind = "same-board"
	LinkSingleSwitch LinkKind = "single-switch"
	LinkMultiSwitch  LinkKind = "multi-switch"
	LinkHostBridge   LinkKind = "host-bridge"
	LinkNUMA         LinkKind = "numa"
	LinkSystem       LinkKind = "system"
)

// Distance orders link kinds: lower is closer. Unknown kinds are farthest.
func (k LinkKind) Distance() int {
	switch k {
	case LinkNVLink:
		return 0
	case LinkSameBoard:
		return 1
	case LinkSingleSwitch:
		return 2
	case LinkMultiSwitch:
		return 3
	case LinkHostBridge:
		return 4
	case LinkNUMA:
		return 5
	default:
		return 6
	}
}

// Link is the connection from one GPU to a peer GPU on the same node.
type Link struct {
	Peer    int      `json:"peer"`
	Kind    LinkKind `json:"kind"`
	NVLinks int      `json:"nvlinks,omitempty"`
}

// DistanceTo says how far peer is from g; GPUs with no recorded link are as far
// apart as the topology allows, so placement falls back to index order.
func (g *GPU) DistanceTo(peer int) int {
	if peer == g.Index {
		return -1
	}
	for _, l := range g.Links {
		if l.Peer == peer {
			return l.Kind.Distance()
		}
	}
	return LinkSystem.Distance()
}

// Process is one compute process on a GPU, attributed to its owner from /proc
// because NVML reports host pids that in-container tools cannot map.
type Process struct {
	PID           int    `json:"pid"`
	UID           int    `json:"uid"` // -1 when /proc could not be read
	User          string `json:"user"`
	Command       string `json:"command"`
	UsedMemoryMiB uint64 `json:"used_memory_mib"`
	// Container is the short id of the Docker/Podman/containerd container the
	// process runs in, empty when it runs on the host.
	Container string `json:"container,omitempty"`
	// LeaseID is the DIBS_LEASE_ID in the environment of a root-owned
	// process in a container (`docker run -e DIBS_LEASE_ID`), which ties a
	// rootful container's process to the lease its session ran under;
	// empty for every other process (only root's are read).
	LeaseID string `json:"lease_id,omitempty"`
	// MIGDevice is the UUID of the MIG device the process runs on, if any.
	MIGDevice string `json:"mig_device,omitempty"`
	// SMUtilPct is the process's share of the GPU's SM time over the last
	// probe interval, from NVML's process utilization samples. Nil means
	// not reported — MIG mode, drivers or GPUs without process sampling,
	// the nvidia-smi backend — which is not zero: the board says so.
	SMUtilPct *int `json:"sm_util_pct,omitempty"`
}

// EachString calls f with the JSON name and the address of every string
// field of the snapshot: host facts, GPU names and ids, MIG profiles, link
// kinds, and each process's user and command. Much of it is outside text
// (anyone can name a process anything, escape sequences included), so code
// that checks or escapes it (gossip, the front ends) visits it through here
// and a field added later is covered. f may replace the string.
func (s *Snapshot) EachString(f func(field string, p *string)) {
	s.Host.EachString(f)
	for i := range s.GPUs {
		s.GPUs[i].EachString(f)
	}
}

// EachString is Snapshot.EachString for the host facts.
func (h *Host) EachString(f func(field string, p *string)) {
	f("name", &h.Name)
	f("driver_version", &h.DriverVersion)
	f("cuda_version", &h.CUDAVersion)
	f("backend", (*string)(&h.Backend))
	for i := range h.Tags {
		f("tag", &h.Tags[i])
	}
}

// EachString is Snapshot.EachString for one GPU.
func (g *GPU) EachString(f func(field string, p *string)) {
	f("uuid", &g.UUID)
	f("pci_bus_id", &g.PCIBusID)
	f("model", &g.Model)
	f("mig_mode", (*string)(&g.MIG))
	f("cpus", &g.CPUs)
	for i := range g.MIGDevices {
		f("mig_device.uuid", &g.MIGDevices[i].UUID)
		f("mig_device.profile", &g.MIGDevices[i].Profile)
	}
	for i := range g.Links {
		f("link.kind", (*string)(&g.Links[i].Kind))
	}
	for i := range g.Processes {
		p := &g.Processes[i]
		f("process.user", &p.User)
		f("process.command", &p.Command)
		f("process.container", &p.Container)
		f("process.lease_id", &p.LeaseID)
		f("process.mig_device", &p.MIGDevice)
	}
	f("error", &g.Error)
}

// IntPtr returns a pointer to v; backends use it to fill optional fields.
func IntPtr(v int) *int { return &v }

// FloatPtr returns a pointer to v; backends use it to fill optional fields.
func FloatPtr(v float64) *float64 { return &v }
