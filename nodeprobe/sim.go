package nodeprobe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The simulator lets dibs run without GPUs: on a laptop, in `dibs demo`, in
// tests of everything above nodeprobe. It never imports go-nvml.

// simModel is one GPU model the simulator knows, with the figures
// nvidia-smi shows for it.
type simModel struct {
	key     string   // spec name, e.g. "H100-80GB"
	aliases []string // other spec names
	name    string   // as nvidia-smi prints it
	memMiB  uint64   // memory.total as nvidia-smi prints it
	idleW   float64
	limitW  float64
	nvlinks int // links per GPU on an NVLink board; 0 for PCIe-only parts
	mig     bool
}

// simModels returns the model table. It is a function, not a package
// variable, so no caller can change what another sees.
func simModels() []simModel {
	return []simModel{
		{key: "B200", name: "NVIDIA B200", memMiB: 183359, idleW: 140, limitW: 1000, nvlinks: 18, mig: true},
		{key: "H200", name: "NVIDIA H200", memMiB: 143771, idleW: 75, limitW: 700, nvlinks: 18, mig: true},
		{key: "H100-80GB", aliases: []string{"H100"}, name: "NVIDIA H100 80GB HBM3", memMiB: 81559, idleW: 70, limitW: 700, nvlinks: 18, mig: true},
		{key: "A100-80GB", name: "NVIDIA A100-SXM4-80GB", memMiB: 81920, idleW: 60, limitW: 400, nvlinks: 12, mig: true},
		{key: "A100-40GB", aliases: []string{"A100"}, name: "NVIDIA A100-SXM4-40GB", memMiB: 40960, idleW: 55, limitW: 400, nvlinks: 12, mig: true},
		{key: "L40S", name: "NVIDIA L40S", memMiB: 46068, idleW: 35, limitW: 350},
		{key: "L4", name: "NVIDIA L4", memMiB: 23034, idleW: 16, limitW: 72},
		{key: "RTX-PRO-6000", name: "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", memMiB: 97887, idleW: 30, limitW: 600},
		{key: "RTX-5090", name: "NVIDIA GeForce RTX 5090", memMiB: 32607, idleW: 30, limitW: 575},
		{key: "RTX-4090", name: "NVIDIA GeForce RTX 4090", memMiB: 24564, idleW: 20, limitW: 450},
		{key: "A10G", name: "NVIDIA A10G", memMiB: 23028, idleW: 25, limitW: 300},
		{key: "V100", aliases: []string{"V100-32GB"}, name: "Tesla V100-SXM2-32GB", memMiB: 32768, idleW: 40, limitW: 300, nvlinks: 6},
	}
}

// SimModels lists the model names a sim spec accepts (aliases included), so
// the CLI can offer them.
func SimModels() []string {
	var names []string
	for _, m := range simModels() {
		names = append(names, m.key)
		names = append(names, m.aliases...)
	}
	return names
}

// Bounds on specs and load files: large enough for any real node, small
// enough that a typo cannot make the simulator allocate without limit.
const (
	maxSimGPUs     = 256
	maxLoadFile    = 1 << 20
	maxLoadStrLen  = 256
	maxLoadProcess = 1024
)

// Simulated host facts.
const (
	simDriverVersion = "570.133.20"
	simCUDAVersion   = "12.8"
	simCPUsPerGPU    = 16
	simMiBPerGPU     = 128 * 1024
)

// SimOptions configures NewSim.
type SimOptions struct {
	// Spec lists the GPUs as count x model, comma-separated:
	// "8xH100-80GB", "4xRTX-PRO-6000,2xL40S". A bare model means one GPU;
	// model names are case-insensitive.
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

// Load scripts what simulated GPUs are doing. It is the JSON a load file
// holds:
//
//	{"gpus":{"0":{"utilization_pct":95,"memory_used_mib":30000,
//	  "processes":[{"pid":4242,"user":"bob","command":"python","used_memory_mib":30000}]}}}
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
}

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
}

