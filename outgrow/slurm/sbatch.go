package slurm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Job is a dibs run as an sbatch script needs it: its shape, its time
// limit and its command.
type Job struct {
	// ID is the dibs queue entry or lease it came from; State says which
	// ("queued", "running", "finished").
	ID    string
	State string
	User  string
	// Name becomes --job-name (default: the ID).
	Name        string
	Nodes       int
	GPUsPerNode int
	// Model restricts the GPUs to a type (the entry's --model), written as
	// --gpus-per-node=<type>:<n>.
	Model string
	// MIG is the profile (3g.40gb) of the one MIG instance the run holds,
	// and MIGModel the model of the GPU it is on: the script asks for the
	// typed GRES `dibs export slurm` writes for it (MIGType). Without the
	// model the type cannot be named, and the script says so.
	MIG, MIGModel string
	// MemMiB is the memory budget the run had on a shared GPU. SLURM has
	// no such budget (gres/shard shares a GPU by count, and `dibs export
	// slurm` sets up none), so the script asks for a whole GPU and says so.
	MemMiB uint64
	// PeakMemMiB and MemTotalMiB are the most GPU memory a finished run
	// used on one GPU, of what that GPU had, as dibs measured (0: not
	// measured): the script notes it, so a person can ask for a smaller
	// GPU or a MIG slice.
	PeakMemMiB, MemTotalMiB uint64
	// Pools are the pools the run was kept to (its --pool) or, for a run
	// dibs knows only by its lease, the pools of the node it ran on; each
	// is a partition of `dibs export slurm` (PartitionOf). One becomes
	// --partition; a job names one partition, so several are a comment.
	Pools []string
	// Nodelist and Exclude are where it may run (its --node, --nodelist
	// and --exclude). SLURM's --exclude is dibs's; SLURM's --nodelist names
	// nodes a job must include, so it is written only when it names as
	// many nodes as the job takes (the same in both), else as a comment.
	Nodelist, Exclude []string
	Time              time.Duration
	Kind              lease.Kind
	// Command is nil when dibs did not keep it (a bare claim, a run its
	// node no longer keeps, another person's run): the script then stops
	// with a line saying where to put it.
	Command  []string
	Dir      string
	Torchrun bool
	// PerGPU runs one task per GPU (srun --ntasks-per-node=G), as dibs's
	// --per-gpu does.
	PerGPU bool
	Note   string
	// Array is a job array's tasks as --array takes them (0-19%4); each
	// task gets DIBS_ARRAY_INDEX from SLURM_ARRAY_TASK_ID.
	Array string
	// CPUsPerGPU is the cores per GPU the run asked for (--cpus-per-gpu),
	// written as sbatch's own; 0 writes none. AnyCPU is --cpus any: no
	// binding, so no --gpu-bind=closest either (dibs binds every other
	// session to its GPUs' local cores, as closest does).
	CPUsPerGPU int
	AnyCPU     bool
	// After are the dibs runs it waits for (afterok:ID, afterany:ID):
	// SLURM knows them by its own job ids, so the line is written
	// commented out, for the person to fill in.
	After []string
}

// DefaultMasterPort is the rendezvous port a gang uses when the script's
// environment names none (torchrun's own default).
const DefaultMasterPort = 29500

