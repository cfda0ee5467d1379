package nodeprobe

import (
	"fmt"
	"strings"
	"time"
)

// BackendAuto asks probe.Open to pick the best source this node has. It is
// only a request: a probe never reports it as the backend that answered.
const BackendAuto Backend = "auto"

// Options configures probe.Open and the backends' Open functions. It lives
// here, with the types, so every backend (nvml, smi, sim) shares one
// without importing another. The zero value probes the real hardware
// through the best backend available, with the real clock and /proc,
// logging nothing.
type Options struct {
	// Backend is BackendAuto (or empty), BackendNVML, BackendNvidiaSMI or
	// BackendSim.
	Backend Backend
	// Sim is a simulated-hardware spec such as "8xH100-80GB" (see sim.New).
	// Giving one under BackendAuto selects the simulator.
	Sim string
	// SimLoad is a JSON load file the simulator re-reads at every probe.
	SimLoad string
	// HostName replaces the kernel's host name, so several simulated nodes can
	// run in one process.
	HostName string
	// Logf receives one line per backend fallback and per new problem a probe
	// works around (an unreadable field, a bad load file). Nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock stamped on snapshots; nil means time.Now.
	Now func() time.Time
	// ProcRoot is where procfs is mounted; empty means /proc. An agent in a
	// container with the host's /proc mounted elsewhere points it there.
	ProcRoot string
	// SysRoot is where sysfs is mounted; empty means /sys. The nvidia-smi
	// backend reads each GPU's local CPUs there (bus/pci/devices/ID/
	// local_cpulist and numa_node), which nvidia-smi's CSV does not give.
	SysRoot string
}

// WithDefaults fills the optional hooks so backends never check for nil.
func (o Options) WithDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.SysRoot == "" {
		o.SysRoot = "/sys"
	}
	return o
}

// ParseBackend turns a --backend flag value into a Backend, so a typo is
// reported before anything is probed.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(strings.ToLower(strings.TrimSpace(s))); b {
	case "", BackendAuto:
		return BackendAuto, nil
	case BackendNVML, BackendNvidiaSMI, BackendSim:
		return b, nil
	default:
		return "", fmt.Errorf("unknown backend %q: want auto, nvml, nvidia-smi or sim", s)
	}
}