// Sim is the simulated backend. Its GPUs are fixed by the spec; their load
// comes from SetLoad and from the load file, re-read at every probe. Per
// GPU, the file's entry wins over SetLoad's. Snapshot, SetLoad and LoadErr
// may be called from different goroutines.
type Sim struct {
	now      func() time.Time
	logf     func(format string, args ...any)
	loadFile string
	host     Host
	gpus     []GPU // static part: everything but load
	nLinks   int

	mu          sync.Mutex
	users       *userCache
	scripted    map[int]simGPULoad
	file        map[int]simGPULoad
	fileBytes   []byte // the file's last good content, to skip re-decoding
	fileErr     error
	lastWarning string
}

var _ Probe = (*Sim)(nil)

// simGPULoad is a validated GPULoad with its processes resolved.
type simGPULoad struct {
	util      int
	usedMiB   uint64
	processes []Process
}

// NewSim builds a simulated node. A bad spec, or a load file that cannot be
// read at start, is an error; later problems with the file are reported
// through Logf and LoadErr while the last good load stays in force.
func NewSim(opts SimOptions) (*Sim, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	models, err := parseSimSpec(opts.Spec)
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
		host: Host{
			Name:          host,
			CPUs:          simCPUsPerGPU * len(models),
			MemoryMiB:     simMiBPerGPU * uint64(len(models)),
			DriverVersion: simDriverVersion,
			CUDAVersion:   simCUDAVersion,
			Backend:       BackendSim,
		},
		users: newUserCache(opts.Now),
	}
	s.gpus = buildSimGPUs(host, models)
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

// parseSimSpec turns "4xRTX-PRO-6000,2xL40S" into one model per GPU.
func parseSimSpec(spec string) ([]simModel, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("sim spec is empty: want count x model, for example 8xH100-80GB")
	}
	known := simModels()
	var out []simModel
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		count, name := 1, part
		digits := 0
		for digits < len(part) && part[digits] >= '0' && part[digits] <= '9' {
			digits++
		}
		if digits > 0 {
			if digits == len(part) || (part[digits] != 'x' && part[digits] != 'X') {
				return nil, fmt.Errorf("sim spec %q: %q is not count x model (for example 8xH100-80GB)", spec, part)
			}
			n, err := strconv.Atoi(part[:digits])
			if err != nil || n < 1 || n > maxSimGPUs {
				return nil, fmt.Errorf("sim spec %q: count in %q must be 1 to %d", spec, part, maxSimGPUs)
			}
			count, name = n, strings.TrimSpace(part[digits+1:])
		}
		m, ok := findSimModel(known, name)
		if !ok {
			return nil, fmt.Errorf("sim spec %q: unknown model %q; known models: %s", spec, name, strings.Join(SimModels(), ", "))
		}
		if len(out)+count > maxSimGPUs {
			return nil, fmt.Errorf("sim spec %q: more than %d GPUs", spec, maxSimGPUs)
		}
		for range count {
			out = append(out, m)
		}
	}
	return out, nil
}

func findSimModel(known []simModel, name string) (simModel, bool) {
	for _, m := range known {
		if strings.EqualFold(m.key, name) {
			return m, true
		}
		for _, a := range m.aliases {
			if strings.EqualFold(a, name) {
				return m, true
			}
		}
	}
	return simModel{}, false
}

// simBusIDs are the bus numbers of a DGX H100's GPUs, for a plausible look.
func simBusID(i int) string {
	dgx := [...]int{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf}
	if i < len(dgx) {
		return fmt.Sprintf("00000000:%02X:00.0", dgx[i])
	}
	return fmt.Sprintf("%08X:%02X:00.0", 1+i/256, i%256)
}

