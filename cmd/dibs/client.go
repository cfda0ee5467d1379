package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

// client returns the API client for the socket the flags and env name.
func (c *cli) client() *api.Client {
	return api.NewClient(api.SocketPath(c.socket, os.Getenv))
}

func reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// ask calls the agent once (call, under reqCtx's time limit) and prints
// its answer: as JSON for scripts when asJSON, else for people (print).
// The commands that ask once and print (ls, status, queue, usage,
// bookings, events, release, extend, adopt) share it, so each says only
// what it asks and how it prints, and none can forget --json.
func ask[T any](c *cli, asJSON bool, call func(*api.Client, context.Context) (T, error), print func(T) error) error {
	ctx, cancel := reqCtx()
	defer cancel()
	v, err := call(c.client(), ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(c.stdout, v)
	}
	return print(v)
}

// eachID calls the agent once per id (call, all under one reqCtx time
// limit), in order, and says "<done> ID" after each; the first refusal
// stops it. `dibs cancel` and `dibs unbook` are this.
func eachID(c *cli, ids []string, done string, call func(*api.Client, context.Context, string) error) error {
	ctx, cancel := reqCtx()
	defer cancel()
	for _, id := range ids {
		if err := call(c.client(), ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s %s\n", done, safe(id))
	}
	return nil
}

// printJSON prints v for scripts: the values stay exactly what the agent
// said (decoding gives back every byte), but control, bidi and invisible
// characters are written as \u escapes, so the JSON is safe on a terminal
// too (encoding/json escapes ESC and U+2028 itself, not DEL, C1 or bidi).
func printJSON(w io.Writer, v any) error { return termsafe.WriteJSON(w, v) }

// claimFlags are shared by claim and run. As in SLURM (`srun --gpus 2`),
// -g/--gpus is a count; particular GPUs are named with --ids, as
// `nvidia-smi -i` names them.
type claimFlags struct {
	count int
	ids   string
	dur   string
	note  string
	kind  string
	node  string
	force bool
	json  bool
	// What kind of GPU, and what part of one: a MIG instance, a memory
	// budget on a shared GPU, a model, pools (--pool and --tag alike).
	mig   string
	mem   string
	model string
	pools []string
	// at books the run for later (dibs run --at).
	at string
	// where is --nodelist and --exclude, which the agent checks.
	where lease.NodeChoice
	// cpus is --cpus (local or any); cpusPerGPU --cpus-per-gpu.
	cpus       string
	cpusPerGPU int
}

func (f *claimFlags) add(c *cli, cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVarP(&f.count, "gpus", "g", 0, "how many GPUs (as in srun --gpus); dibs picks free ones that sit close together")
	// --count was the count before -g/--gpus took its SLURM meaning; old
	// scripts keep working, with a warning.
	fl.IntVar(&f.count, "count", 0, "how many GPUs")
	fl.MarkHidden("count")
	fl.MarkDeprecated("count", "use -g/--gpus N")
	fl.StringVar(&f.ids, "ids", "", "exactly these GPU `IDS`, e.g. 0,2 (as nvidia-smi -i numbers them)")
	fl.StringVar(&f.dur, "for", "", "time limit, e.g. 90m, 4h, 2d (default 4h interactive, 24h batch)")
	fl.StringVar(&f.note, "note", "", "what it is for; shown on the board")
	fl.StringVar(&f.kind, "kind", "interactive", "interactive or batch")
	fl.StringVar(&f.node, "node", "", "claim on this node (default: this node alone, or the best node in a cluster); a --nodelist of one")
	fl.StringSliceVarP(&f.where.Only, "nodelist", "w", nil, "only these nodes, e.g. na,nb (SLURM's -w; a gang takes its nodes among them)")
	fl.StringSliceVarP(&f.where.Exclude, "exclude", "x", nil, "never these nodes, e.g. nc (SLURM's -x)")
	fl.BoolVar(&f.force, "force", false, "claim named GPUs even though someone's unleased process runs there")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.StringVar(&f.mig, "mig", "", "one MIG instance instead of GPUs: a profile (3g.40gb), its MIG- UUID, or GPU:INDEX")
	fl.StringVar(&f.mem, "mem", "", "a memory budget on a shared GPU instead of a whole one, e.g. 20G")
	fl.StringVar(&f.model, "model", "", "only GPUs whose model contains this, e.g. H100")
	fl.StringSliceVar(&f.pools, "pool", nil, "only nodes in this pool (a node tag from the agents' config)")
	fl.StringSliceVar(&f.pools, "tag", nil, "only nodes with this tag (the same as --pool; repeat for several)")
	fl.StringVar(&f.cpus, "cpus", "local", "which CPUs the session runs on: local (the cores close to its GPUs) or any")
	fl.IntVar(&f.cpusPerGPU, "cpus-per-gpu", 0, "N of each GPU's local cores, chosen for you and shown to everyone (as in sbatch --cpus-per-gpu); sets DIBS_CPUS and OMP_NUM_THREADS")
	cmd.RegisterFlagCompletionFunc("cpus", cobra.FixedCompletions([]string{"local	the cores close to the GPUs (default)", "any	no binding"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"interactive\ta person at a shell (default limit 4h)", "batch\ta run nobody watches (default limit 24h)"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("node", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("nodelist", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("exclude", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("gpus", cobra.NoFileCompletions)
	cmd.RegisterFlagCompletionFunc("ids", cobra.NoFileCompletions)
	cmd.SetFlagErrorFunc(gpusFlagError)
}

// gpusFlagError explains the one flag error people who used -g/--gpus
// for indices (before it took srun's meaning, a count) will meet.
func gpusFlagError(cmd *cobra.Command, err error) error {
	if strings.Contains(err.Error(), `"-g, --gpus"`) || strings.Contains(err.Error(), `"--gpus"`) {
		return fmt.Errorf("-g/--gpus takes a count, as in srun --gpus 2; name particular GPUs with --ids 0,2")
	}
	return suggestFlag(cmd, err)
}

func (f *claimFlags) request() (api.ClaimRequest, error) { return f.build(true) }

// build makes the request; needCount says -g or --ids must be given.
func (f *claimFlags) build(needCount bool) (api.ClaimRequest, error) {
	req := api.ClaimRequest{Node: f.node, Count: f.count, Duration: f.dur, Note: f.note, Kind: f.kind, Force: f.force,
		MIG: f.mig, Mem: f.mem, Model: f.model, Tags: f.pools, NodeChoice: f.where, CPUsPerGPU: f.cpusPerGPU}
	switch f.cpus {
	case "", "local":
	case "any":
		req.CPUs = "any"
	default:
		return req, fmt.Errorf("--cpus %s: want local (the cores close to the GPUs, the default) or any", f.cpus)
	}
	if f.cpusPerGPU < 0 || f.cpusPerGPU > lease.MaxCPUsPerGPU {
		return req, fmt.Errorf("--cpus-per-gpu %d: give 1 to %d cores", f.cpusPerGPU, lease.MaxCPUsPerGPU)
	}
	if f.cpusPerGPU > 0 && req.CPUs == "any" {
		return req, errors.New("--cpus any and --cpus-per-gpu contradict each other: give one")
	}
	if f.cpusPerGPU > 0 && f.at != "" {
		return req, errors.New("--cpus-per-gpu is chosen when a run starts, and a booked run (--at) does not keep it yet: drop it, or run without --at")
	}
	ids, err := parseIDs(f.ids)
	if err != nil {
		return req, err
	}
	req.GPUs = ids
	if err := lease.CheckCountOrIDs(f.count, ids); err != nil {
		return req, err
	}
	if needCount && f.count == 0 && len(req.GPUs) == 0 && f.mig == "" && f.mem == "" {
		return req, errors.New("say how many GPUs (-g 2), which (--ids 0,2), a MIG instance (--mig 3g.40gb) or a memory budget (--mem 20G)")
	}
	if f.mem != "" {
		if _, err := lease.ParseMem(f.mem); err != nil {
			return req, fmt.Errorf("--mem: %w", err)
		}
	}
	if err := lease.CheckTags(f.pools); err != nil {
		return req, fmt.Errorf("--pool: %w", err)
	}
	if f.count < 0 {
		return req, fmt.Errorf("-g %d: ask for at least one GPU", f.count)
	}
	if f.dur != "" {
		if _, err := words.ParseDuration(f.dur); err != nil {
			return req, fmt.Errorf("--for: %w", err)
		}
	}
	if _, err := lease.ParseKind(f.kind); err != nil {
		return req, fmt.Errorf("--kind: %w", err)
	}
	return req, nil
}

// printGrant says what was granted and, for a lease without a session
// whose GPUs are on this node, the line that puts them into this shell. A
// run's session has its CUDA_VISIBLE_DEVICES already, and another node's
// GPU numbers would name this node's GPUs here (printClaimed says so).
func (c *cli) printGrant(r api.ClaimResponse) {
	c.printGrantTo(c.stdout, r)
	if r.Session == "" && r.Here {
		fmt.Fprintln(c.stdout, exportLine(r))
	}
}

// printGrantTo says what was granted, for a person to read.
func (c *cli) printGrantTo(w io.Writer, r api.ClaimResponse) {
	what := fmt.Sprintf("GPU%s %s", plural(len(r.GPUs)), safe(r.CUDAVisibleDevices))
	switch {
	case r.MIG != "" && len(r.GPUs) == 1:
		what = fmt.Sprintf("MIG instance %s of GPU %d", safe(r.MIG), r.GPUs[0])
	case r.MemMiB > 0 && len(r.GPUs) == 1:
		what = fmt.Sprintf("%s of shared GPU %d", lease.FormatMem(r.MemMiB), r.GPUs[0])
	}
	if r.CPUs != "" {
		what += ", cores " + safe(r.CPUs)
	}
	if lease.Kind(r.Kind) == lease.KindService {
		fmt.Fprintf(w, "%s: %s on %s, as long as the service is up\n", safe(r.ID), what, safe(r.Node))
	} else {
		fmt.Fprintf(w, "%s: %s on %s until %s (%s)\n", safe(r.ID), what, safe(r.Node),
			r.ExpiresAt.Local().Format("Mon 15:04"), words.FormatDuration(time.Until(r.ExpiresAt)))
	}
	if r.Notice != "" {
		fmt.Fprintf(w, "note: %s\n", safe(r.Notice))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// counted is n and a noun that takes an s: "1 GPU", "2 GPUs".
func counted(n int, noun string) string { return fmt.Sprintf("%d %s%s", n, noun, plural(n)) }

func claimCmd(c *cli) *cobra.Command {
	var f claimFlags
	var q queueFlags
	cmd := &cobra.Command{
		Use:               "claim",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "Claim GPUs (an advisory lease with a time limit)",
		Long: `Claim GPUs: an advisory lease, held by the agents, that the board and
dibs ls show as yours until it ends (--for, or dibs release).

What to claim: -g N asks for a number of GPUs and lets dibs pick free ones
that sit close together (as srun --gpus does); --ids 0,2 names exactly
those GPUs, numbered as nvidia-smi -i numbers them, and fails if one is
taken. --mig and --mem claim part of a GPU instead. Without --node the
GPUs are on this node when they fit here, else on the best node of the
cluster.

Output: one line saying what was granted, and, when the GPUs are on this
node, the shell line that puts them into a shell:
  export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 DIBS_LEASE_ID=…
When standard output is not a terminal the first line goes to standard
error, so eval "$(dibs claim -g 1)" sets the variables in the shell it is
typed in. With --json it prints the grant as JSON (docs/api.md).

Exit status: 0 when granted; 1 when refused or on an error (the reason, on
standard error, says what to do); with --queue, 124 when --wait ran out
(the request is withdrawn) and 130 when Ctrl-C withdrew it.`,
		Example: `  dibs claim -g 2 --for 3h --note "ablation sweep"
  eval "$(dibs claim -g 1)"              # the GPU into this shell
  dibs claim --ids 4,5 --kind batch
  dibs claim --mig 3g.40gb                 # one MIG instance
  dibs claim --mem 20G --for 2h            # 20 GiB on a shared GPU
  dibs claim -g 1 --model L40S --pool inference`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			// GPUs for the shell this is typed in: here, when they fit.
			req.PreferHere = req.Node == ""
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			if q.queue {
				_, s, err := q.submit(ctx, cl, req)
				if err != nil {
					return err
				}
				return c.waitGranted(cl, s, f.json, q.wait)
			}
			if q.wait > 0 {
				return errors.New("--wait goes with --queue: without it a claim that does not fit fails at once")
			}
			r, err := cl.Claim(ctx, req)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(c.stdout, r)
			}
			c.printClaimed(r)
			return nil
		},
	}
	f.add(c, cmd)
	q.add(cmd, false)
	return cmd
}

func runCmd(c *cli) *cobra.Command {
	var f claimFlags
	var q queueFlags
	var name, dir string
	var attach, cleanEnv, follow, pty bool
	cmd := &cobra.Command{
		Use:   "run [claim flags] [--name NAME] [--attach | --follow | --pty] -- CMD [ARGS...]",
		Short: "Claim GPUs and start a tmux session on them; the lease ends when the session does",
		Example: `  dibs run -g 2 -- python train.py --lr 3e-4
  dibs run -g 1 --attach          # an interactive shell on one GPU
  dibs run --mem 16G -- python eval.py
  dibs run -g 4 --at "tomorrow 09:00" --for 3h -- python train.py
  dibs run --nodes 2 --gpus-per-node 8 -f -- python train.py   # in the foreground, as srun
  dibs run --nodes 2 --gpus-per-node 8 --pty -- bash            # a shell in rank 0's session`,
		RunE: func(cmd *cobra.Command, args []string) error {
			// With --gpus-per-node the gang flags say how many.
			req, err := f.build(q.gpusPerNode == 0)
			if err != nil {
				return err
			}
			wd := dir
			if wd == "" {
				wd, _ = os.Getwd()
			}
			req.Run = &api.RunSpec{Name: name, Command: args, Dir: wd}
			if !cleanEnv {
				req.Run.Env = job.PickEnv(os.Environ())
			}
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			if follow || pty {
				if err := checkFollow(f, q, attach, follow, pty, args); err != nil {
					return err
				}
				sreq, s, err := q.submit(ctx, cl, req)
				if err != nil {
					return err
				}
				return c.followRun(cl, s, pty, sreq.Nodes > 1)
			}
			if f.at != "" && q.sweep() {
				return errors.New("--array, --after and --after-any queue a run; a booking (--at) starts at its time: drop one")
			}
			if f.at != "" {
				if q.torchrun || q.perGPU {
					return errors.New("--torchrun and --per-gpu do not go with --at: a booked run starts its command once; book the GPUs and start it with dibs run --per-gpu then")
				}
				if q.nodes > 1 {
					return errors.New("--at with --nodes: a booked run starts on one node; book the nodes with dibs book --nodes N --gpus-per-node G --at TIME --for DUR, and start the gang with dibs run when it begins")
				}
				return bookRun(ctx, c, cl, &f, req)
			}
			if q.queue || q.nodes > 1 || q.torchrun || q.perGPU || q.sweep() {
				sreq, err := q.request(req)
				if err != nil {
					return err
				}
				switch {
				case q.nodes > 1 && len(args) == 0:
					return errors.New("a gang runs a command on every node: dibs run --nodes N --gpus-per-node G -- CMD")
				case (q.torchrun || q.perGPU) && len(args) == 0:
					return errors.New("--torchrun and --per-gpu start a command once per GPU: give it, as in dibs run -g 2 --per-gpu -- python3 train.py")
				}
				if q.array != "" && len(args) == 0 {
					return errors.New("an array runs a command once per task: dibs run --array 0-19%4 -g 1 -- CMD")
				}
				s, err := cl.Submit(ctx, sreq)
				if err != nil {
					return err
				}
				if q.sweep() {
					return c.reportSweep(s, q, f.json)
				}
				return c.reportSubmitted(cl, s, f.json)
			}
			r, err := cl.Claim(ctx, req)
			if err != nil {
				return err
			}
			if f.json {
				if err := printJSON(c.stdout, r); err != nil {
					return err
				}
			} else {
				c.printGrant(r)
				fmt.Fprintf(c.stdout, "session %s started on %s: `dibs attach %s` to see it\n", safe(r.Session), safe(r.Node), safe(r.ID))
			}
			if attach {
				return c.attach(ctx, cl, r.ID)
			}
			return nil
		},
	}
	f.add(c, cmd)
	cmd.Flags().StringVar(&name, "name", "", "tmux session name (default dibs-<lease id>)")
	cmd.Flags().StringVar(&dir, "dir", "", "working directory (default: the current one)")
	cmd.Flags().BoolVar(&attach, "attach", false, "attach to the session once it starts")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "in the foreground, as srun: wait in the queue, print every rank's output (\"1: …\" for a gang), exit with the run's status; Ctrl-C shows its state, twice within a second cancels it, Ctrl-\\ detaches")
	cmd.Flags().BoolVar(&pty, "pty", false, "wait in the queue, then attach to rank 0's session (srun --pty); the other ranks run on")
	cmd.Flags().BoolVar(&cleanEnv, "clean-env", false, "start CMD with the node's default PATH, not yours (by default your PATH and Python environment travel: "+strings.Join(job.CarriedEnv(), ", ")+")")
	cmd.Flags().StringVar(&f.at, "at", "", `book the GPUs for later and start CMD then, e.g. "tomorrow 09:00" (needs --for)`)
	q.add(cmd, true)
	return cmd
}

func releaseCmd(c *cli) *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:               "release LEASE... | --all",
		Short:             "End leases (and their sessions)",
		ValidArgsFunction: c.completeMyLeases(false, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !all && len(args) == 0 {
				return errors.New("name the leases to release (`dibs ls` shows ids), or use --all")
			}
			if all && len(args) > 0 {
				return errors.New("give lease ids or --all, not both")
			}
			return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.ReleaseResponse, error) {
				return cl.Release(ctx, api.ReleaseRequest{IDs: args, All: all})
			}, func(r api.ReleaseResponse) error {
				if len(r.Released) == 0 {
					fmt.Fprintln(c.stdout, "you hold no leases")
				}
				for _, id := range r.Released {
					fmt.Fprintf(c.stdout, "released %s\n", safe(id))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "release every lease you hold")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func extendCmd(c *cli) *cobra.Command {
	var dur string
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "extend LEASE --for DUR",
		Short:             "Move a lease's end later",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeMyLeases(false, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dur == "" {
				return errors.New("say by how much: --for 2h")
			}
			if _, err := words.ParseDuration(dur); err != nil {
				return fmt.Errorf("--for: %w", err)
			}
			return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.ClaimResponse, error) {
				return cl.Extend(ctx, api.ExtendRequest{ID: args[0], Duration: dur})
			}, func(r api.ClaimResponse) error {
				fmt.Fprintf(c.stdout, "%s now ends %s (%s from now)\n", safe(r.ID), r.ExpiresAt.Local().Format("Mon 15:04"), words.FormatDuration(time.Until(r.ExpiresAt)))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&dur, "for", "", "how much longer, e.g. 2h")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func adoptCmd(c *cli) *cobra.Command {
	var dur, note, container string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "adopt [PID | --container ID]",
		Short: "Take a run you started without a lease into one, or a container on your GPUs onto your lease",
		Long: `dibs adopt PID takes a process you started on a GPU without a lease into
a new lease on the GPUs it uses.

dibs adopt --container ID says a container on your leased GPUs is yours. A
rootful runtime (docker's default) runs a container's processes as root, so
the board flags them as not the holder's; once adopted, root's processes of
that container on your lease's GPUs count as yours, on every node's board
and in dibs ls, until the lease ends. ID is what docker ps (or podman ps)
prints. Run it on the node the container runs on. It is refused, and
nothing changes, when no process of the container runs on this node's GPUs
or when one runs on a GPU you do not hold. A container started from the
lease's session with -e DIBS_LEASE_ID needs no adopt: its root processes on
the lease's GPUs are yours from the start.`,
		Example: `  dibs adopt 4242
  dibs adopt --container "$(docker ps -q --latest)"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if container != "" {
				if len(args) > 0 || dur != "" || note != "" {
					return fmt.Errorf("--container adopts onto the lease you hold: give no PID, --for or --note with it")
				}
				return c.adoptContainer(container, asJSON)
			}
			if len(args) == 0 {
				return fmt.Errorf("adopt what? give a PID (dibs adopt 4242) or a container (dibs adopt --container ID)")
			}
			pid, err := strconv.Atoi(args[0])
			if err != nil || pid <= 0 {
				return fmt.Errorf("%q is not a process id", args[0])
			}
			if dur != "" {
				if _, err := words.ParseDuration(dur); err != nil {
					return fmt.Errorf("--for: %w", err)
				}
			}
			return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.ClaimResponse, error) {
				return cl.Adopt(ctx, api.AdoptRequest{PID: pid, Duration: dur, Note: note})
			}, func(r api.ClaimResponse) error {
				c.printGrant(r)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&dur, "for", "", "time limit (default 4h)")
	cmd.Flags().StringVar(&note, "note", "", "what it is for")
	cmd.Flags().StringVar(&container, "container", "", "a container on your leased GPUs whose root processes are yours (its id from docker ps)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// adoptContainer asks this node's agent to record container id on the
// caller's leases, and says which.
func (c *cli) adoptContainer(id string, asJSON bool) error {
	if _, err := job.ParseContainerID(id); err != nil {
		return err
	}
	return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.AdoptContainerResponse, error) {
		return cl.AdoptContainer(ctx, api.AdoptContainerRequest{Container: id})
	}, func(r api.AdoptContainerResponse) error {
		for _, l := range r.Leases {
			fmt.Fprintf(c.stdout, "container %s is yours: its root processes on GPU%s %s of %s count under lease %s\n",
				safe(r.Container), plural(len(l.GPUs)), safe(l.CUDAVisibleDevices()), safe(l.Node), safe(l.ID))
		}
		return nil
	})
}

func attachCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:               "attach [LEASE | SESSION | REQUEST]",
		Short:             "Attach to a run's tmux session, named as dibs logs takes it (your newest one by default)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: c.completeMyLeases(true, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			ctx, cancel := reqCtx()
			defer cancel()
			return c.attach(ctx, c.client(), id)
		},
	}
}

// attach replaces this process with tmux attach (or ssh to the node). It runs
// only a command api.CheckAttachCommand recognises, whatever the agent sent.
func (c *cli) attach(ctx context.Context, cl *api.Client, id string) error {
	r, err := cl.Attach(ctx, id)
	if sess, ok := c.orServiceSession(ctx, cl, err, id); ok {
		r, err = cl.Attach(ctx, sess)
	}
	if err != nil {
		return err
	}
	if err := api.CheckAttachCommand(r.Command); err != nil {
		return err
	}
	bin, err := exec.LookPath(r.Command[0])
	if err != nil {
		return fmt.Errorf("%s not found in PATH: install it, or run `%s` yourself", r.Command[0], api.QuoteArgv(r.Command))
	}
	env := os.Environ()
	if r.Local {
		// Attaching from inside tmux needs TMUX unset, as tmux itself says.
		env = without(env, "TMUX")
	}
	return syscall.Exec(bin, r.Command, env)
}

func without(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func statusCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "status",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "Show this agent's view of the cluster: members, their agent protocols, gossip counters",
		Long: `Show this agent's view of the cluster. The first line names this node's
dibs release. Then one line per member: its state (alive, suspect, dead,
restarting, left), PROTOCOL, the agent protocol it speaks (each dibs
release that changes what agents exchange raises it, so during a rolling
upgrade it tells upgraded nodes from the others; - when not yet known), SEQ,
the sequence number of its gossiped state (it grows with every change the
member publishes; a number that stops growing here while it grows on the
member means gossip is not getting through), and when this agent last
heard from it. Another node's dibs release: ` + "`ssh NODE dibs status | head -1`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(c, asJSON, (*api.Client).Status, func(s api.Status) error {
				printStatus(c.stdout, s)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printStatus(w io.Writer, s api.Status) {
	fmt.Fprintf(w, "node %s  dibs %s  up %s  backend %s\n", safe(s.Node), safe(s.Version), words.FormatDuration(time.Since(s.StartedAt)), safe(s.Backend))
	fmt.Fprintf(w, "data %s  socket %s  leases %d  last token %d\n", safe(s.DataDir), safe(s.Socket), s.Leases, s.LastToken)
	if len(s.Members) == 0 {
		fmt.Fprintln(w, "single node (not in a cluster)")
		return
	}
	fmt.Fprintf(w, "\n%-16s %-21s %-10s %8s %8s %10s\n", "MEMBER", "ADDRESS", "STATE", "PROTOCOL", "SEQ", "LAST HEARD")
	for _, m := range s.Members {
		// How long ago this agent heard from the member, not how old its GPU
		// numbers are: a node sends those only when they change, so on a
		// quiet node their age grows for a minute while all is well.
		heard := "never"
		switch {
		case m.Name == s.Node:
			heard = "-"
		case m.SinceHeard > 0:
			heard = words.FormatDuration(m.SinceHeard) + " ago"
		}
		proto := "-"
		if m.Protocol > 0 {
			proto = strconv.Itoa(m.Protocol)
		}
		fmt.Fprintf(w, "%-16s %-21s %-10s %8s %8d %10s\n", safe(m.Name), safe(m.Addr), safe(m.State), proto, m.StateVersion, heard)
	}
	printSkew(w, s.Members)
	g := s.Gossip
	crypt := fmt.Sprintf("%d decrypt failures", g.DecryptFailures)
	if g.LabelMismatches > 0 {
		crypt += fmt.Sprintf(" (%d from another cluster name)", g.LabelMismatches)
	}
	if g.StreamsRefused > 0 {
		crypt += fmt.Sprintf(", %d streams refused (over a cap or silent)", g.StreamsRefused)
	}
	fmt.Fprintf(w, "\ngossip: %d msgs in (%s), %d out (%s), %d dropped, %s, %d remote requests (%d failed)\n",
		g.MessagesIn, bytesStr(g.BytesIn), g.MessagesOut, bytesStr(g.BytesOut), g.Dropped, crypt, g.RemoteRequests, g.RemoteRequestErrs)
}

func bytesStr(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// printSkew says, during a rolling upgrade, which members run an older
// dibs than the newest one here (docs/operations.md#version-skew): they
// work together, but what the newer release brings waits for them.
func printSkew(w io.Writer, ms []api.Member) {
	newest := 0
	for _, m := range ms {
		newest = max(newest, m.Protocol)
	}
	var older []string
	for _, m := range ms {
		if m.Protocol > 0 && m.Protocol < newest {
			older = append(older, fmt.Sprintf("%s (protocol %d)", safe(m.Name), m.Protocol))
		}
	}
	if len(older) > 0 {
		fmt.Fprintf(w, "mixed versions: %s run an older dibs than protocol %d; upgrade them to finish the roll\n", strings.Join(older, ", "), newest)
	}
}

// parseIDs reads --ids, GPU indices as nvidia-smi -i numbers them (0,2), for
// claims and bookings alike; "" is none.
func parseIDs(ids string) ([]int, error) {
	if ids == "" {
		return nil, nil
	}
	var gpus []int
	for _, s := range strings.Split(ids, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--ids %q: give GPU indices like 0,2 (-g/--gpus takes a count)", ids)
		}
		gpus = append(gpus, n)
	}
	return gpus, nil
}
