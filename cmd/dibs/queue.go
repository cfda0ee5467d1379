package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// queueFlags are what run and claim add to queue instead of failing.
type queueFlags struct {
	queue       bool
	nodes       int
	gpusPerNode int
	requeue     bool
	noRequeue   bool
	maxRestarts int
	torchrun    bool
	perGPU      bool
	wait        time.Duration
	// array, after and afterAny make a job array and dependencies
	// (sweep.go); any of them queues.
	array    string
	after    []string
	afterAny []string
}

func (q *queueFlags) add(cmd *cobra.Command, run bool) {
	fl := cmd.Flags()
	if run {
		fl.BoolVar(&q.queue, "queue", false, "if it does not fit now, wait in the cluster's queue (returns at once with the entry id, like sbatch)")
		fl.IntVar(&q.nodes, "nodes", 0, "run on N nodes at once, all or nothing (a gang); with --gpus-per-node")
		fl.IntVar(&q.gpusPerNode, "gpus-per-node", 0, "GPUs on each node of a gang")
		fl.BoolVar(&q.requeue, "requeue", false, "put it back in the queue if a rank fails (a run preempted for someone else goes back anyway)")
		fl.BoolVar(&q.noRequeue, "no-requeue", false, "end it, instead of putting it back in the queue, if it is preempted for someone else")
		fl.IntVar(&q.maxRestarts, "max-restarts", 0, "how often --requeue may restart it (default 3)")
		fl.BoolVar(&q.torchrun, "torchrun", false, "wrap CMD in torchrun with the gang's c10d rendezvous (one process per GPU, started by torchrun)")
		fl.BoolVar(&q.perGPU, "per-gpu", false, "start CMD once per GPU on every node, each with RANK, LOCAL_RANK, WORLD_SIZE set for env:// (as srun --ntasks-per-node does)")
		q.addSweep(cmd)
	} else {
		fl.BoolVar(&q.queue, "queue", false, "if it does not fit now, wait in the queue until granted (like salloc); Ctrl-C withdraws")
		fl.DurationVar(&q.wait, "wait", 0, "with --queue: give up after this long, withdrawing the request (e.g. 30m; default: wait until granted)")
	}
}

// submit queues req as these flags shape it (request), and returns what it
// sent with the agent's answer.
func (q *queueFlags) submit(ctx context.Context, cl *api.Client, req api.ClaimRequest) (api.SubmitRequest, api.Submitted, error) {
	sreq, err := q.request(req)
	if err != nil {
		return sreq, api.Submitted{}, err
	}
	s, err := cl.Submit(ctx, sreq)
	return sreq, s, err
}

func (q *queueFlags) request(req api.ClaimRequest) (api.SubmitRequest, error) {
	s := api.SubmitRequest{Claim: req, Nodes: q.nodes, GPUsPerNode: q.gpusPerNode, Requeue: q.requeue, NoRequeue: q.noRequeue, MaxRestarts: q.maxRestarts, Torchrun: q.torchrun, PerGPU: q.perGPU, Model: req.Model,
		Array: q.array, After: q.after, AfterAny: q.afterAny}
	if q.nodes > 1 && q.gpusPerNode <= 0 {
		return s, errors.New("--nodes needs --gpus-per-node G")
	}
	if q.nodes > 1 && (req.Count > 0 || len(req.GPUs) > 0) {
		return s, errors.New("give either -g N or --nodes N --gpus-per-node G")
	}
	if q.nodes <= 1 && q.gpusPerNode > 0 {
		s.Claim.Count = q.gpusPerNode
	}
	if q.torchrun && q.perGPU {
		return s, errors.New("give either --torchrun or --per-gpu: both start one process per GPU")
	}
	if (q.torchrun || q.perGPU) && q.nodes <= 1 {
		s.Nodes, s.GPUsPerNode = 1, s.Claim.Count
	}
	return s, nil
}

// startWait is how long a just-submitted request that the queue says
// starts now is followed before it is reported as waiting after all: a
// scheduling pass and the start take milliseconds, a start on a slow peer
// up to a few hundred.
const startWait = 3 * time.Second

// entryLeases are the granted leases (not gang reservations) started for
// queue entry id, in board order.
func entryLeases(b api.Board, id string) []lease.Lease {
	var out []lease.Lease
	seen := map[string]bool{}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			held := g.Shares // a queued budget on a shared GPU, or a MIG instance
			if g.Lease != nil {
				held = append([]lease.Lease{*g.Lease}, held...)
			}
			for _, l := range held {
				if !seen[l.ID] && strings.HasPrefix(l.Entry, id+"#") && l.ReservedUntil.IsZero() {
					seen[l.ID] = true
					out = append(out, l)
				}
			}
		}
	}
	return out
}

