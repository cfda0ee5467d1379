package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// queueFlags are what run and claim add to queue instead of failing.
type queueFlags struct {
	queue       bool
	nodes       int
	gpusPerNode int
	requeue     bool
	maxRestarts int
	torchrun    bool
	model       string
	wait        time.Duration
}

func (q *queueFlags) add(cmd *cobra.Command, run bool) {
	fl := cmd.Flags()
	if run {
		fl.BoolVar(&q.queue, "queue", false, "if it does not fit now, wait in the cluster's queue (returns at once with the entry id, like sbatch)")
		fl.IntVar(&q.nodes, "nodes", 0, "run on N nodes at once, all or nothing (a gang); with --gpus-per-node")
		fl.IntVar(&q.gpusPerNode, "gpus-per-node", 0, "GPUs on each node of a gang")
		fl.BoolVar(&q.requeue, "requeue", false, "put it back in the queue if a rank fails or it is preempted")
		fl.IntVar(&q.maxRestarts, "max-restarts", 0, "how often --requeue may restart it (default 3)")
		fl.BoolVar(&q.torchrun, "torchrun", false, "wrap CMD in torchrun with the gang's c10d rendezvous")
	} else {
		fl.BoolVar(&q.queue, "queue", false, "if it does not fit now, wait in the queue until granted (like salloc); Ctrl-C withdraws")
		fl.DurationVar(&q.wait, "wait", 0, "with --queue: give up after this long, withdrawing the request (e.g. 30m; default: wait until granted)")
	}
	fl.StringVar(&q.model, "model", "", "only GPUs whose model contains this, e.g. H100 (with --queue)")
}

func (q *queueFlags) request(req api.ClaimRequest) (api.SubmitRequest, error) {
	s := api.SubmitRequest{Claim: req, Nodes: q.nodes, GPUsPerNode: q.gpusPerNode, Requeue: q.requeue, MaxRestarts: q.maxRestarts, Torchrun: q.torchrun, Model: q.model}
	if q.nodes > 1 && q.gpusPerNode <= 0 {
		return s, errors.New("--nodes needs --gpus-per-node G")
	}
	if q.nodes > 1 && (req.Count > 0 || len(req.GPUs) > 0) {
		return s, errors.New("give either -g N or --nodes N --gpus-per-node G")
	}
	if q.nodes <= 1 && q.gpusPerNode > 0 {
		s.Claim.Count = q.gpusPerNode
	}
	if q.torchrun && q.nodes <= 1 {
		s.Nodes, s.GPUsPerNode = 1, s.Claim.Count
	}
	return s, nil
}

// waitGranted follows the board until a lease for the entry exists, printing
// the position while it waits; Ctrl-C withdraws the request.
func (c *cli) waitGranted(cl *api.Client, sub api.Submitted, asJSON bool, wait time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id := sub.ID
	fmt.Fprintf(c.stderr, "\r%s waiting: position %d of %d (Ctrl-C withdraws)   ", safe(id), sub.Position, sub.Waiting)
	lastPos := sub.Position
	boards, errf := cl.Watch(ctx)
	var giveUp <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		giveUp = t.C
	}
	for {
		select {
		case <-giveUp:
			giveUp = nil
			if err := withdrawAfterWait(c.stderr, cl, id, wait); err != nil {
				return err
			}
			// It started as we gave up: the next board shows its lease.
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := cl.Cancel(cctx, id); err != nil {
				return fmt.Errorf("withdraw %s: %w", id, err)
			}
			return &exitError{code: 130, msg: "withdrew " + id}
		case b, ok := <-boards:
			if !ok {
				if ctx.Err() != nil {
					// Ctrl-C closed the stream first: withdraw on the next turn.
					boards = nil
					continue
				}
				return fmt.Errorf("waiting for %s: %w", id, errf())
			}
			for _, n := range b.Nodes {
				for _, g := range n.GPUs {
					if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, id+"#") && l.ReservedUntil.IsZero() {
						r := api.ClaimResponse{ID: l.ID, Node: l.Node, GPUs: l.GPUs, CUDAVisibleDevices: l.CUDAVisibleDevices(), Token: l.Token, Kind: string(l.Kind), ExpiresAt: l.ExpiresAt, Session: l.Session}
						if asJSON {
							return printJSON(c.stdout, r)
						}
						fmt.Fprintln(c.stderr)
						c.printGrant(r)
						return nil
					}
				}
			}
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			q, err := cl.Queue(qctx)
			cancel()
			if err == nil {
				for _, e := range q.Entries {
					if e.ID == id && e.Position != lastPos && !e.Running {
						lastPos = e.Position
						est := ""
						if !e.EstStart.IsZero() {
							est = ", expected to start " + e.EstStart.Local().Format("Mon 15:04")
						}
						fmt.Fprintf(c.stderr, "\r%s waiting: position %d of %d%s (Ctrl-C withdraws)   ", safe(id), e.Position, len(q.Entries), est)
					}
				}
			}
		}
	}
}

