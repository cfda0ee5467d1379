// Package slurm writes the way out of dibs: the slurm.conf, gres.conf and
// cgroup.conf for the cluster dibs already knows (its nodes, GPUs, time
// limits and fair-share settings), and an sbatch script for a dibs run.
// It is pure: the caller gathers the cluster (from the agents) and writes
// the files; here the text is decided, so it can be checked against golden
// files and then against a real slurmctld.
package slurm

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// Node is one node as the export reads it.
type Node struct {
	Name string
	// Addr is the host the other nodes reach it at (its gossip address
	// without the port); empty when unknown.
	Addr string
	Host nodeprobe.Host
	GPUs []nodeprobe.GPU
	// Down: the node is not alive now; it is written (it is part of the
	// cluster) with what it last said, and the header says so.
	Down bool
}

// Cluster is everything the export carries over.
type Cluster struct {
	// Name is dibs's cluster name; it becomes ClusterName (lowercased,
	// SLURM's rule).
	Name string
	// Controller is the node slurmctld runs on; empty means the first node.
	Controller string
	Nodes      []Node
	Policy     lease.Policy
	Sched      queue.SchedConfig
	// Version is the dibs version that wrote the files, for the header.
	Version string
}

// Options are the few site settings the export cannot learn from dibs.
type Options struct {
	// DevDir is where the GPUs' device files are (default /dev); a test
	// points it at fake device nodes.
	DevDir string
}

// Files are the three configuration files, ready to write.
type Files struct {
	SlurmConf  string
	GresConf   string
	CgroupConf string
}

// MemoryHeadroom is the part of a node's memory RealMemory leaves out:
// slurmd drains a node that reports less memory than configured, and the
// kernel's figure moves a little between boots and kernels.
const MemoryHeadroom = 0.02

