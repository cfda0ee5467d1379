package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// bookFlags are `dibs book`'s: which GPUs, when, for how long.
type bookFlags struct {
	count int
	ids   string
	node  string
	pools []string
	model string
	at    string
	dur   string
	note  string
	kind  string
	json  bool

	// nodes and perNode book across nodes: perNode GPUs on each of nodes.
	nodes   int
	perNode int
	// where is --nodelist and --exclude, which the agent checks.
	where lease.NodeChoice
}

// bookCmd is `dibs book`. The booking commands are functions of the cli,
// not methods, to keep the cli type small.
func bookCmd(c *cli) *cobra.Command {
	var f bookFlags
	cmd := &cobra.Command{
		Use:               "book (-g N | --nodes N --gpus-per-node M) --at TIME --for DUR",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "Book GPUs ahead: they are yours from TIME for DUR (dibs run --at also starts a command then)",
		Example: `  dibs book -g 4 --at "tomorrow 09:00" --for 3h --note "deadline run"
  dibs book -g 2 --pool h100 --at "fri 14:00" --for 90m
  dibs book --nodes 3 --gpus-per-node 4 --at "sat 08:00" --for 6h   # all three nodes or none
  dibs book --ids 0,1 --node gpu-02 --at "2026-06-03 09:00" --for 1d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request(time.Now())
			if err != nil {
				return err
			}
			ctx, cancel := reqCtx()
			defer cancel()
			b, err := c.client().Book(ctx, req)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(c.stdout, b)
			}
			if req.Nodes > 1 {
				return printBookedAcross(ctx, c, b)
			}
			printBooked(c, b)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.count, "gpus", "g", 0, "how many GPUs (as in srun --gpus); dibs picks ones that are free then and sit close together")
	fl.IntVar(&f.nodes, "nodes", 0, "book on N nodes at once, all or nothing (as a gang reserves); with --gpus-per-node")
	fl.IntVar(&f.perNode, "gpus-per-node", 0, "GPUs to book on each node (with --nodes)")
	fl.StringVar(&f.ids, "ids", "", "exactly these GPU `IDS`, e.g. 0,2 (as nvidia-smi -i numbers them)")
	fl.StringVar(&f.node, "node", "", "book on this node (default: the best node that has them free then); a --nodelist of one")
	fl.StringSliceVarP(&f.where.Only, "nodelist", "w", nil, "only these nodes, e.g. na,nb (SLURM's -w)")
	fl.StringSliceVarP(&f.where.Exclude, "exclude", "x", nil, "never these nodes, e.g. nc (SLURM's -x)")
	fl.StringSliceVar(&f.pools, "pool", nil, "only nodes in this pool (a node tag)")
	fl.StringSliceVar(&f.pools, "tag", nil, "only nodes with this tag (the same as --pool)")
	fl.StringVar(&f.model, "model", "", "only GPUs whose model contains this, e.g. H100")
	fl.StringVar(&f.at, "at", "", `when it starts: "tomorrow 09:00", "mon 14:30", "2026-06-03 09:00", "in 2h"`)
	fl.StringVar(&f.dur, "for", "", "how long, e.g. 3h or 1d")
	fl.StringVar(&f.note, "note", "", "what it is for; shown on the board")
	fl.StringVar(&f.kind, "kind", "interactive", "interactive or batch (their maximum time limits differ)")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"interactive\ta person at a shell (default limit 4h)", "batch\ta run nobody watches (default limit 24h)"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("node", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("nodelist", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("exclude", c.completeNodes)
	cmd.RegisterFlagCompletionFunc("gpus", cobra.NoFileCompletions)
	cmd.RegisterFlagCompletionFunc("ids", cobra.NoFileCompletions)
	cmd.RegisterFlagCompletionFunc("nodes", cobra.NoFileCompletions)
	cmd.RegisterFlagCompletionFunc("gpus-per-node", cobra.NoFileCompletions)
	cmd.SetFlagErrorFunc(gpusFlagError)
	return cmd
}

// request checks the flags and reads --at in the local time zone.
func (f *bookFlags) request(now time.Time) (api.BookRequest, error) {
	req := api.BookRequest{Node: f.node, Count: f.count, Duration: f.dur, Kind: f.kind, Note: f.note, Model: f.model, Tags: f.pools, NodeChoice: f.where}
	ids, err := parseIDs(f.ids)
	if err != nil {
		return req, err
	}
	req.GPUs = ids
	switch {
	case f.nodes < 0 || f.perNode < 0:
		return req, errors.New("--nodes and --gpus-per-node take a positive count")
	case f.nodes > 1 && f.perNode == 0:
		return req, errors.New("--nodes needs --gpus-per-node M: how many GPUs on each node")
	case f.perNode > 0 && (f.count > 0 || len(req.GPUs) > 0):
		return req, errors.New("give either -g N (or --ids) for one node, or --nodes N --gpus-per-node M across nodes")
	case f.nodes > 1 && f.node != "":
		return req, errors.New("--node books one node: drop it, and dibs picks --nodes N nodes that can take the booking")
	case f.perNode > 0:
		req.Count = f.perNode
		if f.nodes > 1 {
			req.Nodes = f.nodes
		}
	}
	if req.Count == 0 && len(req.GPUs) == 0 {
		return req, errors.New("say how many GPUs to book (-g 4) or which (--ids 0,2)")
	}
	if err := lease.CheckCountOrIDs(f.count, ids); err != nil {
		return req, err
	}
	if f.at == "" {
		return req, errors.New(`say when the booking starts: --at "tomorrow 09:00"`)
	}
	if f.dur == "" {
		return req, errors.New("say how long the booking is: --for 3h")
	}
	if _, err := words.ParseDuration(f.dur); err != nil {
		return req, fmt.Errorf("--for: %w", err)
	}
	at, err := words.ParseWhen(f.at, now)
	if err != nil {
		return req, fmt.Errorf("--at: %w", err)
	}
	req.Start = at
	return req, nil
}

// bookRun is `dibs run --at`: a booking whose command starts at its time.
func bookRun(ctx context.Context, c *cli, cl *api.Client, f *claimFlags, req api.ClaimRequest) error {
	if f.mig != "" || f.mem != "" || f.force {
		return errors.New("--at books whole GPUs: drop --mig, --mem and --force")
	}
	if f.dur == "" {
		return errors.New("say how long the booking is: --for 3h")
	}
	at, err := words.ParseWhen(f.at, time.Now())
	if err != nil {
		return fmt.Errorf("--at: %w", err)
	}
	b, err := cl.Book(ctx, api.BookRequest{
		Node: req.Node, Count: req.Count, GPUs: req.GPUs, Start: at, Duration: req.Duration, Kind: req.Kind,
		Note: req.Note, Model: req.Model, Tags: req.Tags, Run: req.Run, NodeChoice: req.NodeChoice,
	})
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(c.stdout, b)
	}
	printBooked(c, b)
	fmt.Fprintf(c.stdout, "its command starts then in tmux session %s (`dibs attach %s`)\n", safe(b.Session), safe(b.ID))
	return nil
}

// printBookedAcross reports a booking across nodes: the first part's id
// names the whole, and the parts come from `dibs bookings`.
func printBookedAcross(ctx context.Context, c *cli, first lease.Lease) error {
	bs, err := c.client().Bookings(ctx)
	if err != nil {
		return err
	}
	var nodes []string
	for _, b := range bs.Bookings {
		if b.Group == first.ID {
			nodes = append(nodes, safe(b.Node)+":"+safe(b.CUDAVisibleDevices()))
		}
	}
	fmt.Fprintf(c.stdout, "%s: %d GPU%s on each of %d nodes (%s) booked %s to %s (in %s); `dibs unbook %s` withdraws every part\n",
		safe(first.ID), len(first.GPUs), plural(len(first.GPUs)), len(nodes), strings.Join(nodes, " "), first.StartedAt.Local().Format("Mon Jan 2 15:04"),
		lease.SpanEnd(first.StartedAt.Local(), first.ExpiresAt), words.FormatDuration(words.ToMinute(time.Until(first.StartedAt))), safe(first.ID))
	return nil
}

func printBooked(c *cli, b lease.Lease) {
	fmt.Fprintf(c.stdout, "%s: GPU%s %s on %s booked %s to %s (in %s); `dibs unbook %s` withdraws it\n",
		safe(b.ID), plural(len(b.GPUs)), safe(b.CUDAVisibleDevices()), safe(b.Node), b.StartedAt.Local().Format("Mon Jan 2 15:04"),
		lease.SpanEnd(b.StartedAt.Local(), b.ExpiresAt), words.FormatDuration(words.ToMinute(time.Until(b.StartedAt))), safe(b.ID))
}

func bookingsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "bookings",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "List the cluster's bookings that have not started yet",
		Args:              cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(c, asJSON, (*api.Client).Bookings, func(bs api.Bookings) error {
				printBookings(c.stdout, bs.Bookings, time.Now())
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printBookings prints bookings as `dibs bookings` shows them: a booking
// across nodes is one line, named by its first part's id, with its nodes.
func printBookings(w io.Writer, bs []lease.Lease, now time.Time) {
	if len(bs) == 0 {
		fmt.Fprintln(w, "no bookings: `dibs book -g N --at TIME --for DUR` makes one")
		return
	}
	parts := map[string][]lease.Lease{}
	for _, b := range bs {
		if b.Group != "" {
			parts[b.Group] = append(parts[b.Group], b)
		}
	}
	fmt.Fprintf(w, "%-12s %-10s %-14s %-16s %-6s %-7s %s\n", "BOOKING", "USER", "GPUS", "FROM", "FOR", "IN", "NOTE")
	for _, b := range bs {
		id, gpus, note, width := b.ID, safe(b.Node)+":"+safe(b.CUDAVisibleDevices()), b.Note, 30
		if b.Group != "" {
			ps := parts[b.Group]
			if ps == nil {
				continue // printed with its first part
			}
			delete(parts, b.Group)
			var nodes []string
			for _, p := range ps {
				nodes = append(nodes, safe(p.Node))
			}
			id = b.Group
			gpus = fmt.Sprintf("%d nodes × %d", len(ps), len(b.GPUs))
			where := "on " + strings.Join(nodes, ",")
			note = strings.TrimSpace(where + "  " + note)
			// A booking's nodes are never cut: they say where it is.
			width += len(where) + 2
		}
		switch {
		case b.Job != nil && len(b.Job.Command) > 0:
			note = strings.TrimSpace("runs " + strings.Join(b.Job.Command, " ") + "  " + note)
		case b.Job.RunsCommand():
			// Someone else's booked run: its command is theirs.
			note = strings.TrimSpace("runs a command  " + note)
		}
		fmt.Fprintf(w, "%-12s %-10s %-14s %-16s %-6s %-7s %s\n", columns.Clip(safe(id), 12), columns.Clip(safe(b.User), 10),
			columns.Clip(gpus, 14), b.StartedAt.Local().Format("Mon Jan 2 15:04"),
			words.FormatDuration(b.ExpiresAt.Sub(b.StartedAt)), words.FormatDuration(words.ToMinute(b.StartedAt.Sub(now))), columns.Clip(safe(note), width))
	}
}

func unbookCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:               "unbook BOOKING...",
		ValidArgsFunction: c.completeMyBookings,
		Short:             "Withdraw bookings that have not started (a booking across nodes: every part)",
		Args:              cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachID(c, args, "unbooked", (*api.Client).Unbook)
		},
	}
}
