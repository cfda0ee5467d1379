package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Bounds on load files: large enough for any real node, small enough that
// a typo cannot make the simulator allocate without limit.
const (
	maxLoadFile    = 1 << 20
	maxLoadStrLen  = 256
	maxLoadProcess = 1024
)

// Load scripts what simulated GPUs are doing. It is the JSON a load file
// holds:
//
//	{"gpus":{"0":{"utilization_pct":95,"memory_used_mib":30000,
//	  "processes":[{"pid":4242,"user":"bob","command":"python","used_memory_mib":30000,
//	    "sm_util_pct":90}]}}}
//
// Utilization may change over time, for tests that drive a known curve:
//
//	{"gpus":{"0":{"utilization_steps":[{"for_s":60,"pct":0},{"for_s":120,"pct":80}],
//	  "repeat":true,"power_w":250}}}
type Load struct {
	// GPUs maps a GPU index to its load; GPUs not listed are idle.
	GPUs map[int]GPULoad `json:"gpus"`
}

// GPULoad is the scripted state of one simulated GPU.
type GPULoad struct {
	UtilizationPct int `json:"utilization_pct"`
	// MemoryUsedMiB defaults to the sum of the processes' memory.
	MemoryUsedMiB *uint64       `json:"memory_used_mib,omitempty"`
	Processes     []LoadProcess `json:"processes,omitempty"`
	// UtilizationSteps, when set, replace UtilizationPct with a curve:
	// each step holds its pct for its for_s seconds, counted from when
	// this load took effect (the file's content changed, or SetLoad);
	// after the last step the last pct holds, or with Repeat the steps
	// start over.
	UtilizationSteps []UtilStep `json:"utilization_steps,omitempty"`
	Repeat           bool       `json:"repeat,omitempty"`
	// PowerW, when set, is the power draw reported; otherwise the draw
	// follows utilization between a tenth of the limit and 92 % of it.
	PowerW *float64 `json:"power_w,omitempty"`
}

// UtilStep is one step of a utilization curve.
type UtilStep struct {
	ForS float64 `json:"for_s"`
	Pct  int     `json:"pct"`
}

// maxLoadSteps bounds a curve's steps.
const maxLoadSteps = 10000

// LoadProcess is one scripted process. A user with no uid gets the uid of
// the local account of that name (-1 when there is none); a uid with no user
// gets the account's name.
type LoadProcess struct {
	PID           int    `json:"pid"`
	User          string `json:"user,omitempty"`
	UID           *int   `json:"uid,omitempty"`
	Command       string `json:"command,omitempty"`
	UsedMemoryMiB uint64 `json:"used_memory_mib"`
	Container     string `json:"container,omitempty"`
	// LeaseID is the DIBS_LEASE_ID the process's environment carries, as
	// /proc shows it for a root-owned process in a container.
	LeaseID string `json:"lease_id,omitempty"`
	// MIG is the index of the MIG instance the process runs on; every
	// process of a GPU split into MIG instances names one, as NVML
	// attributes each process to its instance.
	MIG *int `json:"mig,omitempty"`
	// SMUtilPct is the process's SM utilization as NVML's process samples
	// would give it (0..100); left out, the process has none ("not
	// reported", as in MIG mode or on the nvidia-smi backend).
	SMUtilPct *int `json:"sm_util_pct,omitempty"`
}

// simGPULoad is a validated GPULoad with its processes resolved.
type simGPULoad struct {
	util      int
	usedMiB   uint64
	processes []nodeprobe.Process
	steps     []UtilStep
	repeat    bool
	powerW    *float64
	since     time.Time // when the load took effect: the curve's zero
}

// utilAt is the load's utilization at now.
func (l *simGPULoad) utilAt(now time.Time) int {
	if len(l.steps) == 0 {
		return l.util
	}
	var total float64
	for _, st := range l.steps {
		total += st.ForS
	}
	t := now.Sub(l.since).Seconds()
	if l.repeat && total > 0 && t >= total {
		t -= total * float64(int(t/total))
	}
	for _, st := range l.steps {
		if t < st.ForS {
			return st.Pct
		}
		t -= st.ForS
	}
	return l.steps[len(l.steps)-1].Pct
}

// SetLoad scripts the load without a file, for in-process demos and tests.
// Per GPU, an entry in the load file (if any) wins over this one. An invalid
// load is rejected whole and the previous one kept.
func (s *Sim) SetLoad(l Load) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.validate(l)
	if err != nil {
		return fmt.Errorf("sim load: %w", err)
	}
	s.scripted = v
	return nil
}

// LoadErr says what is wrong with the load file now, nil when the last read
// was good. The simulator keeps the last good load meanwhile.
func (s *Sim) LoadErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fileErr
}

// readLoadFile re-reads the load file; the caller holds s.mu (or is
// New). On error the previous load stays and fileErr says why.
func (s *Sim) readLoadFile() error {
	data, err := readBounded(s.loadFile, maxLoadFile)
	if err == nil && s.fileBytes != nil && bytes.Equal(data, s.fileBytes) {
		s.fileErr = nil
		return nil
	}
	var v map[int]simGPULoad
	if err == nil {
		var l Load
		if l, err = decodeLoad(data); err == nil {
			v, err = s.validate(l)
		}
	}
	if err != nil {
		s.fileErr = fmt.Errorf("sim load file %s: %w", s.loadFile, err)
		return s.fileErr
	}
	s.file, s.fileBytes, s.fileErr = v, data, nil
	return nil
}

// readBounded reads a whole file, refusing one larger than max.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return data, nil
}

// decodeLoad decodes a load strictly: unknown fields and trailing data are
// errors, so a misspelt key is reported instead of silently ignored.
func decodeLoad(data []byte) (Load, error) {
	var l Load
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Load{}, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Load{}, errors.New("decode: data after the JSON object")
	}
	return l, nil
}

