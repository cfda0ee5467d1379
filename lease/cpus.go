package lease

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// CPUs close to the GPUs. A session is bound to the cores local to its
// GPUs (the NUMA node's, as the probe reports them), so a job's data
// loaders do not run on the other socket. --cpus-per-gpu N narrows that to
// N of those cores per GPU, chosen at the grant (ChooseCPUs), kept on the
// lease and shown to everyone, so two leases whose loaders would fight
// over the same cores are told. Like everything in dibs it is advisory:
// the binding is the session's own affinity, not a cgroup.

// MaxCPUsPerGPU bounds --cpus-per-gpu: more cores than any socket has.
const MaxCPUsPerGPU = 1024

// checkCPUAsk refuses a claim's CPU words that contradict or overflow.
func (c Claim) checkCPUAsk() error {
	if c.CPUsPerGPU < 0 || c.CPUsPerGPU > MaxCPUsPerGPU {
		return refusal.Invalidf("--cpus-per-gpu %d is out of range: 1 to %d", c.CPUsPerGPU, MaxCPUsPerGPU)
	}
	if c.CPUsPerGPU > 0 && c.AnyCPU {
		return refusal.Invalidf("--cpus any and --cpus-per-gpu contradict each other: give one")
	}
	return nil
}

// checkCPUs refuses a lease whose chosen cores are not one CPU list per
// GPU.
func (l *Lease) checkCPUs() error {
	if len(l.CPUs) == 0 {
		return nil
	}
	if len(l.CPUs) != len(l.GPUs) {
		return refusal.Invalidf("lease %s has cores for %d GPUs and holds %d", l.ID, len(l.CPUs), len(l.GPUs))
	}
	for _, s := range l.CPUs {
		if len(s) > maxCPUListLen {
			return refusal.Invalidf("lease %s has a %d-byte CPU list", l.ID, len(s))
		}
		if _, err := nodeprobe.ParseCPUList(s); err != nil || s == "" {
			return refusal.Invalidf("lease %s has a bad CPU list %s", l.ID, words.QuoteInput(s))
		}
	}
	return nil
}

// maxCPUListLen bounds one CPU list on a lease (MaxCPUsPerGPU cores
// written one by one).
const maxCPUListLen = 6 * MaxCPUsPerGPU

// planCPUs chooses the cores of a new lease that asked for some: N of each
// GPU's local cores, those no other lease of the table has chosen first.
func (t *Table) planCPUs(l *Lease, req Claim, snap nodeprobe.Snapshot) error {
	l.AnyCPU = req.AnyCPU
	if req.CPUsPerGPU == 0 {
		return nil
	}
	var others []Lease
	for _, e := range t.leases {
		others = append(others, e.Lease)
	}
	cpus, err := ChooseCPUs(t.node, l.GPUs, req.CPUsPerGPU, snap, others)
	if err != nil {
		return err
	}
	l.CPUs = cpus
	return nil
}

// ChooseCPUs picks n of each GPU's local cores (snap's), in the order of
// gpus: cores no lease of others has chosen first, then those the fewest
// have, then the lowest numbers; two GPUs on one socket get different
// cores while the socket has enough. A GPU whose local cores the node
// cannot tell, or that has fewer than n, is refused with what to do:
// dibs says so rather than guess.
func ChooseCPUs(node string, gpus []int, n int, snap nodeprobe.Snapshot, others []Lease) ([]string, error) {
	used := map[int]int{}
	for i := range others {
		for _, s := range others[i].CPUs {
			c, _ := nodeprobe.ParseCPUList(s)
			for _, x := range c {
				used[x]++
			}
		}
	}
	out := make([]string, 0, len(gpus))
	for _, gi := range gpus {
		local, err := gpuCPUs(snap, gi)
		if err != nil {
			return nil, err
		}
		if len(local) == 0 {
			return nil, refusal.Invalidf("GPU %d on %s reports no local CPUs (the node's %s backend cannot tell), so --cpus-per-gpu has none to choose from: drop it", gi, node, cmp.Or(string(snap.Host.Backend), "GPU"))
		}
		if len(local) < n {
			return nil, refusal.Invalidf("GPU %d on %s has %d local cores (%s): ask for at most %d with --cpus-per-gpu", gi, node, len(local), nodeprobe.FormatCPUList(local), len(local))
		}
		slices.SortStableFunc(local, func(a, b int) int { return cmp.Compare(used[a], used[b]) })
		pick := slices.Clone(local[:n])
		for _, x := range pick {
			used[x]++
		}
		out = append(out, nodeprobe.FormatCPUList(pick))
	}
	return out, nil
}