// Export writes the configuration for c. It refuses a cluster with no
// node, and a node name SLURM cannot take.
func Export(c Cluster, o Options) (Files, error) {
	if len(c.Nodes) == 0 {
		return Files{}, fmt.Errorf("no node to export: is the agent in a cluster? (`dibs ls` shows the nodes)")
	}
	if o.DevDir == "" {
		o.DevDir = "/dev"
	}
	nodes := slices.Clone(c.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if err := words.ValidNodeName(n.Name); err != nil {
			return Files{}, fmt.Errorf("export node: %w", err)
		}
	}
	ctl := c.Controller
	if ctl == "" {
		ctl = nodes[0].Name
	}
	p, s := c.Policy, c.Sched.WithDefaults()
	if p.IsZero() {
		p = lease.DefaultPolicy()
	}
	maxTime := max(p.MaxInteractive, p.MaxBatch)

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	version := c.Version
	if version == "" {
		version = "dev"
	}
	w("# slurm.conf written by `dibs export slurm` (dibs %s) for the %d-node cluster %q as dibs sees it.", version, len(nodes), c.Name)
	w("#")
	w("# Carried over from dibs:")
	w("#   - one NodeName line per node: CPUs, RealMemory (%d%% of the memory the probe saw) and", int(math.Round(100*(1-MemoryHeadroom))))
	w("#     Gres=gpu:<type>:<n> from each agent's hardware probe; gres.conf names the GPUs' device files")
	w("#   - time limits: MaxTime=%s is dibs's longest lease (max_interactive %s, max_batch %s);",
		Time(maxTime), words.FormatDuration(p.MaxInteractive), words.FormatDuration(p.MaxBatch))
	w("#     DefaultTime=%s is dibs's batch default (sbatch jobs are batch); give salloc --time=%s,", Time(p.DefaultBatch), Time(p.DefaultInteractive))
	w("#     dibs's interactive default, for sessions")
	w("#   - fair-share: priority/multifactor with PriorityDecayHalfLife=%s (dibs's [queue] half_life),", Time(s.HalfLife))
	w("#     the fair-share and age weights (%g, %g) and PriorityMaxAge=%s, as dibs ranks its queue", s.WeightFairShare, s.WeightAge, Time(s.MaxAge))
	w("#   - the SIGTERM-to-SIGKILL grace at a time limit: KillWait=%d (dibs's signal_grace)", int(math.Ceil(p.SignalGrace.Seconds())))
	w("#   - backfill: sched/backfill, as dibs backfills around the head of its queue (EASY)")
	parts := partitions(nodes, p)
	for _, pt := range parts {
		w("#   - pool %s: PartitionName=%s on its nodes (%s), MaxTime=%s%s", pt.name, pt.name, strings.Join(pt.nodes, ","), Time(pt.maxTime), pt.why)
	}
	migNodes := migNodesOf(nodes)
	if len(migNodes) > 0 {
		w("#   - MIG layout: each instance is a typed GRES, gpu:<type>_<profile> (Gres=gpu:a100_3g.40gb:1 …);")
		w("#     gres.conf lets NVML find their device files on %s (AutoDetect=nvml)", strings.Join(migNodes, ", "))
	}
	w("# Not carried over (see docs/slurm.md):")
	w("#   - fair-share needs slurmdbd: until AccountingStorageType=accounting_storage/slurmdbd, every")
	w("#     user's fair-share factor is the same; then add each user (sacctmgr add user NAME account=team)")
	for _, line := range shareLines(clusterName(c.Name), s) {
		w("#     %s", line)
	}
	w("#   - idle reclaim (dibs's idle_reclaim_after %s): SLURM never takes back an idle allocation;", words.FormatDuration(s.IdleReclaimAfter))
	w("#     only the time limit ends it")
	w("#   - end_action %s: SLURM always ends a job at its limit", p.EndAction)
	w("#   - GPU cores (gres.conf Cores=): dibs does not know the GPUs' CPU affinity; add them, or use AutoDetect=nvml")
	w("#   - leases held now: they keep running outside SLURM; drain a node (dibs release) before slurmd takes it")
	for _, pt := range parts {
		for _, line := range pt.notCarried {
			w("#   - pool %s: %s", pt.name, line)
		}
	}
	w("#   - shared GPUs with memory budgets (--mem): SLURM's nearest is gres/shard (GresTypes=gpu,shard),")
	w("#     which shares a GPU by count, not memory; not set up")
	w("#   - bookings (dibs book): make them reservations (scontrol create reservation … StartTime= Duration=)")
	for _, n := range nodes {
		if n.Down {
			w("#   - %s was down when this was written: its line is what it last said", n.Name)
		}
	}
	w("# Site settings to check: SlurmctldHost, SlurmUser, the spool and log paths, the munge key on every node.")
	w("")
	w("ClusterName=%s", clusterName(c.Name))
	w("SlurmctldHost=%s", hostSpec(ctl, addrOf(nodes, ctl)))
	w("AuthType=auth/munge")
	w("CredType=cred/munge")
	w("SlurmUser=slurm")
	w("StateSaveLocation=/var/spool/slurmctld")
	w("SlurmdSpoolDir=/var/spool/slurmd")
	w("SlurmctldPidFile=/run/slurmctld.pid")
	w("SlurmdPidFile=/run/slurmd.pid")
	w("SlurmctldLogFile=/var/log/slurm/slurmctld.log")
	w("SlurmdLogFile=/var/log/slurm/slurmd.log")
	w("ReturnToService=2")
	w("MpiDefault=none")
	w("# cgroups enforce what dibs could only show: a job sees its GPUs and no others (cgroup.conf).")
	w("ProctrackType=proctrack/cgroup")
	w("TaskPlugin=task/cgroup,task/affinity")
	w("SelectType=select/cons_tres")
	w("SelectTypeParameters=CR_Core_Memory")
	w("GresTypes=gpu")
	w("SchedulerType=sched/backfill")
	w("PriorityType=priority/multifactor")
	w("PriorityDecayHalfLife=%s", Time(s.HalfLife))
	w("PriorityWeightFairshare=%d", int(math.Round(s.WeightFairShare)))
	w("PriorityWeightAge=%d", int(math.Round(s.WeightAge)))
	w("PriorityMaxAge=%s", Time(s.MaxAge))
	w("KillWait=%d", int(math.Ceil(p.SignalGrace.Seconds())))
	w("JobAcctGatherType=jobacct_gather/none")
	w("AccountingStorageType=accounting_storage/none")
	w("")
	for _, n := range nodes {
		line := "NodeName=" + n.Name
		if n.Addr != "" {
			line += " NodeAddr=" + n.Addr
		}
		if n.Host.CPUs > 0 {
			line += " CPUs=" + strconv.Itoa(n.Host.CPUs)
		}
		if m := realMemory(n.Host.MemoryMiB); m > 0 {
			line += " RealMemory=" + strconv.FormatUint(m, 10)
		}
		if g := gresOf(n.GPUs); g != "" {
			line += " Gres=" + g
		}
		w("%s State=UNKNOWN", line)
	}
	w("PartitionName=gpu Nodes=ALL Default=YES MaxTime=%s DefaultTime=%s State=UP", Time(maxTime), Time(p.DefaultBatch))
	for _, pt := range parts {
		w("PartitionName=%s Nodes=%s MaxTime=%s DefaultTime=%s State=UP", pt.name, strings.Join(pt.nodes, ","), Time(pt.maxTime), Time(min(p.DefaultBatch, pt.maxTime)))
	}

	var g strings.Builder
	fmt.Fprintf(&g, "# gres.conf written by `dibs export slurm`: each node's GPUs by type and device file.\n")
	fmt.Fprintf(&g, "# File=%s/nvidia<N> takes N to be the GPU's index as nvidia-smi numbers it, which is its device\n", o.DevDir)
	fmt.Fprintf(&g, "# minor on most machines (`nvidia-smi -q | grep Minor` says); AutoDetect=nvml finds both.\n")
	for _, n := range nodes {
		if slices.Contains(migNodes, n.Name) {
			// A MIG instance's device files (/dev/nvidia-caps/…) are not
			// known to dibs: NVML finds them, with the whole GPUs beside.
			fmt.Fprintf(&g, "# %s has GPUs split into MIG instances (%s): NVML finds them and their device files.\n", n.Name, strings.Join(gresTypes(n.GPUs), ", "))
			fmt.Fprintf(&g, "NodeName=%s AutoDetect=nvml\n", n.Name)
			continue
		}
		for _, r := range gresRanges(n.GPUs) {
			fmt.Fprintf(&g, "NodeName=%s Name=gpu Type=%s File=%s/nvidia%s\n", n.Name, r.typ, o.DevDir, r.spec)
		}
	}

	cg := "# cgroup.conf written by `dibs export slurm`: SLURM enforces what dibs's board only showed —\n" +
		"# a job sees only its GPUs (no squatters), its cores and its memory.\n" +
		"CgroupPlugin=autodetect\n" +
		"ConstrainCores=yes\n" +
		"ConstrainDevices=yes\n" +
		"ConstrainRAMSpace=yes\n"
	return Files{SlurmConf: b.String(), GresConf: g.String(), CgroupConf: cg}, nil
}

