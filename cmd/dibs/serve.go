package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
// taken as one of your services' names (its session is svc-NAME).

func serveCmd(c *cli) *cobra.Command {
	var f claimFlags
	var port, replicas int
	var health, healthCmd, dir string
	var preemptible, cleanEnv bool
	cmd := &cobra.Command{
		Use:   "serve NAME [-g N | --mig P | --mem M] [--port P] [--health PATH | --health-cmd CMD] [placement flags] -- COMMAND",
		Short: "Start a service: a named run kept up (restarted when it dies, health-checked) until dibs stop",
		Long: `Start a service: a long-lived run in a tmux session as you, holding its GPUs
while it is up (no time limit), health-checked and restarted in place with a
growing backoff when its command exits or fails its check; five restarts in
ten minutes stop it (its log kept) and tell you. -g 0 runs one without a GPU.

The check: with --port, the port must answer and its listener must be the
service's own process (not someone else's who bound the port while it was
down); with --health PATH an HTTP GET of PATH must answer 2xx; with
--health-cmd CMD the shell command CMD, run as you, must exit 0. Without
either, the service is healthy while its command runs.`,
		Example: `  dibs serve llm -g 1 --port 8000 --health /health -- vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000
  dibs serve tb -g 0 --port 6006 -- tensorboard --logdir runs --port 6006 --bind_all
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
			case replicas > 1:
				return errors.New("--replicas above 1 is not built yet: start one replica per name (llm-a, llm-b)")
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
			req.Service = &service.Spec{Name: name, Port: port, Health: health, HealthCmd: healthCmd, Preemptible: preemptible}
			if err := req.Service.Check(); err != nil {
				return err
			}
			ctx, cancel := reqCtx()
			defer cancel()
			r, err := c.client().Claim(ctx, req)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(c.stdout, r)
			}
			where := "no GPU"
			if len(r.GPUs) > 0 {
				where = "GPU" + plural(len(r.GPUs)) + " " + safe(r.CUDAVisibleDevices)
			}
			fmt.Fprintf(c.stdout, "service %s started on %s (%s, lease %s, tmux %s)\n", safe(name), safe(r.Node), where, safe(r.ID), safe(r.Session))
			if u := service.URL(r.Node, port); u != "" {
				fmt.Fprintf(c.stdout, "it answers at %s once healthy: dibs services shows its state\n", safe(u))
			}
			return nil
		},
	}
	f.add(c, cmd)
	fl := cmd.Flags()
	fl.IntVar(&port, "port", 0, "the TCP port the service listens on (checked, and in its URL)")
	fl.StringVar(&health, "health", "", "an HTTP path whose 2xx answer means healthy, e.g. /health (needs --port)")
	fl.StringVar(&healthCmd, "health-cmd", "", "a shell command whose exit 0 means healthy, run as you in the service's directory at every check (everyone sees it: keep secrets out)")
	fl.IntVar(&replicas, "replicas", 1, "how many replicas (only 1 for now)")
	fl.BoolVar(&preemptible, "preemptible", false, "let quota preemption take its GPUs (a service is never preempted otherwise)")
	fl.StringVar(&dir, "dir", "", "working directory (default: the current one)")
	fl.BoolVar(&cleanEnv, "clean-env", false, "start COMMAND with the node's default PATH, not yours")
	return cmd
}

// serviceRow is one service as `dibs services --json` prints it.
type serviceRow struct {
	Name     string        `json:"name"`
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
	// ProxyURL is the service's address on the agents' proxy (the node
	// asked; any node would do), with ProxyPort; empty when it has none.
	ProxyURL  string `json:"proxy_url,omitempty"`
	ProxyPort int    `json:"proxy_port,omitempty"`
}

// serviceRows are the board's services, by owner then name. A service
// whose node is not alive shows state unknown: its supervisor is not
// heard; one whose node is lost past the grace shows moving (the agent
// says so: it is being placed on another node).
func serviceRows(b api.Board) []serviceRow {
	state := map[string]string{}
	for _, n := range b.Nodes {
		state[n.Name] = n.State
	}
	var rows []serviceRow
	for _, l := range b.Services {
		if l.Service == nil {
			continue
		}
		r := serviceRow{Name: l.Service.Name, Owner: l.User, Node: l.Node, URL: service.URL(l.Node, l.Service.Port),
			State: l.Service.State, Since: l.Service.Since, Restarts: l.Service.Restarts, GPUs: l.GPUs, PID: l.Service.PID,
			Lease: l.ID, Session: l.Session, ProxyURL: service.URL(b.Self, l.Service.ProxyPort), ProxyPort: l.Service.ProxyPort}
		if r.GPUs == nil {
			r.GPUs = []int{}
		}
		if st := state[l.Node]; st != "" && st != api.NodeAlive && r.State != service.Moving {
			r.State = service.State("unknown (" + st + ")")
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b serviceRow) int {
		return strings.Compare(a.Owner+"\x00"+a.Name, b.Owner+"\x00"+b.Name)
	})
	return rows
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s%s\n", safe(r.Name), safe(r.Owner), safe(r.Node), safe(url), safe(string(r.State)), up, r.Restarts, gpus, proxyCell(proxied, r))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// findService is the caller's live service named name, else (for reading
// only, mineOnly false) the one service of that name anyone runs.
func (c *cli) findService(ctx context.Context, cl *api.Client, name string, mineOnly bool) (serviceRow, error) {
	b, err := cl.Board(ctx)
	if err != nil {
		return serviceRow{}, err
	}
	var theirs []serviceRow
	for _, r := range serviceRows(b) {
		if r.Name != name {
			continue
		}
		if r.Owner == b.You.User {
			return r, nil
		}
		theirs = append(theirs, r)
	}
	if !mineOnly && len(theirs) == 1 {
		return theirs[0], nil
	}
	return serviceRow{}, fmt.Errorf("you run no service named %s: dibs services lists them", safe(name))
}

func urlCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "url NAME",
		Short: "Print where a service answers now (yours, or the one service of that name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			r, err := c.findService(ctx, c.client(), args[0], false)
			if err != nil {
				return err
			}
			if r.URL == "" {
				return fmt.Errorf("service %s has no port (started without --port), so no URL: it runs on %s", safe(r.Name), safe(r.Node))
			}
			if r.ProxyURL != "" {
				fmt.Fprintln(c.stdout, safe(r.ProxyURL)+" (proxy, any node)")
			}
			fmt.Fprintln(c.stdout, safe(r.URL))
			return nil
		},
	}
}

func stopCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME|LEASE",
		Short: "Stop a service (or end a run's lease, as dibs release does)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			// A service of yours by that name first; else a lease id.
			id, name := args[0], ""
			r, err := c.findService(ctx, cl, id, true)
			switch {
			case err == nil:
				id, name = r.Lease, r.Name
			case !isLeaseID(id):
				return err
			}
			if _, err := cl.Release(ctx, api.ReleaseRequest{IDs: []string{id}}); err != nil {
				return err
			}
			if name != "" {
				fmt.Fprintf(c.stdout, "service %s stopped (lease %s); its log stays: dibs logs %s\n", safe(name), safe(id), safe(name))
			} else {
				fmt.Fprintf(c.stdout, "released %s\n", safe(id))
			}
			return nil
		},
	}
}

// orServiceSession is name's service session (svc-NAME) when a lookup by
// name as given found nothing and name is a service's name: lease ids,
// requests and session names win, a service's name comes after.
func orServiceSession(err error, name string) (string, bool) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != string(refusal.CodeNotFound) || service.CheckName(name) != nil {
		return "", false
	}
	return service.SessionName(name), true
}

func isLeaseID(id string) bool { _, ok := lease.NodeOfID(id); return ok }
