package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// maxSimCPUs bounds a simulated topology's cores, as maxSimGPUs bounds its
// GPUs.
const maxSimCPUs = 4096

// topology is a spec's sockets=SxC term: S sockets of C cores each, the
// GPUs split between them in index order. The zero value is no topology:
// the GPUs then report no local cores, as a backend that cannot tell.
type topology struct {
	sockets, cores int
}

// splitTopology takes the sockets=SxC term out of a spec ("8xH100,
// sockets=2x16": two sockets of 16 cores) and returns the rest, the GPUs.
func splitTopology(spec string) (string, topology, error) {
	var rest []string
	var t topology
	for part := range strings.SplitSeq(spec, ",") {
		v, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(part)), "sockets=")
		if !ok {
			rest = append(rest, part)
			continue
		}
		if t.sockets != 0 {
			return "", topology{}, fmt.Errorf("sim spec %q: sockets= given twice", spec)
		}
		s, c, ok := strings.Cut(v, "x")
		ns, err1 := strconv.Atoi(s)
		nc, err2 := strconv.Atoi(c)
		if !ok || err1 != nil || err2 != nil || ns < 1 || nc < 1 || ns*nc > maxSimCPUs {
			return "", topology{}, fmt.Errorf("sim spec %q: %q is not sockets=SOCKETSxCORES (for example sockets=2x16, at most %d cores)", spec, strings.TrimSpace(part), maxSimCPUs)
		}
		t = topology{sockets: ns, cores: nc}
	}
	return strings.Join(rest, ","), t, nil
}

// apply gives each GPU the cores and NUMA node of its socket: socket k
// holds cores k*C to k*C+C-1, and the GPUs are split evenly between the
// sockets in index order (two GPUs on two sockets: one each).
func (t topology) apply(gpus []nodeprobe.GPU) {
	if t.sockets == 0 {
		return
	}
	n := len(gpus)
	for i := range gpus {
		k := i * t.sockets / n
		gpus[i].NUMANode = nodeprobe.IntPtr(k)
		gpus[i].CPUs = fmt.Sprintf("%d-%d", k*t.cores, k*t.cores+t.cores-1)
		if t.cores == 1 {
			gpus[i].CPUs = strconv.Itoa(k)
		}
	}
}