// simUUID derives a stable UUID from the host name and the GPU index, so a
// simulated node restarts with the same GPUs and two nodes never collide.
func simUUID(host string, i int) string {
	sum := sha256.Sum256([]byte("dibs-sim/" + host + "/" + strconv.Itoa(i)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// buildSimGPUs lays out the GPUs and their topology. Consecutive GPUs of one
// NVLink-capable model share an NVLink board (all-to-all through NVSwitch, as
// on HGX boards; V100 boards hold four). Everything else meets over PCIe:
// pairs behind one switch, pairs on the same CPU socket through the NUMA
// node, the rest across the socket interconnect.
func buildSimGPUs(host string, models []simModel) []GPU {
	n := len(models)
	board := make([]int, n) // NVLink board id, -1 for none
	next := 0
	for i := range models {
		board[i] = -1
		if models[i].nvlinks == 0 {
			continue
		}
		size := 8
		if models[i].key == "V100" {
			size = 4
		}
		if i > 0 && board[i-1] >= 0 && models[i-1].key == models[i].key && boardSize(board, i) < size {
			board[i] = board[i-1]
		} else {
			board[i] = next
			next++
		}
	}
	pairs := (n + 1) / 2
	socket := func(i int) int {
		if i/2 < (pairs+1)/2 {
			return 0
		}
		return 1
	}
	gpus := make([]GPU, n)
	for i, m := range models {
		g := &gpus[i]
		g.Index = i
		g.UUID = simUUID(host, i)
		g.PCIBusID = simBusID(i)
		g.Model = m.name
		g.MemoryTotalMiB = m.memMiB
		g.PowerLimitW = FloatPtr(m.limitW)
		g.MIG = MIGUnsupported
		if m.mig {
			g.MIG = MIGDisabled
		}
		for j := range models {
			if j == i {
				continue
			}
			l := Link{Peer: j}
			switch {
			case board[i] >= 0 && board[i] == board[j]:
				l.Kind, l.NVLinks = LinkNVLink, m.nvlinks
			case i/2 == j/2:
				l.Kind = LinkSingleSwitch
			case socket(i) == socket(j):
				l.Kind = LinkNUMA
			default:
				l.Kind = LinkSystem
			}
			g.Links = append(g.Links, l)
		}
	}
	return gpus
}

func boardSize(board []int, i int) int {
	c := 0
	for j := i - 1; j >= 0 && board[j] == board[i-1]; j-- {
		c++
	}
	return c
}

// Backend reports BackendSim.
func (s *Sim) Backend() Backend { return BackendSim }

// Close does nothing; the simulator holds no resources.
func (s *Sim) Close() error { return nil }

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

// Snapshot returns the simulated GPUs under the current load.
func (s *Sim) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("probe: %w", err)
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
	snap := Snapshot{TakenAt: s.now(), Host: s.host, GPUs: make([]GPU, n)}
	// One backing array per kind instead of an allocation per field: the
	// snapshot owns all of it, so callers may keep or change it freely.
	links := make([]Link, 0, s.nLinks)
	ints := make([]int, 2*n)
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
		ints[2*i], ints[2*i+1] = l.util, 30+i%3+l.util*45/100
		floats[2*i], floats[2*i+1] = idle+(limit*0.92-idle)*float64(l.util)/100, limit
		g.UtilizationPct, g.TemperatureC = &ints[2*i], &ints[2*i+1]
		g.PowerDrawW, g.PowerLimitW = &floats[2*i], &floats[2*i+1]
		g.MemoryUsedMiB = l.usedMiB
		g.Processes = append(make([]Process, 0, len(l.processes)), l.processes...)
	}
	return snap, nil
}

// readLoadFile re-reads the load file; the caller holds s.mu (or is
// NewSim). On error the previous load stays and fileErr says why.
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
// owners. The caller holds s.mu (or is NewSim).
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
		v := simGPULoad{util: gl.UtilizationPct, processes: make([]Process, 0, len(gl.Processes))}
		var sum uint64
		for k, p := range gl.Processes {
			pr, err := s.resolve(p)
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
func (s *Sim) resolve(p LoadProcess) (Process, error) {
	if p.PID <= 0 {
		return Process{}, fmt.Errorf("pid %d must be positive", p.PID)
	}
	for _, f := range []string{p.User, p.Command, p.Container} {
		if len(f) > maxLoadStrLen {
			return Process{}, fmt.Errorf("pid %d: a string is longer than %d bytes", p.PID, maxLoadStrLen)
		}
	}
	pr := Process{PID: p.PID, UID: -1, User: p.User, Command: p.Command, UsedMemoryMiB: p.UsedMemoryMiB, Container: p.Container}
	switch {
	case p.UID != nil:
		if *p.UID < -1 {
			return Process{}, fmt.Errorf("pid %d: uid %d is not valid", p.PID, *p.UID)
		}
		pr.UID = *p.UID
		if pr.User == "" && pr.UID >= 0 {
			pr.User = s.users.name(pr.UID)
		}
	case p.User != "":
		pr.UID = s.users.uid(p.User)
	}
	return pr, nil
}
