// Package probe opens the GPU probe a node should use: it knows every
// backend (nvml, smi, sim) and picks one, so the agent and the CLI say what
// they want and never import a backend themselves.
package probe

import (
	"context"
	"errors"
	"fmt"

	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/nvml"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/nodeprobe/smi"
)

// Open returns the probe opts ask for. Under BackendAuto it uses the
// simulator when a spec is given, else NVML, else nvidia-smi, logging one line
// for each fallback; with neither it says what is missing and how to try dibs
// without GPUs.
func Open(ctx context.Context, opts nodeprobe.Options) (nodeprobe.Probe, error) {
	opts = opts.WithDefaults()
	backend, err := nodeprobe.ParseBackend(string(opts.Backend))
	if err != nil {
		return nil, err
	}
	if opts.SimLoad != "" && opts.Sim == "" {
		return nil, errors.New("a sim load file needs a sim spec (--sim-load needs --sim)")
	}
	if opts.Sim != "" && backend != nodeprobe.BackendAuto && backend != nodeprobe.BackendSim {
		return nil, fmt.Errorf("a sim spec selects the simulator; it cannot be combined with backend %s", backend)
	}
	switch backend {
	case nodeprobe.BackendSim:
		if opts.Sim == "" {
			return nil, errors.New("the sim backend needs a spec, for example --sim 8xH100-80GB")
		}
		return openSim(opts)
	case nodeprobe.BackendNVML:
		return nvml.Open(ctx, opts)
	case nodeprobe.BackendNvidiaSMI:
		return smi.Open(ctx, opts)
	}
	if opts.Sim != "" {
		return openSim(opts)
	}
	p, nvmlErr := nvml.Open(ctx, opts)
	if nvmlErr == nil {
		return p, nil
	}
	opts.Logf("nodeprobe: %v; trying nvidia-smi", nvmlErr)
	p, smiErr := smi.Open(ctx, opts)
	if smiErr == nil {
		return p, nil
	}
	return nil, fmt.Errorf("no GPU backend: %v; %v — to try dibs without GPUs run with --sim 8xH100-80GB, or set sim = \"8xH100-80GB\" at the top of the config file (/etc/dibs/dibs.toml)", nvmlErr, smiErr)
}

// openSim builds the simulator from the shared options.
func openSim(opts nodeprobe.Options) (nodeprobe.Probe, error) {
	s, err := sim.New(sim.Options{
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
