package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// A service's name and the names runs already have: `dibs logs`, `dibs
// attach` and `dibs stop` take a lease id, a queued request's id or a tmux
// session name first, as for any run; a name that is none of those is
// taken as one of your services' names. Replicas (--replicas K): each is
// its own lease, numbered 0 to K-1; NAME/i picks replica i (`dibs logs
// llm/1`), and NAME alone is replica 0 for logs and attach, every replica
// for url and stop. Replica 0 runs in session svc-NAME, replica i in
// svcI-NAME (svc1-llm: every service's session starts svc-, so llm's
// replica 1 never takes the session of a service named llm-1); a rolling
// update's new replica started beside the old on one node takes svcu-NAME
// (svc1u-NAME) until the next update.

func serveCmd(c *cli) *cobra.Command {
	var f claimFlags
	var port, replicas int
	var health, healthCmd, dir string
	var preemptible, cleanEnv, update bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "serve NAME [-g N | --mig P | --mem M] [--port P] [--health PATH | --health-cmd CMD] [--replicas K] [--update [--wait D]] [placement flags] -- COMMAND",
		Short: "Start a service: a named run kept up (restarted when it dies, health-checked) until dibs stop",
		Long: `Start a service: a long-lived run in a tmux session as you, holding its GPUs
while it is up (no time limit), health-checked and restarted in place with a
growing backoff when its command exits or fails its check; five restarts in
ten minutes stop it (its log kept) and tell you. -g 0 runs one without a GPU.

The check: with --port, the port must answer and its listener must be the
service's own process (not someone else's who bound the port while it was
down); with --health PATH an HTTP GET of PATH must answer 2xx; with
--health-cmd CMD the shell command CMD, run as you, must exit 0. Without
either, the service is healthy while its command runs.

--replicas K starts K replicas, each its own lease (own GPUs, restarts and
moves), all or none: if one is refused, those started are stopped again.
Replicas on a port each need a node of their own; without a port they may
share one. NAME/i names replica i (dibs logs llm/1).

Where it runs: --node only says where it starts. When its node is lost it
moves to another that fits, keeping its share, --pool, --model,
--cpus-per-gpu, --nodelist and --exclude (so --nodelist node02 alone keeps
it from ever moving).

--update replaces your running replicas of NAME with COMMAND (and the
flags given; those not given are kept), one at a time, each healthy before
the next: a new replica first, beside the old, when a node has room
(surge), else the old is stopped first and the gap said. A new replica not
healthy within --wait stops the update; the old ones keep serving. Ctrl-C
stops it once the replica in hand is done.`,
		Example: `  dibs serve llm -g 1 --port 8000 --health /health -- vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000
  dibs serve tb -g 0 --port 6006 -- tensorboard --logdir runs --port 6006 --bind_all
  dibs serve llm -g 1 --replicas 2 --port 8000 --health /health -- vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000
  dibs serve llm --update -- vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000 --max-model-len 8192
  dibs services
  dibs logs llm; dibs attach llm; dibs stop llm`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash != 1 {
				return errors.New("dibs serve NAME [flags] -- COMMAND: name the service, then its command after --")
			}
			name, command := args[0], args[1:]
			if err := service.CheckName(name); err != nil {
				return err
			}
			if len(command) == 0 {
				return fmt.Errorf("service %s needs a command: dibs serve %s -- COMMAND", name, name)
			}
			switch {
			case replicas < 1 || replicas > service.MaxReplicas:
				return fmt.Errorf("--replicas %d is out of range: give 1 to %d", replicas, service.MaxReplicas)
			case update && f.json:
				return errors.New("--json does not go with --update: it says its progress line by line (dibs services --json shows the result)")
			case !update && cmd.Flags().Changed("wait"):
				return errors.New("--wait goes with --update: it bounds how long each new replica may take to be healthy")
			case cmd.Flags().Changed("for"):
				return errors.New("a service has no time limit: it runs until dibs stop " + name)
			case cmd.Flags().Changed("kind"):
				return errors.New("--kind does not go with dibs serve: a service is its own kind")
			}
			req, err := f.build(false)
			if err != nil {
				return err
			}
			req.Kind = ""
			wd := dir
			if wd == "" {
				wd, _ = os.Getwd()
			}
			req.Run = &api.RunSpec{Command: command, Dir: wd}
			if !cleanEnv {
				req.Run.Env = job.PickEnv(os.Environ())
			}
			spec := service.Spec{Name: name, Port: port, Health: health, HealthCmd: healthCmd, Preemptible: preemptible}
			if replicas > 1 {
				spec.Replicas = replicas
			}
			if err := spec.Check(); err != nil {
				return err
			}
			if update {
				u := updater{c: c, cl: c.client(), req: req, spec: spec, wait: wait, changed: cmd.Flags().Changed}
				return u.run()
			}
			rs, err := c.startReplicas(req, spec)
			if err != nil {
				return err
			}
			if f.json {
				if len(rs) == 1 {
					return printJSON(c.stdout, rs[0])
				}
				return printJSON(c.stdout, rs)
			}
			for i, r := range rs {
				spec.Replica = i
				c.printStarted(spec, r)
			}
			return nil
		},
	}
	f.add(c, cmd)
	fl := cmd.Flags()
	fl.Lookup("node").Usage = "start on this node (a move may take it elsewhere; --nodelist holds for moves too)"
	fl.IntVar(&port, "port", 0, "the TCP port the service listens on (checked, and in its URL)")
	fl.StringVar(&health, "health", "", "an HTTP path whose 2xx answer means healthy, e.g. /health (needs --port)")
	fl.StringVar(&healthCmd, "health-cmd", "", "a shell command whose exit 0 means healthy, run as you in the service's directory at every check (everyone sees it: keep secrets out)")
	fl.IntVar(&replicas, "replicas", 1, "how many replicas, each its own lease (those on a port each on a node of its own)")
	fl.BoolVar(&update, "update", false, "replace your running replicas of NAME with COMMAND and the flags given, one at a time, each healthy before the next")
	fl.DurationVar(&wait, "wait", 5*time.Minute, "with --update: how long a new replica may take to become healthy before the update stops")
	fl.BoolVar(&preemptible, "preemptible", false, "let quota preemption take its GPUs (a service is never preempted otherwise)")
	fl.StringVar(&dir, "dir", "", "working directory (default: the current one)")
	fl.BoolVar(&cleanEnv, "clean-env", false, "start COMMAND with the node's default PATH, not yours")
	return cmd
}

