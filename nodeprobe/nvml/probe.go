//go:build linux && cgo && nvml

package nvml

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/internal/warnonce"
	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// Open opens the NVML backend: the driver's own library, the most
// accurate and cheapest source. It fails with one line naming the cause
// (library missing, driver not loaded, no GPUs) so probe.Open can fall back.
func Open(ctx context.Context, opts nodeprobe.Options) (nodeprobe.Probe, error) {
	p, err := newNVMLProbe(ctx, nvml.New(), opts.WithDefaults())
	if err != nil {
		return nil, err
	}
	return p, nil
}

// nvmlProbe builds dibs snapshots from the NVML driver layer. Facts that
// cannot change while the driver is loaded (handles, UUIDs, names, bus ids,
// topology) are read at the first probe and kept; load, memory, MIG layout
// and processes are read at every probe.
type nvmlProbe struct {
	drv    nvmlDriver
	host   nodeprobe.Host
	procs  *procfs.Reader
	now    func() time.Time
	warn   warnonce.Warner
	closed bool

	// static holds one entry per GPU index; it is rebuilt when the device
	// count changes or when a GPU could not be read last time.
	static   []nvmlStatic
	complete bool
	nLinks   int
}

var _ nodeprobe.Probe = (*nvmlProbe)(nil)

// nvmlStatic is what is cached about one GPU.
type nvmlStatic struct {
	dev   nvml.Device
	info  staticInfo
	busID string // as NVML prints it
	bus   string // normalised, to match NVLink peers
	links []nodeprobe.Link
	// cpus and numa are the GPU's local CPUs and NUMA node (-1: unknown),
	// fixed by the board.
	cpus string
	numa int
	err  string // why the GPU could not be identified; empty when fine
	// totalMiB is the last memory size read, kept for probes where the
	// memory read fails.
	totalMiB uint64
	// utilSeen is the newest process utilization sample read (NVML's CPU
	// timestamp, µs): the next probe asks only for samples after it.
	utilSeen uint64
}

func newNVMLProbe(ctx context.Context, lib nvml.Interface, opts nodeprobe.Options) (*nvmlProbe, error) {
	p := &nvmlProbe{
		drv:   nvmlDriver{lib: lib},
		procs: procfs.NewReader(opts.ProcRoot, procfs.NewUsers(opts.Now)),
		now:   opts.Now,
		warn:  warnonce.Warner{Logf: opts.Logf},
	}
	if err := p.drv.init(); err != nil {
		return nil, err
	}
	fail := func(err error) (*nvmlProbe, error) {
		_ = p.drv.shutdown()
		return nil, err
	}
	driver, cuda, err := p.drv.versions()
	if err != nil {
		return fail(fmt.Errorf("NVML: %w", err))
	}
	n, err := p.drv.deviceCount()
	if err != nil {
		return fail(fmt.Errorf("NVML: %w", err))
	}
	if n == 0 {
		return fail(fmt.Errorf("NVML: no NVIDIA GPUs found"))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("NVML: %w", err))
	}
	p.host = procfs.ReadHost(opts, nodeprobe.BackendNVML)
	p.host.DriverVersion, p.host.CUDAVersion = driver, cuda
	p.loadStatic(n)
	return p, nil
}

// Backend reports BackendNVML.
func (p *nvmlProbe) Backend() nodeprobe.Backend { return nodeprobe.BackendNVML }

// Close shuts NVML down; a second Close does nothing.
func (p *nvmlProbe) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	return p.drv.shutdown()
}

// loadStatic (re)reads the per-GPU facts that do not change and the topology
// between GPUs.
func (p *nvmlProbe) loadStatic(n int) {
	p.static = make([]nvmlStatic, n)
	p.complete = true
	for i := range p.static {
		p.complete = p.identify(i) && p.complete
	}
	p.loadTopology()
}

// retryStatic tries again to identify the GPUs that failed before, and
// redoes the topology when one comes back.
func (p *nvmlProbe) retryStatic() {
	p.complete = true
	recovered := false
	for i := range p.static {
		if p.static[i].err == "" {
			continue
		}
		ok := p.identify(i)
		recovered = recovered || ok
		p.complete = p.complete && ok
	}
	if recovered {
		p.loadTopology()
	}
}