// grantOf is a lease from the board as a claim's answer; self is the node
// whose agent drew the board (the answer's Here).
func grantOf(l lease.Lease, self string) api.ClaimResponse {
	return api.ClaimResponse{ID: l.ID, Node: l.Node, GPUs: l.GPUs, CUDAVisibleDevices: l.CUDAVisibleDevices(), Token: l.Token, Kind: string(l.Kind), ExpiresAt: l.ExpiresAt, Session: l.Session, MIG: l.MIG, MemMiB: l.MemMiB,
		Borrowed: l.Borrowed, Here: l.Node == self}
}

// queueEntry finds id in the queue; nil when it is not there.
func queueEntry(q api.Queue, id string) *api.QueuedEntry {
	for i := range q.Entries {
		if q.Entries[i].ID == id {
			return &q.Entries[i]
		}
	}
	return nil
}

// waitingCount is how many requests wait (running ones aside).
func waitingCount(q api.Queue) int {
	n := 0
	for _, e := range q.Entries {
		if !e.Running {
			n++
		}
	}
	return n
}

// submitOutcome is what became of a request right after it was queued.
type submitOutcome struct {
	// started: the scheduler started it at once, on leases (empty when
	// it has already ended).
	started bool
	leases  []lease.Lease
	// self is the node whose agent answered.
	self string
	// failed says why it could not start, when it failed at once.
	failed string
	// entry is where it waits, when it does.
	entry *api.QueuedEntry
	total int
}

// followSubmitted watches a just-queued request until it is clear whether
// it started at once or waits: the queue's own plan says which (an entry
// that waits says why), and a start shows on the board within
// milliseconds. After startWait it is reported as waiting.
func followSubmitted(cl *api.Client, sub api.Submitted) submitOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	out := submitOutcome{entry: &api.QueuedEntry{ID: sub.ID, Position: sub.Position}, total: sub.Waiting}
	boards, _ := cl.Watch(ctx)
	var gone <-chan time.Time
	for {
		var b api.Board
		select {
		case <-gone:
			// It left the queue and no failure was told: it ran and
			// has already ended.
			return submitOutcome{started: true}
		case x, ok := <-boards:
			if !ok {
				if gone != nil {
					return submitOutcome{started: true}
				}
				return out
			}
			b = x
		}
		q, err := cl.Queue(ctx)
		if err != nil {
			return out
		}
		e, ls := queueEntry(q, sub.ID), entryLeases(b, sub.ID)
		switch {
		case e == nil:
			// Gone from the queue this soon: it failed to start, or ran
			// and has already ended. Its origin (this agent) says which.
			st, err := cl.EntryStatus(ctx, sub.ID)
			switch {
			case err == nil && st.State == queue.EntryFailed:
				return submitOutcome{failed: fmt.Sprintf("your job %s failed: %s", sub.ID, st.Reason)}
			case err == nil && st.State == queue.EntryCancelled:
				return submitOutcome{failed: fmt.Sprintf("%s was withdrawn before it started", sub.ID)}
			case err == nil && st.State == queue.EntryFinished:
				return submitOutcome{started: true}
			}
			if gone == nil {
				gone = time.After(500 * time.Millisecond)
			}
		case e.Running && len(ls) > 0:
			return submitOutcome{started: true, leases: ls, self: b.Self}
		case e.Running:
			// The board came before the start, the queue after: the
			// next board shows the leases.
		case e.Waiting != "" && e.Waiting != queue.WaitingStarting:
			return submitOutcome{entry: e, total: waitingCount(q)}
		default:
			out.entry, out.total = e, waitingCount(q)
		}
	}
}