// gpuCPUs is GPU index's local cores in snap; none when the probe could
// not tell.
func gpuCPUs(snap nodeprobe.Snapshot, index int) ([]int, error) {
	for _, g := range snap.GPUs {
		if g.Index == index {
			c, err := nodeprobe.ParseCPUList(g.CPUs)
			if err != nil {
				return nil, refusal.Invalidf("GPU %d's local CPUs %s: %v", index, words.QuoteInput(g.CPUs), err)
			}
			return c, nil
		}
	}
	return nil, nil
}

// SessionCPUs is what l's session is bound to, one CPU list per GPU of
// the lease in its order: the cores chosen for it (--cpus-per-gpu), or
// each GPU's local cores. Nil means unbound: the holder asked for any CPU
// (--cpus any), or a GPU's local cores are unknown (no guessing).
func (l *Lease) SessionCPUs(snap nodeprobe.Snapshot) []string {
	if l.AnyCPU {
		return nil
	}
	if len(l.CPUs) > 0 {
		return slices.Clone(l.CPUs)
	}
	out := make([]string, 0, len(l.GPUs))
	for _, gi := range l.GPUs {
		c, err := gpuCPUs(snap, gi)
		if err != nil || len(c) == 0 {
			return nil
		}
		out = append(out, nodeprobe.FormatCPUList(c))
	}
	return out
}

// CPUUnion is the cores of per-GPU CPU lists together, as one list.
func CPUUnion(lists []string) string {
	var all []int
	for _, s := range lists {
		c, _ := nodeprobe.ParseCPUList(s)
		all = append(all, c...)
	}
	return nodeprobe.FormatCPUList(all)
}

// CPUsPerGPU is how many cores per GPU were chosen in lists (the first
// GPU's count: every GPU of a lease gets as many); 0 for none.
func CPUsPerGPU(lists []string) int {
	if len(lists) == 0 {
		return 0
	}
	c, _ := nodeprobe.ParseCPUList(lists[0])
	return len(c)
}

// CPUEnv is what a session bound to per-GPU lists is told: DIBS_CPUS (all
// its cores, what `docker run --cpuset-cpus` takes), DIBS_GPU_CPUS (each
// GPU's, ';'-joined, for one process per GPU) and, when its cores were
// chosen (--cpus-per-gpu), DIBS_CPUS_PER_GPU and OMP_NUM_THREADS: the
// cores divided among the workers the session starts (torchrun's
// processes; 1 for a plain command). Nil for none.
func (l *Lease) CPUEnv(lists []string, workers int) map[string]string {
	if len(lists) == 0 {
		return nil
	}
	union := CPUUnion(lists)
	env := map[string]string{"DIBS_CPUS": union, "DIBS_GPU_CPUS": strings.Join(lists, ";")}
	if len(l.CPUs) > 0 {
		c, _ := nodeprobe.ParseCPUList(union)
		env["DIBS_CPUS_PER_GPU"] = strconv.Itoa(CPUsPerGPU(l.CPUs))
		env["OMP_NUM_THREADS"] = strconv.Itoa(max(1, len(c)/max(1, workers)))
	}
	return env
}

// CoreShare is another lease that chose some of the same cores.
type CoreShare struct {
	Lease Lease
	// CPUs are the cores both chose, as a CPU list.
	CPUs string
}