// identify reads GPU i's handle and identity into the cache; false when the
// GPU could not be named.
func (p *nvmlProbe) identify(i int) bool {
	s := &p.static[i]
	*s = nvmlStatic{}
	dev, err := p.drv.device(i)
	if err == nil {
		s.info, err = p.drv.static(dev)
	}
	if err != nil {
		s.err = err.Error()
		p.warn.Warn(fmt.Sprintf("static/%d/%s", i, s.err), "nodeprobe: gpu %d: %v", i, err)
		return false
	}
	s.dev = dev
	if s.busID, err = p.drv.busID(dev); err != nil {
		p.warn.Warn(fmt.Sprintf("bus/%d", i), "nodeprobe: gpu %d: pci bus id unknown: %v", i, err)
	}
	s.bus = normBusID(s.busID)
	if s.cpus, err = p.drv.cpuAffinity(dev); err != nil {
		p.warn.Warn(fmt.Sprintf("cpus/%d", i), "nodeprobe: gpu %d: local CPUs unknown: %v", i, err)
	}
	s.numa = -1
	if n, ok, err := p.drv.numaNode(dev); ok {
		s.numa = n
	} else if err != nil {
		p.warn.Warn(fmt.Sprintf("numa/%d", i), "nodeprobe: gpu %d: NUMA node unknown: %v", i, err)
	}
	return true
}

// loadTopology records, for every pair of GPUs, NVLink where the GPUs share
// any (directly or through NVSwitches) and otherwise their PCIe distance.
func (p *nvmlProbe) loadTopology() {
	n := len(p.static)
	remotes := make([][]nvlinkRemote, n)
	switches := make([]int, n)
	for i := range p.static {
		s := &p.static[i]
		if s.dev == nil {
			continue
		}
		r, err := p.drv.nvlinks(s.dev)
		if err != nil {
			p.warn.Warn(fmt.Sprintf("nvlink/%d", i), "nodeprobe: gpu %d: nvlink topology unknown: %v", i, err)
		}
		remotes[i] = r
		for _, l := range r {
			if l.toSwitch {
				switches[i]++
			}
		}
	}
	direct := func(i, j int) int {
		c := 0
		for _, l := range remotes[i] {
			if !l.toSwitch && l.busID != "" && l.busID == p.static[j].bus {
				c++
			}
		}
		return c
	}
	pcie := make([]nodeprobe.LinkKind, n*n)
	p.nLinks = 0
	for i := range p.static {
		a := &p.static[i]
		a.links = nil
		if a.dev == nil {
			continue
		}
		for j := range p.static {
			b := &p.static[j]
			if j == i || b.dev == nil {
				continue
			}
			nv := max(direct(i, j), direct(j, i))
			if switches[i] > 0 && switches[j] > 0 {
				nv += min(switches[i], switches[j])
			}
			if nv > 0 {
				a.links = append(a.links, nodeprobe.Link{Peer: j, Kind: nodeprobe.LinkNVLink, NVLinks: nv})
				continue
			}
			if j < i {
				if k := pcie[j*n+i]; k != "" {
					a.links = append(a.links, nodeprobe.Link{Peer: j, Kind: k})
				}
				continue
			}
			kind, ok, err := p.drv.pcieLink(a.dev, b.dev)
			if err != nil {
				p.warn.Warn(fmt.Sprintf("topology/%d", i), "nodeprobe: gpu %d: pcie topology to gpu %d unknown: %v", i, j, err)
			}
			if ok {
				pcie[i*n+j] = kind
				a.links = append(a.links, nodeprobe.Link{Peer: j, Kind: kind})
			}
		}
		p.nLinks += len(a.links)
	}
}

// Snapshot reads every GPU now. It fails only when NVML cannot list the GPUs
// at all; a GPU that cannot be read is kept with its Error set, and a field a
// GPU does not report is left unknown.
func (p *nvmlProbe) Snapshot(ctx context.Context) (nodeprobe.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nodeprobe.Snapshot{}, fmt.Errorf("probe: %w", err)
	}
	n, err := p.drv.deviceCount()
	if err != nil {
		return nodeprobe.Snapshot{}, fmt.Errorf("probe: NVML: %w", err)
	}
	switch {
	case n != len(p.static):
		p.loadStatic(n)
	case !p.complete:
		p.retryStatic()
	}
	snap := nodeprobe.Snapshot{TakenAt: p.now(), Host: p.host, GPUs: make([]nodeprobe.GPU, n)}
	// One backing array per kind rather than an allocation per field; the
	// snapshot owns all of it.
	links := make([]nodeprobe.Link, 0, p.nLinks)
	vals := make([]gpuValues, n)
	for i := range snap.GPUs {
		if err := ctx.Err(); err != nil {
			return nodeprobe.Snapshot{}, fmt.Errorf("probe gpu %d: %w", i, err)
		}
		g := &snap.GPUs[i]
		start := len(links)
		links = append(links, p.static[i].links...)
		if len(links) > start {
			g.Links = links[start:len(links):len(links)]
		}
		p.readGPU(i, g, &vals[i])
	}
	return snap, nil
}

// gpuValues holds the optional readings of one GPU; GPU's pointer fields
// point into it.
type gpuValues struct {
	util, temp  int
	numa        int
	draw, limit float64
}