// shareLines are the sacctmgr commands that carry dibs's shares and
// quotas into slurmdbd, as comment lines.
func shareLines(cluster string, s queue.SchedConfig) []string {
	users := map[string]bool{}
	for u := range s.Shares {
		users[u] = true
	}
	for u := range s.Quotas {
		users[u] = true
	}
	out := []string{"sacctmgr add cluster " + cluster, "sacctmgr add account team cluster=" + cluster}
	for _, u := range slices.Sorted(func(yield func(string) bool) {
		for u := range users {
			if !yield(u) {
				return
			}
		}
	}) {
		if !words.ValidUserName(u) {
			continue
		}
		line := "sacctmgr add user " + u + " account=team"
		if sh, ok := s.Shares[u]; ok {
			line += fmt.Sprintf(" fairshare=%d", max(1, int(math.Round(sh*100))))
		}
		if q, ok := s.Quotas[u]; ok {
			line += fmt.Sprintf(" grptres=gres/gpu=%d", q)
		}
		out = append(out, line)
	}
	return out
}

func addrOf(nodes []Node, name string) string {
	for _, n := range nodes {
		if n.Name == name {
			return n.Addr
		}
	}
	return ""
}

func hostSpec(name, addr string) string {
	if addr == "" {
		return name
	}
	return name + "(" + addr + ")"
}