// validate checks a load against the simulated GPUs and resolves process
// owners. The caller holds s.mu (or is New).
func (s *Sim) validate(l Load) (map[int]simGPULoad, error) {
	out := make(map[int]simGPULoad, len(l.GPUs))
	idx := make([]int, 0, len(l.GPUs))
	for i := range l.GPUs {
		idx = append(idx, i)
	}
	sort.Ints(idx) // report the first bad GPU, not a random one
	for _, i := range idx {
		gl := l.GPUs[i]
		if i < 0 || i >= len(s.gpus) {
			return nil, fmt.Errorf("gpu %d: no such gpu (have 0 to %d)", i, len(s.gpus)-1)
		}
		total := s.gpus[i].MemoryTotalMiB
		if gl.UtilizationPct < 0 || gl.UtilizationPct > 100 {
			return nil, fmt.Errorf("gpu %d: utilization_pct %d not in 0..100", i, gl.UtilizationPct)
		}
		if len(gl.Processes) > maxLoadProcess {
			return nil, fmt.Errorf("gpu %d: more than %d processes", i, maxLoadProcess)
		}
		if len(gl.UtilizationSteps) > maxLoadSteps {
			return nil, fmt.Errorf("gpu %d: more than %d utilization_steps", i, maxLoadSteps)
		}
		for k, st := range gl.UtilizationSteps {
			if st.Pct < 0 || st.Pct > 100 || !(st.ForS >= 0 && st.ForS <= 1e7) {
				return nil, fmt.Errorf("gpu %d: utilization step %d: pct must be in 0..100 and for_s in 0..1e7 seconds", i, k)
			}
		}
		if gl.PowerW != nil && !(*gl.PowerW >= 0 && *gl.PowerW <= 10000) {
			return nil, fmt.Errorf("gpu %d: power_w %v not in 0..10000", i, *gl.PowerW)
		}
		v := simGPULoad{util: gl.UtilizationPct, processes: make([]nodeprobe.Process, 0, len(gl.Processes)),
			steps: gl.UtilizationSteps, repeat: gl.Repeat, powerW: gl.PowerW, since: s.now()}
		var sum uint64
		for k, p := range gl.Processes {
			pr, err := s.resolve(p)
			if err == nil {
				pr.MIGDevice, err = migOf(&s.gpus[i], p.MIG)
			}
			if err != nil {
				return nil, fmt.Errorf("gpu %d: process %d: %w", i, k, err)
			}
			if p.UsedMemoryMiB > total {
				return nil, fmt.Errorf("gpu %d: process %d: used_memory_mib %d exceeds the gpu's %d", i, k, p.UsedMemoryMiB, total)
			}
			sum += p.UsedMemoryMiB
			v.processes = append(v.processes, pr)
		}
		v.usedMiB = sum
		if gl.MemoryUsedMiB != nil {
			v.usedMiB = *gl.MemoryUsedMiB
		}
		if v.usedMiB > total {
			return nil, fmt.Errorf("gpu %d: memory used %d MiB exceeds the gpu's %d", i, v.usedMiB, total)
		}
		out[i] = v
	}
	return out, nil
}

// resolve turns a scripted process into a snapshot one, looking up the
// owner the way /proc attribution would.
func (s *Sim) resolve(p LoadProcess) (nodeprobe.Process, error) {
	if p.PID <= 0 {
		return nodeprobe.Process{}, fmt.Errorf("pid %d must be positive", p.PID)
	}
	for _, f := range []string{p.User, p.Command, p.Container, p.LeaseID} {
		if len(f) > maxLoadStrLen {
			return nodeprobe.Process{}, fmt.Errorf("pid %d: a string is longer than %d bytes", p.PID, maxLoadStrLen)
		}
	}
	pr := nodeprobe.Process{PID: p.PID, UID: -1, User: p.User, Command: p.Command, UsedMemoryMiB: p.UsedMemoryMiB, Container: p.Container, LeaseID: p.LeaseID}
	if p.SMUtilPct != nil {
		if *p.SMUtilPct < 0 || *p.SMUtilPct > 100 {
			return nodeprobe.Process{}, fmt.Errorf("pid %d: sm_util_pct %d not in 0..100", p.PID, *p.SMUtilPct)
		}
		sm := *p.SMUtilPct
		pr.SMUtilPct = &sm
	}
	switch {
	case p.UID != nil:
		if *p.UID < -1 {
			return nodeprobe.Process{}, fmt.Errorf("pid %d: uid %d is not valid", p.PID, *p.UID)
		}
		pr.UID = *p.UID
		if pr.User == "" && pr.UID >= 0 {
			pr.User = s.users.Name(pr.UID)
		}
	case p.User != "":
		pr.UID = s.users.UID(p.User)
	}
	return pr, nil
}

// migOf names the MIG instance a scripted process runs on: every process of
// a GPU split into instances names one (by index), no other process does.
func migOf(g *nodeprobe.GPU, mig *int) (string, error) {
	switch {
	case len(g.MIGDevices) == 0 && mig == nil:
		return "", nil
	case len(g.MIGDevices) == 0:
		return "", fmt.Errorf("mig %d: the gpu is not split into MIG instances", *mig)
	case mig == nil:
		return "", fmt.Errorf("the gpu is split into MIG instances: say which one the process runs on (mig 0 to %d)", len(g.MIGDevices)-1)
	case *mig < 0 || *mig >= len(g.MIGDevices):
		return "", fmt.Errorf("mig %d: no such MIG instance (have 0 to %d)", *mig, len(g.MIGDevices)-1)
	}
	return g.MIGDevices[*mig].UUID, nil
}