// readGPU fills g from GPU i's cached facts and its live readings.
func (p *nvmlProbe) readGPU(i int, g *nodeprobe.GPU, v *gpuValues) {
	s := &p.static[i]
	g.Index = i
	g.UUID, g.Model, g.PCIBusID, g.CPUs = s.info.uuid, s.info.name, s.busID, s.cpus
	g.MIG = nodeprobe.MIGUnsupported
	g.Processes = []nodeprobe.Process{}
	if s.err != "" {
		g.Error = s.err
		return
	}
	if s.numa >= 0 {
		v.numa = s.numa
		g.NUMANode = &v.numa
	}
	dev := s.dev
	total, used, ok, err := p.drv.memoryMiB(dev)
	p.fieldErr(g, "memory", err)
	if ok {
		s.totalMiB = total
		g.MemoryUsedMiB = used
	}
	g.MemoryTotalMiB = s.totalMiB
	if v.util, ok, err = p.drv.utilization(dev); ok {
		g.UtilizationPct = &v.util
	}
	p.fieldErr(g, "utilization", err)
	if v.temp, ok, err = p.drv.temperature(dev); ok {
		g.TemperatureC = &v.temp
	}
	p.fieldErr(g, "temperature", err)
	if v.draw, ok, err = p.drv.powerDraw(dev); ok {
		g.PowerDrawW = &v.draw
	}
	p.fieldErr(g, "power draw", err)
	if v.limit, ok, err = p.drv.powerLimit(dev); ok {
		g.PowerLimitW = &v.limit
	}
	p.fieldErr(g, "power limit", err)
	g.MIG, err = p.drv.migMode(dev)
	p.fieldErr(g, "mig mode", err)

	if g.MIG != nodeprobe.MIGEnabled {
		ps, err := p.drv.processes(dev)
		p.fieldErr(g, "processes", err)
		g.Processes = p.appendProcesses(g.Processes, ps, "")
		if len(ps) > 0 {
			p.readProcessUtil(s, g)
		}
		return
	}
	// With MIG on, the parent GPU answers for processes only to root and
	// without saying which slice they use; each MIG device answers for its own.
	// Nor does NVML sample process utilization in MIG mode: the processes
	// keep no SM figure ("not reported").
	migs, err := p.drv.migDevices(dev)
	p.fieldErr(g, "mig devices", err)
	for _, m := range migs {
		info, err := p.drv.mig(m.dev, g.MemoryTotalMiB)
		if err != nil {
			p.fieldErr(g, fmt.Sprintf("mig device %d", m.index), err)
			continue
		}
		g.MIGDevices = append(g.MIGDevices, nodeprobe.MIGDevice{
			Index:          m.index,
			UUID:           info.uuid,
			Profile:        info.profile,
			MemoryTotalMiB: info.totalMiB,
			MemoryUsedMiB:  info.usedMiB,
		})
		ps, err := p.drv.processes(m.dev)
		p.fieldErr(g, fmt.Sprintf("mig device %d processes", m.index), err)
		g.Processes = p.appendProcesses(g.Processes, ps, info.uuid)
	}
}

// readProcessUtil gives each of g's processes its SM utilization where the
// device samples it; where it does not, they keep none.
func (p *nvmlProbe) readProcessUtil(s *nvmlStatic, g *nodeprobe.GPU) {
	sm, newest, ok, err := p.drv.processUtil(s.dev, s.utilSeen)
	p.fieldErr(g, "process utilization", err)
	if !ok {
		return
	}
	s.utilSeen = newest
	vals := make([]int, len(g.Processes)) // one allocation for the GPU's figures
	for i := range g.Processes {
		pr := &g.Processes[i]
		vals[i] = sm[pr.PID]
		pr.SMUtilPct = &vals[i]
	}
}

// appendProcesses attributes NVML's processes to their owners.
func (p *nvmlProbe) appendProcesses(dst []nodeprobe.Process, ps []procInfo, mig string) []nodeprobe.Process {
	for _, pi := range ps {
		o := p.procs.Attribute(pi.pid, "")
		if o.Command == "" {
			o.Command = p.drv.processName(pi.pid)
		}
		dst = append(dst, nodeprobe.Process{
			PID:           pi.pid,
			UID:           o.UID,
			User:          o.User,
			Command:       o.Command,
			UsedMemoryMiB: pi.usedMiB,
			Container:     o.Container,
			LeaseID:       o.LeaseID,
			MIGDevice:     mig,
		})
	}
	return dst
}

// fieldErr handles a failed read of one field: the field stays unknown, the
// problem is logged once, and a lost GPU is marked so on the GPU itself.
func (p *nvmlProbe) fieldErr(g *nodeprobe.GPU, field string, err error) {
	if err == nil {
		return
	}
	if gpuLost(err) && g.Error == "" {
		g.Error = err.Error()
	}
	p.warn.Warn(fmt.Sprintf("field/%d/%s/%v", g.Index, field, err), "nodeprobe: gpu %d: %s unknown: %v", g.Index, field, err)
}