// reportSubmitted says what became of a queued run: started at once (with
// its leases and sessions), or its place in the queue, like sbatch.
func (c *cli) reportSubmitted(cl *api.Client, sub api.Submitted, asJSON bool) error {
	o := followSubmitted(cl, sub)
	if o.failed != "" {
		return errors.New(o.failed)
	}
	if asJSON {
		r := struct {
			api.Submitted
			Started bool                `json:"started"`
			Leases  []api.ClaimResponse `json:"leases,omitempty"`
		}{Submitted: sub, Started: o.started}
		r.Position, r.Waiting = 0, 0
		if !o.started {
			r.Position, r.Waiting = o.entry.Position, o.total
		}
		for _, l := range o.leases {
			r.Leases = append(r.Leases, grantOf(l, o.self))
		}
		return printJSON(c.stdout, r)
	}
	id := safe(sub.ID)
	switch {
	case o.started && len(o.leases) == 0:
		fmt.Fprintf(c.stdout, "started %s at once; it has already ended\n", id)
	case o.started:
		fmt.Fprintf(c.stdout, "started %s at once (it did not have to wait)\n", id)
		for _, l := range o.leases {
			c.printGrant(grantOf(l, o.self))
			if l.Session != "" {
				fmt.Fprintf(c.stdout, "session %s started on %s: `dibs attach %s` to see it\n", safe(l.Session), safe(l.Node), safe(l.ID))
			}
		}
	default:
		fmt.Fprintf(c.stdout, "queued %s: position %d of %d; it starts on its own when its turn comes (`dibs queue` shows it, `dibs cancel %s` withdraws)\n", id, o.entry.Position, o.total, id)
	}
	return nil
}

// waitGranted follows the board until a lease for the entry exists, printing
// the position while it waits; Ctrl-C withdraws the request. A request
// that starts at once prints only its grant. With wait set, it gives up
// after that long and withdraws the request.
func (c *cli) waitGranted(cl *api.Client, sub api.Submitted, asJSON bool, wait time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id := sub.ID
	// Nothing is said until the queue says the request waits (or startWait
	// passes without a grant): one that starts at once never "waits".
	lastPos := 0
	say := func(pos, total int, est time.Time) {
		lastPos = pos
		s := ""
		if !est.IsZero() {
			s = ", expected to start " + est.Local().Format("Mon 15:04")
		}
		fmt.Fprintf(c.stderr, "\r%s waiting: position %d of %d%s (Ctrl-C withdraws)   ", safe(id), pos, total, s)
	}
	quiet := time.NewTimer(startWait)
	defer quiet.Stop()
	boards, errf := cl.Watch(ctx)
	var giveUp <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		giveUp = t.C
	}
	for {
		select {
		case <-quiet.C:
			if lastPos == 0 {
				say(sub.Position, sub.Waiting, time.Time{})
			}
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
			if ls := entryLeases(b, id); len(ls) > 0 {
				r := grantOf(ls[0], b.Self)
				if asJSON {
					return printJSON(c.stdout, r)
				}
				if lastPos > 0 {
					fmt.Fprintln(c.stderr)
				}
				c.printClaimed(r)
				return nil
			}
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			q, err := cl.Queue(qctx)
			cancel()
			if e := queueEntry(q, id); err == nil && e != nil && !e.Running && e.Position != lastPos && (e.Waiting != "" && e.Waiting != queue.WaitingStarting || lastPos > 0) {
				say(e.Position, waitingCount(q), e.EstStart)
			}
		}
	}
}