// clusterName is SLURM's ClusterName: lowercase, letters, digits and '_'
// (slurmdbd uses it as a table name).
func clusterName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r == '-' || r == '.':
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "dibs"
	}
	return b.String()
}

func realMemory(mib uint64) uint64 { return uint64(float64(mib) * (1 - MemoryHeadroom)) }

// Type turns a GPU model into a gres type: "NVIDIA H100 80GB HBM3" is h100,
// "NVIDIA A100-SXM4-40GB" a100, "NVIDIA GeForce RTX 4090" rtx4090,
// "Tesla V100-SXM2-32GB" v100. Unknown models become "gpu".
func Type(model string) string {
	var words []string
	for _, f := range strings.FieldsFunc(model, func(r rune) bool { return r == ' ' || r == '-' || r == '_' }) {
		switch strings.ToLower(f) {
		case "nvidia", "geforce", "tesla", "quadro":
			continue
		}
		words = append(words, f)
	}
	if len(words) == 0 {
		return "gpu"
	}
	// A family word alone (RTX, GTX, PRO) says little: take words up to
	// the first with a number in it, three at most.
	t := words[0]
	for i := 1; i < len(words) && i < 3 && !strings.ContainsFunc(t, unicode.IsDigit); i++ {
		t += words[i]
	}
	var b strings.Builder
	for _, r := range strings.ToLower(t) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "gpu"
	}
	return b.String()
}

// MIGType is the GRES type of a MIG instance of profile on a GPU of model:
// <type>_<profile> (a100_3g.40gb), as SLURM's NVML detection names it. The
// one home of that name: slurm.conf's Gres= counts instances by it, and an
// sbatch script for a MIG run asks for one by it.
func MIGType(model, profile string) string {
	return Type(model) + "_" + strings.ToLower(profile)
}

// PartitionOf is the partition `dibs export slurm` writes for pool tag,
// and whether it writes one: a tag SLURM cannot take as a partition name is
// left out, and "gpu" is the default partition every node is in.
func PartitionOf(tag string) (string, bool) {
	if words.ValidNodeName(tag) != nil {
		return "", false
	}
	if strings.EqualFold(tag, "gpu") {
		return "gpu", true
	}
	return tag, true
}

// gresOf is a node's Gres= value: gpu:<type>:<n> per type, in index order
// of the first GPU of each type; a GPU split into MIG instances counts as
// its instances, each typed <type>_<profile> (a100_3g.40gb), as SLURM's
// NVML detection names them.
func gresOf(gpus []nodeprobe.GPU) string {
	types, count := gresCount(gpus)
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("gpu:%s:%d", t, count[t])
	}
	return strings.Join(parts, ",")
}

// gresCount counts a node's GPU units by GRES type, types in index order.
func gresCount(gpus []nodeprobe.GPU) ([]string, map[string]int) {
	var types []string
	count := map[string]int{}
	add := func(t string) {
		if count[t] == 0 {
			types = append(types, t)
		}
		count[t]++
	}
	for _, g := range sortedGPUs(gpus) {
		if g.MIG == nodeprobe.MIGEnabled {
			for _, d := range g.MIGDevices {
				add(MIGType(g.Model, d.Profile))
			}
			continue
		}
		add(Type(g.Model))
	}
	return types, count
}

// gresTypes lists a node's GRES types with their counts, for a comment.
func gresTypes(gpus []nodeprobe.GPU) []string {
	types, count := gresCount(gpus)
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = fmt.Sprintf("%s×%d", t, count[t])
	}
	return out
}