// startReplicas starts spec's replicas (spec.Replicas, or one) one after
// the other, all or none: when one is refused, those started are stopped
// again and the refusal is said on one line.
func (c *cli) startReplicas(req api.ClaimRequest, spec service.Spec) ([]api.ClaimResponse, error) {
	cl := c.client()
	var started []api.ClaimResponse
	for i := range max(spec.Replicas, 1) {
		one := spec
		one.Replica = i
		req.Service = &one
		ctx, cancel := reqCtx()
		r, err := cl.Claim(ctx, req)
		cancel()
		if err == nil {
			started = append(started, r)
			continue
		}
		if len(started) == 0 {
			return nil, err
		}
		var ids []string
		for _, r := range started {
			ids = append(ids, r.ID)
		}
		ctx, cancel = reqCtx()
		_, rerr := cl.Release(ctx, api.ReleaseRequest{IDs: ids})
		cancel()
		if rerr != nil {
			return nil, fmt.Errorf("%s: %w (and stopping the %d replica%s started failed: %v; dibs stop %s)", one.Label(), err, len(ids), plural(len(ids)), rerr, spec.Name)
		}
		return nil, fmt.Errorf("%s: %w; the %d replica%s started before it are stopped again", one.Label(), err, len(ids), plural(len(ids)))
	}
	return started, nil
}

// printStarted says where a replica was started and where it will answer.
func (c *cli) printStarted(spec service.Spec, r api.ClaimResponse) {
	where := "no GPU"
	if len(r.GPUs) > 0 {
		where = "GPU" + plural(len(r.GPUs)) + " " + safe(r.CUDAVisibleDevices)
	}
	fmt.Fprintf(c.stdout, "service %s started on %s (%s, lease %s, tmux %s)\n", safe(spec.Label()), safe(r.Node), where, safe(r.ID), safe(r.Session))
	if u := service.URL(r.Node, spec.Port); u != "" {
		fmt.Fprintf(c.stdout, "it answers at %s once healthy: dibs services shows its state\n", safe(u))
	}
}

