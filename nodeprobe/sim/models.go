package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

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

// Models lists the model names a sim spec accepts (aliases included), so
// the CLI can offer them.
func Models() []string {
	var names []string
	for _, m := range simModels() {
		names = append(names, m.key)
		names = append(names, m.aliases...)
	}
	return names
}

// maxSimGPUs bounds a spec: large enough for any real node, small enough
// that a typo cannot make the simulator allocate without limit.
const maxSimGPUs = 256

// simGPU is one GPU of a spec: its model and, when the spec splits it, its
// MIG instances.
type simGPU struct {
	simModel
	migs []migProfile
}

// migProfile is one MIG instance of a spec, as nvidia-smi names it:
// 3g.40gb is three compute slices with 40 GB of memory.
type migProfile struct {
	name   string
	slices int
	gb     int
}

// migSlices is how many compute slices a MIG-capable GPU has (A100, H100,
// H200 and B200 all have seven).
const migSlices = 7

// parseSimSpec turns "4xRTX-PRO-6000,2xL40S" into one model per GPU. A term
// may split its GPUs into MIG instances: "1xA100-80GB:mig=3g.40gb+2g.20gb".
func parseSimSpec(spec string) ([]simGPU, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("sim spec is empty: want count x model, for example 8xH100-80GB")
	}
	known := simModels()
	var out []simGPU
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		part, opts, _ := strings.Cut(part, ":")
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
			return nil, fmt.Errorf("sim spec %q: unknown model %q; known models: %s", spec, name, strings.Join(Models(), ", "))
		}
		mig, err := parseMIG(spec, m, strings.TrimSpace(opts))
		if err != nil {
			return nil, err
		}
		if len(out)+count > maxSimGPUs {
			return nil, fmt.Errorf("sim spec %q: more than %d GPUs", spec, maxSimGPUs)
		}
		for range count {
			out = append(out, simGPU{simModel: m, migs: mig})
		}
	}
	return out, nil
}

// parseMIG reads a term's options: "mig=3g.40gb+2g.20gb+1g.10gb" splits each
// GPU of the term into those instances; "" leaves them whole.
func parseMIG(spec string, m simModel, opts string) ([]migProfile, error) {
	if opts == "" {
		return nil, nil
	}
	list, ok := strings.CutPrefix(strings.ToLower(opts), "mig=")
	if !ok || list == "" {
		return nil, fmt.Errorf("sim spec %q: %q is not an option the simulator knows: write MODEL:mig=3g.40gb+1g.10gb", spec, opts)
	}
	if !m.mig {
		return nil, fmt.Errorf("sim spec %q: %s has no MIG; MIG-capable models: A100-40GB, A100-80GB, H100-80GB, H200, B200", spec, m.key)
	}
	var out []migProfile
	slices, gb := 0, 0
	for p := range strings.SplitSeq(list, "+") {
		mp, err := parseMIGProfile(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("sim spec %q: %w", spec, err)
		}
		slices += mp.slices
		gb += mp.gb
		out = append(out, mp)
	}
	if slices > migSlices {
		return nil, fmt.Errorf("sim spec %q: the MIG instances take %d compute slices; a %s has %d", spec, slices, m.key, migSlices)
	}
	if total := int(m.memMiB / 1024); gb > total {
		return nil, fmt.Errorf("sim spec %q: the MIG instances take %d GB; a %s has %d", spec, gb, m.key, total)
	}
	return out, nil
}

// parseMIGProfile reads one profile name, such as 3g.40gb.
func parseMIGProfile(s string) (migProfile, error) {
	bad := fmt.Errorf("%q is not a MIG profile: write it as nvidia-smi does, like 3g.40gb or 1g.10gb", s)
	g, rest, ok := strings.Cut(s, "g.")
	if !ok || !strings.HasSuffix(rest, "gb") {
		return migProfile{}, bad
	}
	slices, err1 := strconv.Atoi(g)
	gb, err2 := strconv.Atoi(strings.TrimSuffix(rest, "gb"))
	if err1 != nil || err2 != nil || slices < 1 || slices > migSlices || gb < 1 || gb > 1024 {
		return migProfile{}, bad
	}
	return migProfile{name: strconv.Itoa(slices) + "g." + strconv.Itoa(gb) + "gb", slices: slices, gb: gb}, nil
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

// migMiBPerGB is how much memory the simulator gives a MIG instance per GB
// of its profile name (nvidia-smi shows a 3g.40gb instance of an A100-80GB
// with 40192 MiB: a little under 1 GiB per GB).
const migMiBPerGB = 1004

// simMIGUUID derives a MIG instance's UUID as simUUID does a GPU's; CUDA
// names MIG instances "MIG-" and a UUID.
func simMIGUUID(host string, gpu, mig int) string {
	return "MIG-" + strings.TrimPrefix(simUUID(host+"/mig/"+strconv.Itoa(mig), gpu), "GPU-")
}

// buildSimGPUs lays out the GPUs and their topology. Consecutive GPUs of one
// NVLink-capable model share an NVLink board (all-to-all through NVSwitch, as
// on HGX boards; V100 boards hold four). Everything else meets over PCIe:
// pairs behind one switch, pairs on the same CPU socket through the NUMA
// node, the rest across the socket interconnect.
func buildSimGPUs(host string, models []simGPU) []nodeprobe.GPU {
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
	gpus := make([]nodeprobe.GPU, n)
	for i, m := range models {
		g := &gpus[i]
		g.Index = i
		g.UUID = simUUID(host, i)
		g.PCIBusID = simBusID(i)
		g.Model = m.name
		g.MemoryTotalMiB = m.memMiB
		g.PowerLimitW = nodeprobe.FloatPtr(m.limitW)
		g.MIG = nodeprobe.MIGUnsupported
		if m.mig {
			g.MIG = nodeprobe.MIGDisabled
		}
		if len(m.migs) > 0 {
			g.MIG = nodeprobe.MIGEnabled
			for k, p := range m.migs {
				g.MIGDevices = append(g.MIGDevices, nodeprobe.MIGDevice{
					Index: k, UUID: simMIGUUID(host, i, k), Profile: p.name, MemoryTotalMiB: uint64(p.gb) * migMiBPerGB,
				})
			}
		}
		for j := range models {
			if j == i {
				continue
			}
			l := nodeprobe.Link{Peer: j}
			switch {
			case board[i] >= 0 && board[i] == board[j]:
				l.Kind, l.NVLinks = nodeprobe.LinkNVLink, m.nvlinks
			case i/2 == j/2:
				l.Kind = nodeprobe.LinkSingleSwitch
			case socket(i) == socket(j):
				l.Kind = nodeprobe.LinkNUMA
			default:
				l.Kind = nodeprobe.LinkSystem
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