// migNodesOf names the nodes with a GPU split into MIG instances.
func migNodesOf(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		if slices.ContainsFunc(n.GPUs, func(g nodeprobe.GPU) bool { return g.MIG == nodeprobe.MIGEnabled }) {
			out = append(out, n.Name)
		}
	}
	return out
}

// partition is one of dibs's pools (a node tag) as a SLURM partition.
type partition struct {
	name    string
	nodes   []string
	maxTime time.Duration
	// why says where MaxTime came from; notCarried lists the pool's limits
	// a partition cannot hold, each with what to do.
	why        string
	notCarried []string
}

// partitions turns every pool (every tag a node carries) into a
// partition of its nodes, with the pool's max_time; a pool's users and
// max_gpus are listed as not carried, with the commands that would.
func partitions(nodes []Node, p lease.Policy) []partition {
	byTag := map[string][]string{}
	var tags []string
	for _, n := range nodes {
		for _, t := range n.Host.Tags {
			if name, ok := PartitionOf(t); !ok || name == "gpu" {
				continue // not a partition name SLURM takes, or the default's
			}
			if _, ok := byTag[t]; !ok {
				tags = append(tags, t)
			}
			if !slices.Contains(byTag[t], n.Name) {
				byTag[t] = append(byTag[t], n.Name)
			}
		}
	}
	slices.Sort(tags)
	maxTime := max(p.MaxInteractive, p.MaxBatch)
	var out []partition
	for _, t := range tags {
		pt := partition{name: t, nodes: byTag[t], maxTime: maxTime, why: " (dibs's longest lease)"}
		if pl, ok := p.Pools[t]; ok {
			if pl.MaxTime > 0 {
				pt.maxTime, pt.why = min(pl.MaxTime, maxTime), " (the pool's max_time)"
			}
			if len(pl.Users) > 0 {
				pt.notCarried = append(pt.notCarried, fmt.Sprintf("open to %s only: a partition admits by group or account; make a group of them and add AllowGroups=GROUP to its line", strings.Join(pl.Users, ", ")))
			}
			if pl.MaxGPUs > 0 {
				pt.notCarried = append(pt.notCarried, fmt.Sprintf("max_gpus %d per person: with slurmdbd, sacctmgr add qos %s MaxTRESPerUser=gres/gpu=%d, then QOS=%s on its line", pl.MaxGPUs, t, pl.MaxGPUs, t))
			}
		}
		out = append(out, pt)
	}
	return out
}

type gresRange struct{ typ, spec string }

// gresRanges groups a node's GPUs into runs of consecutive indices of one
// type: nvidia[0-3] for a run, nvidia5 for one GPU.
func gresRanges(gpus []nodeprobe.GPU) []gresRange {
	var out []gresRange
	gs := sortedGPUs(gpus)
	for i := 0; i < len(gs); {
		t := Type(gs[i].Model)
		j := i + 1
		for j < len(gs) && Type(gs[j].Model) == t && gs[j].Index == gs[j-1].Index+1 {
			j++
		}
		spec := strconv.Itoa(gs[i].Index)
		if j-i > 1 {
			spec = fmt.Sprintf("[%d-%d]", gs[i].Index, gs[j-1].Index)
		}
		out = append(out, gresRange{typ: t, spec: spec})
		i = j
	}
	return out
}

func sortedGPUs(gpus []nodeprobe.GPU) []nodeprobe.GPU {
	gs := slices.Clone(gpus)
	slices.SortFunc(gs, func(a, b nodeprobe.GPU) int { return cmp.Compare(a.Index, b.Index) })
	return gs
}

// Time writes a duration as SLURM reads a time limit: days-hours:minutes:
// seconds, minutes rounded up (SLURM counts limits in minutes).
func Time(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	m := int64(math.Ceil(d.Minutes()))
	days, h, min := m/(24*60), (m/60)%24, m%60
	if days > 0 {
		return fmt.Sprintf("%d-%02d:%02d:00", days, h, min)
	}
	return fmt.Sprintf("%d:%02d:00", h, min)
}