// serviceRow is one replica of a service as `dibs services --json` prints
// it: one row per replica, Replica its index (0 for a single one).
type serviceRow struct {
	Name     string        `json:"name"`
	Replica  int           `json:"replica"`
	Replicas int           `json:"replicas"`
	Owner    string        `json:"owner"`
	Node     string        `json:"node"`
	URL      string        `json:"url,omitempty"`
	State    service.State `json:"state"`
	Since    time.Time     `json:"since,omitzero"`
	Restarts int           `json:"restarts"`
	GPUs     []int         `json:"gpus"`
	PID      int           `json:"pid,omitempty"`
	Lease    string        `json:"lease"`
	Session  string        `json:"session"`
	// started orders an update's two copies of a replica; job is the
	// definition (its owner sees it), for an update to restore.
	started time.Time
	job     *job.Job
	spec    service.Spec
	// units is what the replica holds as a claim asks for it: a count of
	// whole GPUs, a MIG profile or a memory budget (partial: MIG or
	// budget; a MIG profile the board does not show leaves MIG empty).
	units   api.ClaimRequest
	partial bool
	anyCPU  bool // --cpus any
	// ProxyURL is the service's address on the agents' proxy (the node
	// asked; any node would do), with ProxyPort; empty when it has none.
	ProxyURL  string `json:"proxy_url,omitempty"`
	ProxyPort int    `json:"proxy_port,omitempty"`

	// IdleSince flags an idle service: no requests, no SM use since.
	IdleSince time.Time `json:"idle_since,omitzero"`
}

// serviceRows are the board's services, one row per replica, by owner,
// name and replica, in the state the board's services view shows
// (api.Board.ServiceState: unknown while its node is away, moving while
// it is placed again).
func serviceRows(b api.Board) []serviceRow {
	var rows []serviceRow
	for _, l := range b.Services {
		if l.Service == nil {
			continue
		}
		r := serviceRow{Name: l.Service.Name, Replica: l.Service.Replica, Replicas: max(l.Service.Replicas, 1), Owner: l.User, Node: l.Node, URL: service.URL(l.Node, l.Service.Port),
			State: b.ServiceState(&l), Since: l.Service.Since, Restarts: l.Service.Restarts, GPUs: l.GPUs, PID: l.Service.PID,
			Lease: l.ID, Session: l.Session, ProxyURL: service.URL(b.Self, l.Service.ProxyPort), ProxyPort: l.Service.ProxyPort,
			IdleSince: l.Service.IdleSince}
		if r.GPUs == nil {
			r.GPUs = []int{}
		}
		r.started = l.StartedAt
		r.job = l.Job
		r.spec = l.Service.Spec
		r.units, r.partial, r.anyCPU = heldUnits(b, &l), l.Partial(), l.AnyCPU
		if p := l.Service.Place; r.units.MIG == "" && l.MIG != "" && p != nil {
			r.units.MIG = p.MIG // the profile admission recorded, when the board shows none
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b serviceRow) int {
		return cmp.Or(strings.Compare(a.Owner+"\x00"+a.Name, b.Owner+"\x00"+b.Name), cmp.Compare(a.Replica, b.Replica), a.started.Compare(b.started))
	})
	return rows
}

// heldUnits is what l holds, as a claim asks for it.
func heldUnits(b api.Board, l *lease.Lease) api.ClaimRequest {
	switch {
	case l.MemMiB > 0:
		return api.ClaimRequest{Mem: fmt.Sprintf("%dM", l.MemMiB)}
	case l.MIG != "":
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				for _, d := range g.MIGDevices {
					if n.Name == l.Node && d.UUID == l.MIG {
						return api.ClaimRequest{MIG: d.Profile}
					}
				}
			}
		}
		return api.ClaimRequest{}
	}
	return api.ClaimRequest{Count: len(l.GPUs)}
}

// label is the row's replica as people name it: NAME, or NAME/i of several.
func (r serviceRow) label() string {
	s := service.Spec{Name: r.Name, Replica: r.Replica, Replicas: r.Replicas}
	return s.Label()
}

func servicesCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "services",
		Short: "List the services of the cluster: owner, node, URL, state, uptime, restarts, GPUs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			b, err := c.client().Board(ctx)
			if err != nil {
				return err
			}
			rows := serviceRows(b)
			if asJSON {
				if rows == nil {
					rows = []serviceRow{}
				}
				return printJSON(c.stdout, rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(c.stdout, "no services: start one with dibs serve NAME --port P -- COMMAND")
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			proxied := slices.ContainsFunc(rows, func(r serviceRow) bool { return r.ProxyPort != 0 })
			fmt.Fprintln(tw, "NAME\tOWNER\tNODE\tURL\tSTATE\tUPTIME\tRESTARTS\tGPUS"+proxyHeader(proxied))
			now := time.Now()
			for _, r := range rows {
				up := "-"
				if !r.Since.IsZero() {
					up = words.FormatDuration(now.Sub(r.Since).Round(time.Second))
				}
				gpus := "-"
				if len(r.GPUs) > 0 {
					gpus = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.GPUs)), ","), "[]")
				}
				url := r.URL
				if url == "" {
					url = "-"
				}
				state := string(r.State)
				if !r.IdleSince.IsZero() {
					state += ", idle " + words.FormatDuration(now.Sub(r.IdleSince).Round(time.Minute))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s%s\n", safe(r.label()), safe(r.Owner), safe(r.Node), safe(url), safe(state), up, r.Restarts, gpus, proxyCell(proxied, r))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// findReplicas are the replicas of the caller's live service ref names
// (NAME: every replica; NAME/i: that one), else (for reading only,
// mineOnly false) those of the one other person who runs a service of
// that name.
func (c *cli) findReplicas(ctx context.Context, cl *api.Client, ref string, mineOnly bool) ([]serviceRow, error) {
	name, replica, pick, err := service.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	b, err := cl.Board(ctx)
	if err != nil {
		return nil, err
	}
	var mine []serviceRow
	theirs := map[string][]serviceRow{}
	for _, r := range serviceRows(b) {
		if r.Name != name || pick && r.Replica != replica {
			continue
		}
		if r.Owner == b.You.User {
			mine = append(mine, r)
		} else {
			theirs[r.Owner] = append(theirs[r.Owner], r)
		}
	}
	if len(mine) > 0 {
		return mine, nil
	}
	if !mineOnly && len(theirs) == 1 {
		for _, rows := range theirs {
			return rows, nil
		}
	}
	if pick {
		return nil, fmt.Errorf("you run no replica %s: dibs services lists them", safe(ref))
	}
	return nil, fmt.Errorf("you run no service named %s: dibs services lists them", safe(name))
}

func urlCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "url NAME[/i]",
		Short: "Print where a service answers now, every replica's address on a line (yours, or the one service of that name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			rows, err := c.findReplicas(ctx, c.client(), args[0], false)
			if err != nil {
				return err
			}
			if rows[0].URL == "" {
				return fmt.Errorf("service %s has no port (started without --port), so no URL: it runs on %s", safe(rows[0].Name), safe(rows[0].Node))
			}
			if rows[0].ProxyURL != "" {
				fmt.Fprintln(c.stdout, safe(rows[0].ProxyURL)+" (proxy, any node)")
			}
			for _, r := range rows {
				fmt.Fprintln(c.stdout, safe(r.URL))
			}
			return nil
		},
	}
}

func stopCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME[/i]|LEASE",
		Short: "Stop a service, every replica (or NAME/i, one; or end a run's lease, as dibs release does)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			// A service of yours by that name first; else a lease id.
			arg := args[0]
			rows, err := c.findReplicas(ctx, cl, arg, true)
			if err != nil {
				if !isLeaseID(arg) {
					return err
				}
				if _, err := cl.Release(ctx, api.ReleaseRequest{IDs: []string{arg}}); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "released %s\n", safe(arg))
				return nil
			}
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.Lease)
			}
			if _, err := cl.Release(ctx, api.ReleaseRequest{IDs: ids}); err != nil {
				return err
			}
			name := rows[0].Name
			what := safe(name)
			if len(rows) == 1 {
				what = safe(rows[0].label())
			} else {
				what += fmt.Sprintf(", %d replicas,", len(rows))
			}
			fmt.Fprintf(c.stdout, "service %s stopped (lease%s %s); its log stays: dibs logs %s\n", what, plural(len(ids)), safe(strings.Join(ids, ", ")), safe(rows[0].label()))
			return nil
		},
	}
}

// orServiceSession is the session of the replica ref names (NAME: replica
// 0; NAME/i: replica i) when a lookup of ref as given found nothing and
// ref names a service's replica: lease ids, requests and session names
// win, a service's name comes after. A live replica of the caller's is
// asked for its session (an update may have given it svcu-NAME); else it
// is the one the replica's first start takes (svc-NAME, svcI-NAME).
func (c *cli) orServiceSession(ctx context.Context, cl *api.Client, err error, ref string) (string, bool) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != string(refusal.CodeNotFound) {
		return "", false
	}
	name, replica, _, perr := service.ParseRef(ref)
	if perr != nil {
		return "", false
	}
	one := name + "/" + strconv.Itoa(replica)
	if rows, err := c.findReplicas(ctx, cl, one, true); err == nil {
		return rows[len(rows)-1].Session, true
	}
	return service.ReplicaSession(name, replica), true
}

func isLeaseID(id string) bool { _, ok := lease.NodeOfID(id); return ok }
