package main

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/k8s"
	"github.com/dibs-gpu/dibs/outgrow/slurm"
	"github.com/dibs-gpu/dibs/service"
)

func exportCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the way out: SLURM's config for this cluster, sbatch scripts for dibs runs, Kubernetes manifests for services",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(exportSlurmCmd(c), exportSbatchCmd(c), exportK8sCmd(c))
	return cmd
}

func exportSlurmCmd(c *cli) *cobra.Command {
	var out, devDir, controller string
	var force bool
	cmd := &cobra.Command{
		Use:   "slurm",
		Short: "Write slurm.conf, gres.conf and cgroup.conf for the cluster as dibs sees it",
		Long: `Write slurm.conf, gres.conf and cgroup.conf for the cluster as dibs sees it: a NodeName
line per node with its CPUs, memory and GPUs, the GPUs' device files, one partition
with dibs's time limits, fair-share with dibs's half-life. Each file's header says
what was carried over and what was not; docs/slurm.md walks through the move.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			b, err := cl.Board(ctx)
			if err != nil {
				return err
			}
			rep, err := cl.Doctor(ctx, api.DoctorRequest{SkipHistory: true})
			if err != nil {
				return err
			}
			cluster := slurm.Cluster{Name: "dibs", Controller: controller, Policy: rep.Config.Policy(), Sched: rep.Config.Sched()}
			if cluster.Controller == "" {
				cluster.Controller = b.Self
			}
			for _, h := range rep.Nodes {
				if h.Self && h.Report != nil {
					cluster.Version = h.Report.Version
					if h.Report.Cluster.Name != "" {
						cluster.Name = h.Report.Cluster.Name
					}
				}
			}
			for _, n := range b.Nodes {
				sn := slurm.Node{Name: n.Name, Host: n.Host, Down: n.State != api.NodeAlive}
				if host, _, err := net.SplitHostPort(n.Addr); err == nil && host != "" && host != "0.0.0.0" && host != "::" {
					sn.Addr = host
				}
				for _, g := range n.GPUs {
					sn.GPUs = append(sn.GPUs, g.GPU)
				}
				cluster.Nodes = append(cluster.Nodes, sn)
			}
			files, err := slurm.Export(cluster, slurm.Options{DevDir: devDir})
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			for _, f := range []struct{ name, text string }{
				{"slurm.conf", files.SlurmConf}, {"gres.conf", files.GresConf}, {"cgroup.conf", files.CgroupConf},
			} {
				path := filepath.Join(out, f.name)
				if _, err := os.Lstat(path); err == nil && !force {
					return fmt.Errorf("%s exists: pass --force to overwrite it, or --out another directory", path)
				}
				if err := os.WriteFile(path, []byte(f.text), 0o644); err != nil {
					return fmt.Errorf("write %s: %w", path, err)
				}
				fmt.Fprintf(c.stdout, "wrote %s\n", path)
			}
			fmt.Fprintf(c.stdout, "next: read each file's header, then docs/slurm.md (munge key, slurmctld on %s, slurmd on every node)\n", safe(cluster.Controller))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", ".", "directory to write the three files to")
	fl.StringVar(&devDir, "dev-dir", "/dev", "where the GPUs' device files (nvidia0, ...) are")
	fl.StringVar(&controller, "controller", "", "node to run slurmctld on (default: the node you run this on)")
	fl.BoolVar(&force, "force", false, "overwrite files that exist")
	return cmd
}

func exportSbatchCmd(c *cli) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "sbatch ID [-- CMD ...]",
		Short: "Turn a queued, running or finished dibs run (gangs too) into an sbatch script",
		Long: `Turn a dibs run — a queue id (node01-q7) or a lease id (node01-42), queued, running or
finished, gangs included — into an sbatch script: --nodes, --gpus-per-node, --time and
the command, a gang's ranks through srun with the rendezvous SLURM provides. The
command is yours (and admins') to see: queued entries keep theirs, and each node keeps
the commands of the runs it started — the newest 64 per person, 64 KiB at most. For a
run without one (a bare claim) give it after --.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var command []string
			if n := cmd.ArgsLenAtDash(); n >= 0 {
				if n != 1 {
					return fmt.Errorf("give one run id before --, got %d", n)
				}
				command = args[1:]
			} else if len(args) > 1 {
				return fmt.Errorf("give one run id (and the command after --), got %d arguments", len(args))
			}
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			rec, err := cl.Run(ctx, id)
			if err != nil {
				return err
			}
			job, err := sbatchJob(rec)
			if err != nil {
				return err
			}
			if rec.Entry != nil && (rec.Entry.MIG != "" || rec.Entry.MemMiB > 0 || len(rec.Entry.Tags) > 0) || len(rec.Lease) > 0 {
				// What of a GPU it held and where: the board knows the
				// GPUs' models and the nodes' pools.
				b, err := cl.Board(ctx)
				if err != nil {
					return err
				}
				sbatchUnit(&job, rec, b)
			}
			if command != nil {
				job.Command = command
			}
			script, err := slurm.Sbatch(job)
			if err != nil {
				return err
			}
			if out == "" {
				_, err = fmt.Fprint(c.stdout, script)
				return err
			}
			if err := os.WriteFile(out, []byte(script), 0o755); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
			fmt.Fprintf(c.stdout, "wrote %s: submit it with `sbatch %s`\n", out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the script to this file (default: print it)")
	return cmd
}

// sbatchJob is what a script needs of a run, from the entry when dibs
// still has it, else from its leases or ledger entries.
func sbatchJob(rec api.RunRecord) (slurm.Job, error) {
	j := slurm.Job{ID: rec.ID, State: rec.State}
	switch {
	case rec.Entry != nil:
		e := rec.Entry
		j.User, j.Nodes, j.GPUsPerNode, j.Model, j.Time, j.Kind, j.Note = e.User, e.Nodes, e.GPUsPerNode, e.Model, e.Duration, e.Kind, e.Note
		j.CPUsPerGPU, j.AnyCPU = e.CPUsPerGPU, e.AnyCPU
		j.Command = []string{}
		if e.Array != nil {
			j.Array = e.Array.String()
		}
		j.Nodelist, j.Exclude = e.Only, e.Exclude
		if e.Node != "" {
			j.Nodelist = []string{e.Node}
		}
		for _, d := range e.After {
			j.After = append(j.After, d.String())
		}
		if e.Job != nil {
			j.Name, j.Command, j.Dir, j.Torchrun, j.PerGPU = e.Job.Name, e.Job.Command, e.Job.Dir, e.Job.Torchrun, e.Job.PerGPU
			if e.Job.Kept {
				j.Command = nil // another person's run: dibs shows its command only to them
			}
		}
	case len(rec.Lease) > 0:
		l := rec.Lease[0]
		j.User, j.Nodes, j.GPUsPerNode, j.Time, j.Kind, j.Note = l.User, len(rec.Lease), len(l.GPUs), l.ExpiresAt.Sub(l.StartedAt), l.Kind, l.Note
		j.CPUsPerGPU, j.AnyCPU = lease.CPUsPerGPU(l.CPUs), l.AnyCPU
	case len(rec.Ended) > 0:
		e := rec.Ended[0]
		j.User, j.Nodes, j.GPUsPerNode, j.Time, j.Kind = e.User, len(rec.Ended), len(e.GPUs), e.Limit, e.Kind
	default:
		return j, fmt.Errorf("the agent said nothing of %s", rec.ID)
	}
	if rec.Entry == nil && rec.Job != nil && len(rec.Job.Command) > 0 {
		// The command its node kept (for its holder and admins).
		j.Name, j.Command, j.Dir, j.Torchrun, j.PerGPU = rec.Job.Name, rec.Job.Command, rec.Job.Dir, rec.Job.Torchrun, rec.Job.PerGPU
	}
	if j.Kind == "" {
		j.Kind = lease.KindInteractive
	}
	for _, e := range rec.Ended {
		if e.Figures == nil {
			continue
		}
		for _, g := range e.Figures.GPUs {
			if g.PeakMemMiB >= j.PeakMemMiB {
				j.PeakMemMiB, j.MemTotalMiB = g.PeakMemMiB, g.MemTotalMiB
			}
		}
	}
	return j, nil
}

// sbatchUnit adds what of a GPU the run held and where it was kept, so the
// script asks SLURM for the same: a MIG instance as the typed GRES `dibs
// export slurm` writes (its profile and its GPU's model, from the lease's
// GPU or the board's instances of the profile asked for), a memory budget,
// and the pools it asked for (the pools of the node a lease ran on, when
// dibs knows the run only by its lease). A finished run's ledger keeps
// none of these.
func sbatchUnit(j *slurm.Job, rec api.RunRecord, b api.Board) {
	if len(rec.Lease) > 0 {
		l := rec.Lease[0]
		j.MemMiB = l.MemMiB
		for _, n := range b.Nodes {
			if n.Name != l.Node {
				continue
			}
			j.Pools = n.Host.Tags
			for _, g := range n.GPUs {
				if l.MIG == "" || len(l.GPUs) == 0 || g.Index != l.GPUs[0] {
					continue
				}
				for _, d := range g.MIGDevices {
					if d.UUID == l.MIG {
						j.MIG, j.MIGModel = d.Profile, g.Model
					}
				}
			}
		}
	}
	e := rec.Entry
	if e == nil {
		return
	}
	j.MemMiB, j.Pools = e.MemMiB, e.Tags
	if e.MIG == "" || j.MIG != "" {
		return
	}
	// The instance it asks for: a profile, a UUID or GPU:INDEX, matched
	// against the instances the nodes it may run on have.
	models := map[string]string{} // gres type → a model
	for _, n := range b.Nodes {
		if e.Node != "" && n.Name != e.Node {
			continue
		}
		for _, g := range n.GPUs {
			if e.Model != "" && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(e.Model)) {
				continue
			}
			for _, d := range g.MIGDevices {
				if strings.EqualFold(d.Profile, e.MIG) || d.UUID == e.MIG || fmt.Sprintf("%d:%d", g.Index, d.Index) == e.MIG {
					j.MIG = d.Profile
					models[slurm.MIGType(g.Model, d.Profile)] = g.Model
				}
			}
		}
	}
	switch {
	case len(models) == 1:
		for _, m := range models {
			j.MIGModel = m
		}
	case j.MIG == "" && !strings.HasPrefix(e.MIG, "MIG-") && !strings.Contains(e.MIG, ":"):
		j.MIG, j.MIGModel = e.MIG, e.Model // a profile no node has now
	case j.MIG == "":
		j.MIG = e.MIG
	}
	// Several GPU models have the profile: with no model asked, SLURM
	// must be told which; the script says so (MIGModel empty).
}

func exportK8sCmd(c *cli) *cobra.Command {
	var out, owner string
	cmd := &cobra.Command{
		Use:   "k8s NAME",
		Short: "Write the Kubernetes Deployment and Service for a dibs service (kubectl apply -f -)",
		Long: `Write the Kubernetes Deployment and Service a team applies when it moves a dibs
service (dibs serve) to Kubernetes: its replicas, its GPUs as the NVIDIA device
plugin names them (a MIG instance as nvidia.com/mig-<profile>), its command under
/bin/sh -c, its carried environment (a variable whose name holds TOKEN, KEY, SECRET
or PASSWORD as a reference to a Secret, never its value; so is a secret on the command
line, --api-key VALUE or HF_TOKEN=VALUE), its port as a ClusterIP
Service, and its health check as probes. What has no equivalent (a memory budget on
a shared GPU, pools, bound cores) is a comment. dibs runs bare processes and
Kubernetes runs containers: fill in the image the manifest leaves as a placeholder.
Yours by name; an admin may name another person's with --owner.`,
		Example: `  dibs export k8s llm > llm.yaml    # fill in image:, then
  kubectl apply -f llm.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			b, err := c.client().Board(ctx)
			if err != nil {
				return err
			}
			s, err := k8sService(b, args[0], owner)
			if err != nil {
				return err
			}
			m, err := k8s.Export(s)
			if err != nil {
				return err
			}
			for _, n := range m.Notes {
				fmt.Fprintf(c.stderr, "dibs export k8s: %s\n", n)
			}
			if out == "" {
				_, err = fmt.Fprint(c.stdout, m.YAML)
				return err
			}
			if err := os.WriteFile(out, []byte(m.YAML), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
			fmt.Fprintf(c.stdout, "wrote %s: fill in its image, then kubectl apply -f %s\n", out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the manifest to this file (default: print it)")
	cmd.Flags().StringVar(&owner, "owner", "", "the person whose service it is (default: you; another's needs an admin)")
	return cmd
}

// k8sService is the service named name as the export needs it, from the
// board: owner's (default the caller's; else the one person's who runs a
// service of that name), each of its leases a replica. Its command is
// shown only to its owner and admins, so another person's is refused.
func k8sService(b api.Board, name, owner string) (k8s.Service, error) {
	if err := service.CheckName(name); err != nil {
		return k8s.Service{}, err
	}
	var mine []lease.Lease
	owners := map[string][]lease.Lease{}
	for _, l := range b.Services {
		if l.Service == nil || l.Service.Name != name {
			continue
		}
		owners[l.User] = append(owners[l.User], l)
	}
	switch {
	case owner != "":
		mine = owners[owner]
		if len(mine) == 0 {
			return k8s.Service{}, fmt.Errorf("%s runs no service named %s: dibs services lists them", safe(owner), safe(name))
		}
	case len(owners[b.You.User]) > 0:
		mine = owners[b.You.User]
	case len(owners) == 1:
		for _, ls := range owners {
			mine = ls
		}
	case len(owners) > 1:
		names := slices.Sorted(maps.Keys(owners))
		return k8s.Service{}, fmt.Errorf("you run no service named %s and %s do: give --owner with one of them", safe(name), safe(strings.Join(names, ", ")))
	default:
		return k8s.Service{}, fmt.Errorf("no service named %s runs: dibs services lists them", safe(name))
	}
	slices.SortFunc(mine, func(a, b lease.Lease) int { return strings.Compare(a.ID, b.ID) })
	l := mine[0]
	if l.Job == nil || len(l.Job.Command) == 0 {
		if l.User != b.You.User && !b.You.Admin {
			return k8s.Service{}, fmt.Errorf("service %s is %s's: only its owner and admins see its command, so ask %s to run dibs export k8s %s", safe(name), safe(l.User), safe(l.User), safe(name))
		}
		return k8s.Service{}, fmt.Errorf("dibs holds no command for service %s (lease %s): stop it and start it again with dibs serve", safe(name), safe(l.ID))
	}
	replicas := map[int]bool{} // a rolling update may hold two leases of one replica for a moment
	for _, x := range mine {
		replicas[x.Service.Replica] = true
	}
	s := k8s.Service{Name: name, Owner: l.User, Lease: l.ID, Node: l.Node, Replicas: len(replicas),
		Command: l.Job.Command, Dir: l.Job.Dir, Env: l.Job.Env, MemMiB: l.MemMiB,
		Port: l.Service.Port, Health: l.Service.Health, HealthCmd: l.Service.HealthCmd, Preemptible: l.Service.Preemptible}
	if !l.Partial() {
		s.GPUs = len(l.GPUs)
	}
	for _, n := range b.Nodes {
		if n.Name != l.Node {
			continue
		}
		s.Pools = n.Host.Tags
		for _, g := range n.GPUs {
			for _, d := range g.MIGDevices {
				if l.MIG != "" && d.UUID == l.MIG {
					s.MIG = d.Profile
				}
			}
		}
	}
	s.MIGUnknown = l.MIG != "" && s.MIG == ""
	return s, nil
}
