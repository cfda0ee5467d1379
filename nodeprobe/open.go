package nodeprobe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// BackendAuto asks Open to pick the best source this node has. It is only a
// request: a probe never reports it as the backend that answered.
const BackendAuto Backend = "auto"

// Options configures Open. The zero value probes the real hardware through
// the best backend available, with the real clock and /proc, logging nothing.
type Options struct {
	// Backend is BackendAuto (or empty), BackendNVML, BackendNvidiaSMI or
	// BackendSim.
	Backend Backend
	// Sim is a simulated-hardware spec such as "8xH100-80GB" (see NewSim).
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
}

// withDefaults fills the optional hooks so backends never check for nil.
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
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

// Open returns the probe Options ask for. Under BackendAuto it uses the
// simulator when a spec is given, else NVML, else nvidia-smi, logging one line
// for each fallback; with neither it says what is missing and how to try dibs
// without GPUs.
func Open(ctx context.Context, opts Options) (Probe, error) {
	opts = opts.withDefaults()
	backend, err := ParseBackend(string(opts.Backend))
	if err != nil {
		return nil, err
	}
	if opts.SimLoad != "" && opts.Sim == "" {
		return nil, errors.New("a sim load file needs a sim spec (--sim-load needs --sim)")
	}
	if opts.Sim != "" && backend != BackendAuto && backend != BackendSim {
		return nil, fmt.Errorf("a sim spec selects the simulator; it cannot be combined with backend %s", backend)
	}
	switch backend {
	case BackendSim:
		if opts.Sim == "" {
			return nil, errors.New("the sim backend needs a spec, for example --sim 8xH100-80GB")
		}
		return openSim(opts)
	case BackendNVML:
		return OpenNVML(ctx, opts)
	case BackendNvidiaSMI:
		return OpenNvidiaSMI(ctx, opts)
	}
	if opts.Sim != "" {
		return openSim(opts)
	}
	p, nvmlErr := OpenNVML(ctx, opts)
	if nvmlErr == nil {
		return p, nil
	}
	opts.Logf("nodeprobe: %v; trying nvidia-smi", nvmlErr)
	p, smiErr := OpenNvidiaSMI(ctx, opts)
	if smiErr == nil {
		return p, nil
	}
	return nil, fmt.Errorf("no GPU backend: %v; %v — to try dibs without GPUs run with --sim 8xH100-80GB", nvmlErr, smiErr)
}

// openSim builds the simulator from the shared options.
func openSim(opts Options) (Probe, error) {
	s, err := NewSim(SimOptions{
		Spec:     opts.Sim,
		LoadFile: opts.SimLoad,
		HostName: opts.HostName,
		Now:      opts.Now,
		Logf:     opts.Logf,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// warnOnce logs a problem the first time it is seen, so a probe loop running
// every second does not repeat the same complaint forever.
type warnOnce struct {
	logf func(format string, args ...any)
	seen map[string]struct{}
}

// maxWarnKeys bounds what warnOnce remembers; past it, it forgets and may
// repeat a line, rather than grow for the life of the agent.
const maxWarnKeys = 1024

func (w *warnOnce) warn(key, format string, args ...any) {
	if _, ok := w.seen[key]; ok {
		return
	}
	if w.seen == nil || len(w.seen) >= maxWarnKeys {
		w.seen = make(map[string]struct{})
	}
	w.seen[key] = struct{}{}
	w.logf(format, args...)
}
