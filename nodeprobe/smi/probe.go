// Package smi is the nvidia-smi backend of nodeprobe: it runs nvidia-smi's
// CSV queries at every probe (parse.go reads them) and needs no cgo, for
// nodes where NVML cannot be loaded.
package smi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/internal/warnonce"
	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// smiTimeout bounds one nvidia-smi run: with a wedged driver it can hang for
// minutes, and a probe loop must not.
const smiTimeout = 15 * time.Second

// commandRunner runs a program and returns its standard output. It is a
// field of the nvidia-smi probe so tests answer with fixtures.
type commandRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Open opens the nvidia-smi backend: slower than NVML (a process per
// probe) but needing no cgo. It fails with one line when nvidia-smi is not
// in PATH or cannot talk to the driver, so probe.Open can fall back.
func Open(ctx context.Context, opts nodeprobe.Options) (nodeprobe.Probe, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, errors.New("nvidia-smi: not in PATH")
	}
	p, err := newSMIProbe(ctx, path, runCommand, opts.WithDefaults())
	if err != nil {
		return nil, err
	}
	return p, nil
}

// smiProbe builds snapshots from nvidia-smi's CSV queries. nvidia-smi gives
// no topology and no CUDA version, so those stay empty.
type smiProbe struct {
	path  string
	run   commandRunner
	host  nodeprobe.Host
	procs *procfs.Reader
	now   func() time.Time
	warn  warnonce.Warner
	// sysRoot is where each GPU's local CPUs are read (localCPUs); local
	// caches what was read by bus id, fixed by the board.
	sysRoot string
	local   map[string]pciLocality
}

var _ nodeprobe.Probe = (*smiProbe)(nil)

func newSMIProbe(ctx context.Context, path string, run commandRunner, opts nodeprobe.Options) (*smiProbe, error) {
	p := &smiProbe{
		path:  path,
		run:   run,
		procs: procfs.NewReader(opts.ProcRoot, procfs.NewUsers(opts.Now)),
		now:   opts.Now,
		warn:  warnonce.Warner{Logf: opts.Logf},

		sysRoot: opts.SysRoot,
		local:   map[string]pciLocality{},
	}
	gpus, _, err := p.queryGPUs(ctx)
	if err != nil {
		return nil, err
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi: no GPUs listed")
	}
	p.host = procfs.ReadHost(opts, nodeprobe.BackendNvidiaSMI)
	return p, nil
}

// Backend reports BackendNvidiaSMI.
func (p *smiProbe) Backend() nodeprobe.Backend { return nodeprobe.BackendNvidiaSMI }

// Close does nothing: each probe's nvidia-smi has already exited.
func (p *smiProbe) Close() error { return nil }

func (p *smiProbe) queryGPUs(ctx context.Context) ([]nodeprobe.GPU, string, error) {
	out, err := p.run(ctx, p.path, "--query-gpu="+queryGPUFields, "--format=csv,noheader,nounits")
	if err != nil {
		return nil, "", fmt.Errorf("nvidia-smi: %w", err)
	}
	return parseQueryGPU(out)
}

// Snapshot runs nvidia-smi for the GPUs and their processes. It fails only
// when the GPU query fails; a failing process or MIG query is logged once
// and leaves those lists empty.
func (p *smiProbe) Snapshot(ctx context.Context) (nodeprobe.Snapshot, error) {
	gpus, driver, err := p.queryGPUs(ctx)
	if err != nil {
		return nodeprobe.Snapshot{}, fmt.Errorf("probe: %w", err)
	}
	snap := nodeprobe.Snapshot{TakenAt: p.now(), Host: p.host, GPUs: gpus}
	snap.Host.DriverVersion = driver
	byUUID := make(map[string]*nodeprobe.GPU, len(gpus))
	for i := range gpus {
		byUUID[gpus[i].UUID] = &gpus[i]
		p.addLocality(&gpus[i])
	}

	out, err := p.run(ctx, p.path, "--query-compute-apps="+queryAppsFields, "--format=csv,noheader,nounits")
	var apps []smiApp
	if err == nil {
		apps, err = parseComputeApps(out)
	}
	if err != nil {
		p.warn.Warn("apps/"+err.Error(), "nodeprobe: nvidia-smi processes unknown: %v", err)
	}
	for _, a := range apps {
		g := byUUID[a.gpuUUID]
		if g == nil {
			p.warn.Warn("apps-gpu/"+a.gpuUUID, "nodeprobe: nvidia-smi lists pid %d on unknown gpu %s", a.pid, a.gpuUUID)
			continue
		}
		o := p.procs.Attribute(a.pid, baseName(a.name))
		g.Processes = append(g.Processes, nodeprobe.Process{
			PID:           a.pid,
			UID:           o.UID,
			User:          o.User,
			Command:       o.Command,
			UsedMemoryMiB: a.usedMiB,
			Container:     o.Container,
			LeaseID:       o.LeaseID,
		})
	}

	if hasMIG(gpus) {
		p.addMIG(ctx, byUUID)
	}
	return snap, nil
}

// addMIG lists the MIG devices of MIG-enabled GPUs with `nvidia-smi -L`.
func (p *smiProbe) addMIG(ctx context.Context, byUUID map[string]*nodeprobe.GPU) {
	out, err := p.run(ctx, p.path, "-L")
	var migs []smiMIG
	if err == nil {
		migs, err = parseListGPUs(out)
	}
	if err != nil {
		p.warn.Warn("mig/"+err.Error(), "nodeprobe: nvidia-smi MIG devices unknown: %v", err)
		return
	}
	for _, m := range migs {
		if g := byUUID[m.gpuUUID]; g != nil && g.MIG == nodeprobe.MIGEnabled {
			g.MIGDevices = append(g.MIGDevices, m.dev)
		}
	}
}

func hasMIG(gpus []nodeprobe.GPU) bool {
	for i := range gpus {
		if gpus[i].MIG == nodeprobe.MIGEnabled {
			return true
		}
	}
	return false
}

func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// runCommand runs a program with a time limit and a bound on its output,
// returning the first line it printed when it fails: nvidia-smi explains
// itself ("couldn't communicate with the NVIDIA driver") on stdout.
func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	var stdout, stderr cappedBuffer
	stdout.max, stderr.max = maxSMIOutput+1, 4096
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := firstLine(stderr.Bytes())
		if msg == "" {
			msg = firstLine(stdout.Bytes())
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %v", msg, err)
		}
		return nil, err
	}
	return stdout.Bytes(), nil
}

func firstLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return string(bytes.TrimSpace(b))
}

// cappedBuffer keeps at most max bytes and drops the rest, so a runaway
// child cannot fill memory; the parsers reject output over their limit.
// The buffer is a field, not embedded: an embedded bytes.Buffer would give
// it ReadFrom, which io.Copy (and so os/exec) calls instead of Write, and
// the cap would hold nothing back.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes is what was kept.
func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }
