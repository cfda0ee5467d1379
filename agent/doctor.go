package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

// SampleEvery is how often an agent looks at its GPUs for `dibs doctor`'s
// busy, idle and squatted figures.
const SampleEvery = time.Minute

// samplesFile keeps the samples across restarts, in the data dir; it is
// rewritten every samplesSaveEvery and when the agent stops.
const (
	samplesFile      = "doctor-samples.json"
	samplesSaveEvery = 15 * time.Minute
	maxSamplesFile   = 4 << 20
)

// doctorParts are the agent's side of `dibs doctor`: the sampler of this
// node's GPUs and what only the agent knows of its node.
type doctorParts struct {
	a    *Agent
	path string

	mu       sync.Mutex
	series   doctor.Series
	squat    doctor.SquatClock
	lastSave time.Time

	done chan struct{}
}

// newDoctor loads the samples kept by the last run and registers the
// doctor's endpoints with the service.
func (a *Agent) newDoctor() *doctorParts {
	d := &doctorParts{a: a, squat: doctor.SquatClock{}}
	if a.cfg.DataDir != "" {
		d.path = filepath.Join(a.cfg.DataDir, samplesFile)
		if err := d.load(); err != nil {
			a.log.Warn("doctor: the samples of the last run are lost; sampling starts again", "err", err)
		}
	}
	a.svc.EnableDoctor(core.DoctorDeps{
		Facts: d.facts, Samples: d.samples, SquatSince: d.squatSince,
		Sessions: func(ctx context.Context, u launch.User) ([]string, error) { return a.deps.Sessions.List(ctx, u) },
	})
	return d
}

func (d *doctorParts) load() error {
	f, err := os.Open(d.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var s doctor.Series
	dec := json.NewDecoder(&limited{f: f, left: maxSamplesFile})
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("read %s: %w", d.path, err)
	}
	for i := range s.Buckets {
		if err := s.Buckets[i].Validate(); err != nil {
			return fmt.Errorf("read %s: %w", d.path, err)
		}
	}
	// A gap since the last run is not counted (Series.Add caps it).
	d.series = s
	return nil
}

// limited reads at most left bytes of f.
type limited struct {
	f    *os.File
	left int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, fmt.Errorf("file is over %d bytes", maxSamplesFile)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.f.Read(p)
	l.left -= int64(n)
	return n, err
}

// save writes the samples (a temp file renamed over the old one).
func (d *doctorParts) save() {
	if d.path == "" {
		return
	}
	d.mu.Lock()
	b, err := json.Marshal(&d.series)
	d.mu.Unlock()
	if err == nil {
		// A power cut leaves the old samples or the new, never an
		// empty file that load refuses (base/durable).
		err = durable.WriteFile(d.path, b, 0o600)
	}
	if err != nil {
		d.a.log.Warn("doctor: cannot keep the GPU samples", "err", err)
	}
}

// start samples now and every SampleEvery until ctx ends.
func (d *doctorParts) start(ctx context.Context) {
	if d == nil {
		return
	}
	d.done = make(chan struct{})
	c := d.a.deps.Clock
	d.sample(c.Now())
	go func() {
		defer close(d.done)
		every(ctx, c, SampleEvery, func(now time.Time) {
			d.sample(now)
			if now.Sub(d.lastSave) >= samplesSaveEvery {
				d.lastSave = now
				d.save()
			}
		})
	}()
}

// stop waits for the sampler (its context is cancelled) and keeps the
// samples.
func (d *doctorParts) stop() {
	if d == nil || d.done == nil {
		return
	}
	<-d.done
	d.save()
}

// sample looks at this node's GPUs once.
func (d *doctorParts) sample(now time.Time) {
	a := d.a
	st := a.node.State()
	waiting := false
	v := a.svc.View()
	for _, e := range v.Entries() {
		if !e.Running {
			waiting = true
			break
		}
	}
	x := doctor.Observe(st.Snap, st.Leases, st.QuietSince, waiting, now, a.cfg.Policy)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.series.Add(x, now)
	d.squat.Seen(st.Judged, now)
}

func (d *doctorParts) samples(since time.Time) []doctor.Bucket {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.series.Since(since)
}

func (d *doctorParts) squatSince(gpu int) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.squat[gpu]
}

// facts is what only the agent knows of its node's report.
func (d *doctorParts) facts(ctx context.Context) doctor.Report {
	a := d.a
	var r doctor.Report
	if cs := a.cfg.Cluster; cs != nil {
		r.Cluster = doctor.ClusterFacts{Name: cs.Name, Encrypted: !cs.Insecure && len(cs.Key) > 0, GossipAddr: a.GossipAddr()}
		if len(cs.Key) > 0 {
			sum := sha256.Sum256(cs.Key)
			r.Cluster.KeyID = hex.EncodeToString(sum[:4])
		}
		if cl := a.cluster.Load(); cl != nil {
			r.Cluster.DecryptFailures = cl.c.Stats().DecryptFailures
		}
	}
	r.SSHAddr = a.SSHAddr()
	if t, ok := a.deps.Sessions.(interface{ TmuxPath() (string, error) }); ok {
		path, err := t.TmuxPath()
		r.Tmux = path
		if err != nil {
			r.TmuxError = err.Error()
		}
	} else {
		r.Tmux = fmt.Sprintf("%T", a.deps.Sessions)
	}
	r.Backend = string(a.deps.Probe.Backend())
	switch nodeprobe.Backend(r.Backend) {
	case nodeprobe.BackendSim:
		r.BackendWhy = "the agent was started with --sim"
	case nodeprobe.BackendNvidiaSMI:
		if a.deps.TryNVML == nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := a.deps.TryNVML(cctx)
		cancel()
		if err != nil {
			r.BackendWhy = err.Error()
		} else {
			r.BackendWhy = "NVML opens now but did not when the agent started: restart the agent to use it"
		}
	}
	if gpus := a.node.State().Snap.GPUs; len(gpus) > 0 {
		r.NoLocalCPUs = lease.CoresLine(gpus) == lease.CoresUnknown
	}
	r.DataDir = a.cfg.DataDir
	if r.DataDir == "" {
		r.DiskError = "the agent keeps no data dir"
	} else {
		var fs unix.Statfs_t
		if err := unix.Statfs(r.DataDir, &fs); err != nil {
			r.DiskError = err.Error()
		} else {
			r.DiskFree, r.DiskTotal = fs.Bavail*uint64(fs.Bsize), fs.Blocks*uint64(fs.Bsize)
		}
	}
	return r
}