// SharedCores lists the leases of others on l's node that chose some of
// the cores l chose, in id order: their data loaders will fight, and both
// holders should know.
func SharedCores(l Lease, others []Lease) []CoreShare {
	mine := map[int]bool{}
	for _, s := range l.CPUs {
		c, _ := nodeprobe.ParseCPUList(s)
		for _, x := range c {
			mine[x] = true
		}
	}
	if len(mine) == 0 {
		return nil
	}
	byID := map[string]CoreShare{}
	for _, o := range others {
		if o.ID == l.ID || o.Node != l.Node || len(o.CPUs) == 0 {
			continue
		}
		var both []int
		for _, s := range o.CPUs {
			c, _ := nodeprobe.ParseCPUList(s)
			for _, x := range c {
				if mine[x] {
					both = append(both, x)
				}
			}
		}
		if len(both) > 0 {
			byID[o.ID] = CoreShare{Lease: o, CPUs: nodeprobe.FormatCPUList(both)}
		}
	}
	var out []CoreShare
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		out = append(out, byID[id])
	}
	return out
}

// SharedCoresNotice says, for the holder of l, which leases chose some of
// its cores; "" when none did.
func SharedCoresNotice(l Lease, others []Lease) string {
	var parts []string
	for _, s := range SharedCores(l, others) {
		parts = append(parts, fmt.Sprintf("cores %s with %s's lease %s", s.CPUs, s.Lease.User, s.Lease.ID))
	}
	if len(parts) == 0 {
		return ""
	}
	return "your lease shares " + strings.Join(parts, ", ") + ": the GPUs' local cores were all chosen already, so your data loaders may compete (--cpus-per-gpu asks for fewer)"
}

// CoresUnknown is CoresLine for a node none of whose GPUs reports its
// local cores.
const CoresUnknown = "not reported by its GPUs: sessions run on any core"

// CoresLine says, for a node's board line, which cores are local to which
// GPUs ("GPUs 0-3: cores 0-31; GPUs 4-7: cores 32-63"), or that its GPUs
// report none, so nobody takes an unbound session for a bound one.
// Empty for a node with no GPUs.
func CoresLine(gpus []nodeprobe.GPU) string {
	if len(gpus) == 0 {
		return ""
	}
	var order []string
	by := map[string][]int{}
	for _, g := range gpus {
		if _, ok := by[g.CPUs]; !ok {
			order = append(order, g.CPUs)
		}
		by[g.CPUs] = append(by[g.CPUs], g.Index)
	}
	if len(order) == 1 && order[0] == "" {
		return CoresUnknown
	}
	parts := make([]string, 0, len(order))
	for _, cpus := range order {
		what := "cores " + cpus
		if cpus == "" {
			what = "no local CPUs reported"
		}
		word := "GPUs "
		if len(by[cpus]) == 1 {
			word = "GPU "
		}
		parts = append(parts, word+nodeprobe.FormatCPUList(by[cpus])+": "+what)
	}
	return strings.Join(parts, "; ")
}

// CoreUse is a lease that runs on some of a GPU's local cores, for the
// board's detail of that GPU.
type CoreUse struct {
	Lease Lease
	// CPUs are the GPU's cores the lease's session is bound to.
	CPUs string
}

// CoreUsers lists the leases of leases whose sessions run on cores local
// to g: those with chosen cores among them, and those holding a GPU with
// the same local cores (bound to all of them), in id order. A lease with
// --cpus any is left out.
func CoreUsers(g nodeprobe.GPU, gpus []nodeprobe.GPU, leases []Lease) []CoreUse {
	local, err := nodeprobe.ParseCPUList(g.CPUs)
	if err != nil || len(local) == 0 {
		return nil
	}
	in := map[int]bool{}
	for _, c := range local {
		in[c] = true
	}
	snap := nodeprobe.Snapshot{GPUs: gpus}
	var out []CoreUse
	for _, l := range leases {
		var both []int
		for _, s := range l.SessionCPUs(snap) {
			c, _ := nodeprobe.ParseCPUList(s)
			for _, x := range c {
				if in[x] {
					both = append(both, x)
				}
			}
		}
		if len(both) > 0 {
			out = append(out, CoreUse{Lease: l, CPUs: nodeprobe.FormatCPUList(both)})
		}
	}
	slices.SortFunc(out, func(a, b CoreUse) int { return strings.Compare(a.Lease.ID, b.Lease.ID) })
	return out
}