func queueCmd(c *cli) *cobra.Command {
	var asJSON, verbose bool
	cmd := &cobra.Command{
		Use:               "queue",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "List every waiting request in the cluster: position, user, size, priority, expected start",
		Args:              cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.Queue, error) {
				q, err := cl.Queue(ctx)
				if err != nil {
					return q, err
				}
				return shownQueue(q), nil
			}, func(q api.Queue) error {
				printQueueWith(c.stdout, q, time.Now(), verbose)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with every node's reason, node_reasons)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "under each waiting request, why it does not start on each node")
	return cmd
}

// shownQueue is the queue as `dibs queue` prints it, as a table or as
// JSON, so both say the same: priorities are whole numbers (as SLURM's
// are; the fraction is only the age factor creeping up by the second), and
// a running entry has no position (the table's "-") nor priority.
func shownQueue(q api.Queue) api.Queue {
	out := q
	out.Entries = make([]api.QueuedEntry, len(q.Entries))
	for i, e := range q.Entries {
		e.Priority = math.Round(e.Priority)
		if e.Running {
			e.Position, e.Priority = 0, 0
		}
		out.Entries[i] = e
	}
	return out
}

// printQueue prints the queue as `dibs queue` shows it.
func printQueue(w io.Writer, q api.Queue, now time.Time) { printQueueWith(w, q, now, false) }

// printQueueWith prints the queue, with verbose every node's reason under
// each entry. Users, notes and the scheduler's reasons come from every
// node: all are escaped. A reason is cut to the width of a terminal only
// when w is one: into a pipe or a file it is whole.
func printQueueWith(w io.Writer, q api.Queue, now time.Time, verbose bool) {
	cut := writerIsTerminal(w)
	if len(q.Entries) == 0 {
		fmt.Fprintln(w, "the queue is empty")
		return
	}
	fmt.Fprintf(w, "%-3s %-12s %-9s %-7s %-6s %8s %-11s %s\n", "POS", "ID", "USER", "SIZE", "LIMIT", "PRIORITY", "START", "WAITING FOR")
	for _, e := range q.Entries {
		pos, size, start := e.Line(now)
		prio, why := fmt.Sprintf("%.0f", e.Priority), safe(e.Waiting)
		if e.MemMiB > 0 {
			size = mib(e.MemMiB) // a budget on a shared GPU
		}
		if e.MIG != "" {
			size = columns.Clip(safe(e.MIG), 7) // a MIG instance
		}
		if e.Running {
			prio, why = "-", ""
		}
		if e.Array != nil {
			why = safe(e.Array.Summary(e.ID)) // n1-q7[3-5] running, 12 waiting, 3 done
		}
		line := fmt.Sprintf("%-3s %-12s %-9s %-7s %-6s %8s %-11s", pos, columns.Clip(safe(e.ID), 12), columns.Clip(safe(e.User), 9), size, safe(e.Duration), prio, start)
		switch {
		case len([]rune(line))+1+len([]rune(why)) <= 80:
			fmt.Fprintf(w, "%s %s\n", line, why)
		case cut:
			fmt.Fprintf(w, "%s\n    %s\n", line, columns.Clip(why, 76))
		default:
			fmt.Fprintf(w, "%s\n    %s\n", line, why)
		}
		if verbose && !e.Running {
			for _, r := range e.NodeReasons {
				nl := fmt.Sprintf("      %s %s: %s", safe(r.Node), r.Code, safe(r.Words))
				if cut {
					nl = columns.Clip(nl, 80)
				}
				fmt.Fprintln(w, nl)
			}
		}
	}
	fmt.Fprintf(w, "\nscheduler: %s\n", safe(q.Scheduler))
}

func cancelCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:               "cancel ID...",
		Short:             "Withdraw queued requests; a running one is stopped (SIGTERM) and ends, as scancel does",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: c.completeMyQueue,
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachID(c, args, "cancelled", (*api.Client).Cancel)
		},
	}
}

func usageCmd(c *cli) *cobra.Command {
	var asJSON, asChart bool
	var window string
	cmd := &cobra.Command{
		Use:               "usage",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "GPU-hours per user over a window, and each user's fair-share factor",
		Args:              cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := words.ParseDuration(window); err != nil {
				return fmt.Errorf("--window: %w", err)
			}
			if asChart {
				return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.DailyUsageReport, error) {
					return cl.UsageByDay(ctx, window)
				}, func(d api.DailyUsageReport) error {
					printUsageChart(c.stdout, d, terminalWidth(c.stdout), plainOutput())
					return nil
				})
			}
			return ask(c, asJSON, func(cl *api.Client, ctx context.Context) (api.UsageReport, error) { return cl.Usage(ctx, window) }, func(u api.UsageReport) error {
				printUsage(c.stdout, u)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&window, "window", "7d", "how far back to count")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&asChart, "chart", false, "GPU-hours per person per day, as bars (with --json: the figures by day)")
	return cmd
}

// printUsage prints `dibs usage`. User and node names come from every
// node: all are escaped.
func printUsage(w io.Writer, u api.UsageReport) {
	fmt.Fprintf(w, "since %s\n", u.Since.Local().Format("Mon Jan 2 15:04"))
	fmt.Fprintf(w, "%-12s %10s %10s %12s %6s %10s %8s\n", "USER", "GPU-HOURS", "IDLE", "DECAYED", "SHARE", "FAIRSHARE", "RUNNING")
	for _, x := range u.Users {
		fmt.Fprintf(w, "%-12s %10.1f %10.1f %12.1f %6.1f %10.3f %8s\n", columns.Clip(safe(x.User), 12), x.GPUHours, x.IdleGPUHours, x.Decayed, x.Share, x.FairShare, words.FormatGPUs(x.Running))
	}
	fmt.Fprintln(w, "IDLE: the part of GPU-HOURS held while the GPUs sat at 0 % (runs ended with figures)")
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
		return fmt.Errorf("gave up on %s after waiting %s, but could not withdraw it: %w (withdraw it with `dibs cancel %s`)", id, words.FormatDuration(wait), err, id)
	}
	return &exitError{code: exitGaveUp, msg: fmt.Sprintf("gave up after waiting %s: nothing fitted, so %s was withdrawn (`dibs queue` shows what waits; try a longer --wait, or fewer GPUs)", words.FormatDuration(wait), safe(id))}
}

// exitGaveUp is the status of a claim whose --wait ran out (timeout(1)'s).
const exitGaveUp = 124
