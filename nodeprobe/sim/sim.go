// Package sim is the simulated backend of nodeprobe: it lets dibs run
// without GPUs, on a laptop, in `dibs demo`, in tests of everything above
// nodeprobe. It never imports go-nvml. A spec names the GPUs (models.go); a
// load, set in-process or read from a file at every probe, scripts what
// they are doing (load.go).
package sim

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// Simulated host facts.
const (
	simDriverVersion = "570.133.20"
	simCUDAVersion   = "12.8"
	simCPUsPerGPU    = 16
	simMiBPerGPU     = 128 * 1024
)

// Options configures New.
type Options struct {
	// Spec lists the GPUs as count x model, comma-separated:
	// "8xH100-80GB", "4xRTX-PRO-6000,2xL40S". A bare model means one GPU;
	// model names are case-insensitive. A term may split its GPUs into MIG
	// instances: "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb". A term
	// sockets=SxC models the CPUs: S sockets of C cores, the GPUs split
	// between them ("4xH100,sockets=2x1"); without it the GPUs report no
	// local cores.
	Spec string
	// LoadFile, if set, is a JSON Load re-read at every probe.
	LoadFile string
	// HostName names the simulated node; it also seeds the GPU UUIDs, so two
	// simulated nodes never share one. Empty means the kernel's host name.
	HostName string
	// Now is the clock stamped on snapshots; nil means time.Now.
	Now func() time.Time
	// Logf hears about a bad load file, once per distinct problem. Nil
	// discards.
	Logf func(format string, args ...any)
}

// Sim is the simulated backend. Its GPUs are fixed by the spec; their load
// comes from SetLoad and from the load file, re-read at every probe. Per
// GPU, the file's entry wins over SetLoad's. Snapshot, SetLoad and LoadErr
// may be called from different goroutines.
type Sim struct {
	now      func() time.Time
	logf     func(format string, args ...any)
	loadFile string
	host     nodeprobe.Host
	gpus     []nodeprobe.GPU // static part: everything but load
	nLinks   int

	mu          sync.Mutex
	users       *procfs.Users
	scripted    map[int]simGPULoad
	file        map[int]simGPULoad
	fileBytes   []byte // the file's last good content, to skip re-decoding
	fileErr     error
	lastWarning string
}

var _ nodeprobe.Probe = (*Sim)(nil)

// New builds a simulated node. A bad spec, or a load file that cannot be
// read at start, is an error; later problems with the file are reported
// through Logf and LoadErr while the last good load stays in force.
func New(opts Options) (*Sim, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	gpuSpec, topo, err := splitTopology(opts.Spec)
	if err != nil {
		return nil, err
	}
	models, err := parseSimSpec(gpuSpec)
	if err != nil {
		return nil, err
	}
	host := opts.HostName
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("sim: host name: %w", err)
		}
	}
	s := &Sim{
		now:      opts.Now,
		logf:     opts.Logf,
		loadFile: opts.LoadFile,
		host: nodeprobe.Host{
			Name:          host,
			CPUs:          simCPUsPerGPU * len(models),
			MemoryMiB:     simMiBPerGPU * uint64(len(models)),
			DriverVersion: simDriverVersion,
			CUDAVersion:   simCUDAVersion,
			Backend:       nodeprobe.BackendSim,
		},
		users: procfs.NewUsers(opts.Now),
	}
	s.gpus = buildSimGPUs(host, models)
	topo.apply(s.gpus)
	if topo.sockets > 0 {
		s.host.CPUs = topo.sockets * topo.cores
	}
	for i := range s.gpus {
		s.nLinks += len(s.gpus[i].Links)
	}
	if s.loadFile != "" {
		if err := s.readLoadFile(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Backend reports BackendSim.
func (s *Sim) Backend() nodeprobe.Backend { return nodeprobe.BackendSim }

// Close does nothing; the simulator holds no resources.
func (s *Sim) Close() error { return nil }

// Snapshot returns the simulated GPUs under the current load.
func (s *Sim) Snapshot(ctx context.Context) (nodeprobe.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nodeprobe.Snapshot{}, fmt.Errorf("probe: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loadFile != "" {
		if err := s.readLoadFile(); err != nil {
			if msg := err.Error(); msg != s.lastWarning {
				s.lastWarning = msg
				s.logf("nodeprobe: %v; keeping the previous load", err)
			}
		} else {
			s.lastWarning = ""
		}
	}
	n := len(s.gpus)
	snap := nodeprobe.Snapshot{TakenAt: s.now(), Host: s.host, GPUs: make([]nodeprobe.GPU, n)}
	// One backing array per kind instead of an allocation per field: the
	// snapshot owns all of it, so callers may keep or change it freely.
	links := make([]nodeprobe.Link, 0, s.nLinks)
	ints := make([]int, 3*n)
	floats := make([]float64, 2*n)
	for i := range s.gpus {
		g := &snap.GPUs[i]
		*g = s.gpus[i]
		start := len(links)
		links = append(links, s.gpus[i].Links...)
		g.Links = links[start:len(links):len(links)]

		l, ok := s.file[i]
		if !ok {
			l = s.scripted[i]
		}
		limit := *s.gpus[i].PowerLimitW
		idle := limit * 0.1
		util := l.utilAt(snap.TakenAt)
		ints[2*i], ints[2*i+1] = util, 30+i%3+util*45/100
		floats[2*i], floats[2*i+1] = idle+(limit*0.92-idle)*float64(util)/100, limit
		if l.powerW != nil {
			floats[2*i] = *l.powerW
		}
		g.UtilizationPct, g.TemperatureC = &ints[2*i], &ints[2*i+1]
		if g.NUMANode != nil {
			ints[2*n+i] = *g.NUMANode
			g.NUMANode = &ints[2*n+i]
		}
		g.PowerDrawW, g.PowerLimitW = &floats[2*i], &floats[2*i+1]
		g.MemoryUsedMiB = l.usedMiB
		g.Processes = append(make([]nodeprobe.Process, 0, len(l.processes)), l.processes...)
		if len(g.MIGDevices) > 0 {
			// As real drivers do, a MIG-enabled GPU reports no utilisation;
			// each instance reports the memory its processes hold.
			g.UtilizationPct = nil
			g.MIGDevices = append([]nodeprobe.MIGDevice(nil), g.MIGDevices...)
			for k := range g.MIGDevices {
				for _, p := range g.Processes {
					if p.MIGDevice == g.MIGDevices[k].UUID {
						g.MIGDevices[k].MemoryUsedMiB += p.UsedMemoryMiB
					}
				}
			}
		}
	}
	return snap, nil
}