func (c *cli) queueCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List every waiting request in the cluster: position, user, size, priority, expected start",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			q, err := c.client().Queue(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.stdout, q)
			}
			printQueue(c.stdout, q, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printQueue prints the queue as `dibs queue` shows it. Users, notes and
// the scheduler's reasons come from every node: all are escaped.
func printQueue(w io.Writer, q api.Queue, now time.Time) {
	if len(q.Entries) == 0 {
		fmt.Fprintln(w, "the queue is empty")
		return
	}
	fmt.Fprintf(w, "%-3s %-12s %-9s %-7s %-6s %8s %-11s %s\n", "POS", "ID", "USER", "SIZE", "LIMIT", "PRIORITY", "START", "WAITING FOR")
	for _, e := range q.Entries {
		size := fmt.Sprintf("%d", e.GPUsPerNode)
		if e.Nodes > 1 {
			size = fmt.Sprintf("%dx%d", e.Nodes, e.GPUsPerNode)
		}
		pos, start, why := fmt.Sprint(e.Position), "?", safe(e.Waiting)
		switch {
		case e.Running:
			pos, start, why = "-", "running", ""
		case !e.EstStart.IsZero() && !e.EstStart.After(now):
			start = "now"
		case !e.EstStart.IsZero():
			start = "in " + lease.FormatDuration(e.EstStart.Sub(now))
		}
		line := fmt.Sprintf("%-3s %-12s %-9s %-7s %-6s %8.0f %-11s", pos, clip(safe(e.ID), 12), clip(safe(e.User), 9), size, safe(e.Duration), e.Priority, start)
		if len([]rune(line))+1+len([]rune(why)) <= 80 {
			fmt.Fprintf(w, "%s %s\n", line, why)
		} else {
			fmt.Fprintf(w, "%s\n    %s\n", line, clip(why, 76))
		}
	}
	fmt.Fprintf(w, "\nscheduler: %s\n", safe(q.Scheduler))
}

func (c *cli) cancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID...",
		Short: "Withdraw queued requests",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			for _, id := range args {
				if err := c.client().Cancel(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "cancelled %s\n", safe(id))
			}
			return nil
		},
	}
}

func (c *cli) usageCmd() *cobra.Command {
	var asJSON bool
	var window string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "GPU-hours per user over a window, and each user's fair-share factor",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := lease.ParseDuration(window); err != nil {
				return fmt.Errorf("--window: %w", err)
			}
			ctx, cancel := reqCtx()
			defer cancel()
			u, err := c.client().Usage(ctx, window)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.stdout, u)
			}
			printUsage(c.stdout, u)
			return nil
		},
	}
	cmd.Flags().StringVar(&window, "window", "7d", "how far back to count")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printUsage prints `dibs usage`. User and node names come from every
// node: all are escaped.
func printUsage(w io.Writer, u api.UsageReport) {
	fmt.Fprintf(w, "since %s\n", u.Since.Local().Format("Mon Jan 2 15:04"))
	fmt.Fprintf(w, "%-12s %10s %12s %6s %10s %8s\n", "USER", "GPU-HOURS", "DECAYED", "SHARE", "FAIRSHARE", "RUNNING")
	for _, x := range u.Users {
		fmt.Fprintf(w, "%-12s %10.1f %12.1f %6.1f %10.3f %8d\n", clip(safe(x.User), 12), x.GPUHours, x.Decayed, x.Share, x.FairShare, x.RunningGPU)
	}
	if len(u.Missing) > 0 {
		missing := make([]string, len(u.Missing))
		for i, m := range u.Missing {
			missing[i] = safe(m)
		}
		fmt.Fprintf(w, "not counted (no answer): %s\n", strings.Join(missing, ", "))
	}
}

// withdrawAfterWait withdraws a request that waited --wait in vain, and
// says so. A request that started meanwhile cannot be withdrawn: nil, and
// the caller waits for its lease to show.
func withdrawAfterWait(stderr io.Writer, cl *api.Client, id string, wait time.Duration) error {
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cl.Cancel(cctx, id)
	var ae *api.Error
	if errors.As(err, &ae) && strings.Contains(ae.Msg, "already running") {
		return nil
	}
	fmt.Fprintln(stderr)
	if err != nil {
		return fmt.Errorf("gave up on %s after waiting %s, but could not withdraw it: %w (withdraw it with `dibs cancel %s`)", id, lease.FormatDuration(wait), err, id)
	}
	return &exitError{code: exitGaveUp, msg: fmt.Sprintf("gave up after waiting %s: nothing fitted, so %s was withdrawn (`dibs queue` shows what waits; try a longer --wait, or fewer GPUs)", lease.FormatDuration(wait), safe(id))}
}

// exitGaveUp is the status of a claim whose --wait ran out (timeout(1)'s).
const exitGaveUp = 124