// Sbatch writes the sbatch script for j: one task per node, the GPUs per
// node, the time limit, and the command — for a gang through srun, with
// the rendezvous dibs would have given (MASTER_ADDR is the first node of
// the allocation, NODE_RANK SLURM's node id), and torchrun's c10d
// rendezvous on them when the run asked for torchrun.
func Sbatch(j Job) (string, error) {
	if j.Nodes < 1 {
		j.Nodes = 1
	}
	if j.GPUsPerNode < 1 {
		return "", fmt.Errorf("%s asks for no GPUs: nothing to write", j.ID)
	}
	name := j.Name
	if name == "" {
		name = j.ID
	}
	if name == "" {
		name = "dibs"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("#!/bin/bash")
	what := "a run"
	if j.State != "" {
		what = "a " + j.State + " run"
	}
	w("# Written by `dibs export sbatch %s` from %s of %s.", job.ShellWord(j.ID), what, job.ShellWord(j.User))
	if j.Note != "" {
		w("# Its note: %s", termsafe.OneLine(j.Note))
	}
	w("#SBATCH --job-name=%s", sbatchValue(name))
	w("#SBATCH --nodes=%d", j.Nodes)
	tasks := 1
	if j.PerGPU {
		tasks = j.GPUsPerNode
	}
	w("#SBATCH --ntasks-per-node=%d", tasks)
	gpus := strconv.Itoa(j.GPUsPerNode)
	switch {
	case j.MIG != "" && j.MIGModel != "":
		gpus = MIGType(j.MIGModel, j.MIG) + ":1"
	case j.MIG != "":
		w("# dibs ran it on a MIG instance (%s) of a GPU whose model it no longer knows: put the GRES type", termsafe.OneLine(j.MIG))
		w("# slurm.conf's Gres= gives that instance (gpu:<type>_%s) in place of this whole GPU.", termsafe.OneLine(strings.ToLower(j.MIG)))
		gpus = "1"
	case j.Model != "":
		gpus = Type(j.Model) + ":" + gpus
	}
	if j.MemMiB > 0 {
		w("# dibs ran it with a %s memory budget on a shared GPU. SLURM has no memory budget on a GPU, and", memSize(j.MemMiB))
		w("# `dibs export slurm` sets up no gres/shard (which shares by count): this asks for a whole GPU.")
		gpus = "1"
	}
	if j.PeakMemMiB > 0 && j.MemTotalMiB > 0 {
		w("# dibs measured a peak GPU memory of %s of %s on one GPU: a smaller GPU or a MIG slice may do.", memSize(j.PeakMemMiB), memSize(j.MemTotalMiB))
	}
	w("#SBATCH --gpus-per-node=%s", gpus)
	if j.CPUsPerGPU > 0 {
		w("#SBATCH --cpus-per-gpu=%d", j.CPUsPerGPU)
	}
	if !j.AnyCPU {
		w("#SBATCH --gpu-bind=closest")
	}
	var parts []string
	for _, p := range j.Pools {
		if name, ok := PartitionOf(p); ok && !slices.Contains(parts, name) {
			parts = append(parts, name)
		}
	}
	switch {
	case len(parts) == 1:
		w("#SBATCH --partition=%s", parts[0])
	case len(parts) > 1:
		w("# dibs kept it to nodes in every one of the pools %s; a job names one partition: keep the one that fits.", strings.Join(parts, ", "))
		w("##SBATCH --partition=%s", parts[0])
	}
	var left []string
	for _, p := range j.Pools {
		if _, ok := PartitionOf(p); !ok {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		w("# It was kept to pools whose names SLURM cannot take as partitions (%s): `dibs export slurm` left them out.", termsafe.OneLine(strings.Join(left, ", ")))
	}
	switch {
	case len(j.Nodelist) == j.Nodes:
		w("#SBATCH --nodelist=%s", sbatchValue(strings.Join(j.Nodelist, ",")))
	case len(j.Nodelist) > 0:
		w("# dibs let it run on any %d of %s; SLURM's --nodelist names nodes a job must include: keep %d of them.", j.Nodes, termsafe.OneLine(strings.Join(j.Nodelist, ",")), j.Nodes)
		w("##SBATCH --nodelist=%s", sbatchValue(strings.Join(j.Nodelist, ",")))
	}
	if len(j.Exclude) > 0 {
		w("#SBATCH --exclude=%s", sbatchValue(strings.Join(j.Exclude, ",")))
	}
	if j.Time > 0 {
		w("#SBATCH --time=%s", Time(j.Time))
	}
	if j.Dir != "" {
		w("#SBATCH --chdir=%s", sbatchValue(j.Dir))
	}
	if j.Array != "" {
		w("#SBATCH --array=%s", sbatchValue(j.Array))
	}
	if len(j.After) > 0 {
		w("# It waits for dibs runs; submit those first and put their SLURM job ids in place of the dibs ids, then drop one #:")
		w("##SBATCH --dependency=%s", sbatchValue(strings.Join(j.After, ",")))
	}
	w("set -euo pipefail")
	if j.Array != "" {
		w("# Each task's index, as dibs gives it.")
		w("export DIBS_ARRAY_INDEX=$SLURM_ARRAY_TASK_ID DIBS_ARRAY_ID=slurm-$SLURM_ARRAY_JOB_ID")
	}
	cmd := job.ShellLine(j.Command)
	if j.Command == nil {
		w("# dibs kept no command for this run (a bare claim, or one its node no longer keeps): put yours in place of these two lines")
		w("# (or export it again with the command: dibs export sbatch %s -- CMD ...).", job.ShellWord(j.ID))
		w("echo 'dibs export sbatch: the command of %s was not recorded; edit this script' >&2", job.ShellWord(j.ID))
		w("exit 1")
		return b.String(), nil
	}
	if len(j.Command) == 0 {
		cmd = `"${SHELL:-/bin/bash}" -l`
		w("# An interactive dibs session: as a batch job it runs your login shell; `salloc` suits it better.")
	}
	torchrunCmd := job.ShellLine(queue.TorchrunProgram(j.Command))
	if j.Nodes == 1 && !j.PerGPU {
		if j.Torchrun {
			w("# torchrun's flags in the spelling every torch version accepts; --redirects/--tee for Debian 12's torch 1.13.")
			w("exec torchrun --standalone --nproc_per_node=%d --redirects=1 --tee=1 %s", j.GPUsPerNode, torchrunCmd)
		} else {
			w("exec %s", cmd)
		}
		return b.String(), nil
	}
	w("# The gang's rendezvous, as dibs gave it to every rank, from SLURM's allocation.")
	w(`MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)`)
	w("MASTER_PORT=${MASTER_PORT:-%d}", DefaultMasterPort)
	w("NNODES=$SLURM_NNODES")
	w("NPROC_PER_NODE=%d", j.GPUsPerNode)
	w("DIBS_GANG_ID=slurm-$SLURM_JOB_ID")
	w("export MASTER_ADDR MASTER_PORT NNODES NPROC_PER_NODE DIBS_GANG_ID")
	switch {
	case j.Torchrun:
		w(`srun --ntasks-per-node=1 torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=%d --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv_id="$SLURM_JOB_ID" --redirects=1 --tee=1 %s`, j.GPUsPerNode, torchrunCmd)
	case j.PerGPU:
		w("# One task per GPU, with the env:// variables dibs's --per-gpu sets.")
		w(`srun --ntasks-per-node=%d bash -c 'NODE_RANK=$SLURM_NODEID GROUP_RANK=$SLURM_NODEID RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=%d exec "$@"' rank %s`, j.GPUsPerNode, j.GPUsPerNode, cmd)
	default:
		w("# One process per node: RANK is the node's, WORLD_SIZE the number of nodes.")
		w(`srun --ntasks-per-node=1 bash -c 'NODE_RANK=$SLURM_NODEID RANK=$SLURM_NODEID LOCAL_RANK=0 WORLD_SIZE=$SLURM_NNODES LOCAL_WORLD_SIZE=1 exec "$@"' rank %s`, cmd)
	}
	return b.String(), nil
}

// sbatchValue is a value on an #SBATCH line: sbatch reads to the end of the
// line, so only what would end or confuse it is replaced.
func sbatchValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '#' {
			return '_'
		}
		return r
	}, s)
}

// memSize writes a memory budget as dibs reads one (--mem 10G, 512M).
func memSize(mib uint64) string {
	if mib >= 1024 && mib%1024 == 0 {
		return strconv.FormatUint(mib/1024, 10) + "G"
	}
	return strconv.FormatUint(mib, 10) + "M"
}
