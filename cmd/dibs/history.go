package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/runrecord"
)

// historyCmd is `dibs history` (SLURM's sacct) and, given one run's id,
// that run's efficiency (seff/jobstats); `dibs eff ID` is the latter.
func historyCmd(c *cli) *cobra.Command {
	var asJSON bool
	var user, states, node, since, until, job string
	var limit int
	cmd := &cobra.Command{
		Use:   "history [ID]",
		Short: "ended runs and leases across the cluster (like sacct); with an ID, that run's efficiency",
		Long: `dibs history lists every ended run and lease across the cluster: who, where,
which GPUs, when, how it ended (exit code, released, expired, reclaimed,
preempted, requeued, cancelled, failed), GPU-hours, mean SM utilization and
peak GPU memory. Each node filters its own ledger. Given one run's id (a
lease id or a queued request's), it shows that run's figures per GPU with a
chart of its utilization over its life, and plain verdicts.

"not reported" means the hardware gives no utilization for what was held:
a MIG instance (NVML reports none) or a memory budget on a shared GPU.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			f := lease.HistoryFilter{User: user, Node: node, Job: job, Limit: limit}
			var err error
			if f.States, err = lease.ParseStates(states); err != nil {
				return err
			}
			if since != "" {
				if f.Since, err = words.ParsePast(since, now); err != nil {
					return fmt.Errorf("--since: %w", err)
				}
			}
			if until != "" {
				if f.Until, err = words.ParsePast(until, now); err != nil {
					return fmt.Errorf("--until: %w", err)
				}
			}
			if len(args) == 1 {
				f.ID = args[0]
			}
			if f.Limit < 0 || f.Limit > lease.MaxHistoryRows {
				return fmt.Errorf("--limit %d is not in 1..%d", f.Limit, lease.MaxHistoryRows)
			}
			ctx, cancel := reqCtx()
			defer cancel()
			rep, err := c.client().History(ctx, api.HistoryRequest{Filter: f})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.stdout, rep)
			}
			if f.ID != "" {
				if len(rep.Rows) == 0 {
					return fmt.Errorf("no ended run %s found since %s (a running one shows in dibs ls)", safe(f.ID), rep.Since.Local().Format("2006-01-02"))
				}
				printEfficiency(c.stdout, rep, plainText())
				return nil
			}
			printHistory(c.stdout, rep)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&user, "user", "u", "", "only this person's")
	fl.StringVarP(&states, "state", "s", "", "only these end states, comma-separated: "+stateList())
	fl.StringVarP(&node, "node", "n", "", "only this node's")
	fl.StringVar(&since, "since", "", `ended at or after (default 7d ago; "2d", "yesterday", "2025-06-03 09:00")`)
	fl.StringVar(&until, "until", "", "ended at or before (same forms as --since)")
	fl.StringVar(&job, "job", "", "only the runs of this gang, queued request or array")
	fl.StringVar(&job, "gang", "", "same as --job")
	fl.StringVar(&job, "array", "", "same as --job")
	fl.IntVar(&limit, "limit", 0, "list at most this many rows, the newest (default 500)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// effCmd is `dibs eff ID`: one run's efficiency, as `dibs history ID`.
func effCmd(c *cli) *cobra.Command {
	h := historyCmd(c)
	h.Use, h.Short, h.Long = "eff ID", "one ended run's efficiency: per GPU figures, a utilization chart, verdicts (like seff)", ""
	h.Args = cobra.ExactArgs(1)
	return h
}

func stateList() string {
	s := make([]string, len(lease.RunStates))
	for i, x := range lease.RunStates {
		s[i] = string(x)
	}
	return strings.Join(s, ",")
}

// plainText reports whether output must stay plain ASCII (NO_COLOR, a
// dumb terminal).
func plainText() bool {
	return os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb"
}

// printHistory prints the rows of `dibs history`. Names come from every
// node: all are escaped.
func printHistory(w io.Writer, rep api.HistoryReport) {
	fmt.Fprintf(w, "%-20s %-8s %-10s %-16s %-11s %-11s %8s %-16s %7s %5s %9s\n",
		"ID", "NODE", "USER", "GPUS", "START", "END", "TIME", "HOW", "GPU-H", "SM", "PEAK-MEM")
	for _, r := range rep.Rows {
		how := howEnded(r)
		gpus := gpuWords(r)
		fmt.Fprintf(w, "%-20s %-8s %-10s %-16s %-11s %-11s %8s %-16s %7.2f %5s %9s\n",
			columns.Clip(safe(r.ID), 20), columns.Clip(safe(r.Node), 8), columns.Clip(safe(r.User), 10), columns.Clip(gpus, 16),
			r.Start.Local().Format("01-02 15:04"), r.End.Local().Format("01-02 15:04"),
			words.FormatDuration(time.Duration(r.Seconds)*time.Second), columns.Clip(how, 16), r.GPUHours, meanWords(r), peakWords(r))
	}
	if len(rep.Rows) == 0 {
		fmt.Fprintf(w, "(nothing ended since %s matches)\n", rep.Since.Local().Format("Mon Jan 2 15:04"))
	}
	if rep.More {
		fmt.Fprintln(w, "more rows matched: these are the newest; narrow with --since, --user, --node or --state, or raise --limit")
	}
	noteNodes(w, rep)
}

func noteNodes(w io.Writer, rep api.HistoryReport) {
	if len(rep.Missing) > 0 {
		fmt.Fprintf(w, "not listed (no answer): %s\n", safeList(rep.Missing))
	}
	if len(rep.NotAsked) > 0 {
		fmt.Fprintf(w, "not listed (an older dibs; upgrade it): %s\n", safeList(rep.NotAsked))
	}
}

func safeList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = safe(n)
	}
	return strings.Join(out, ", ")
}

// howEnded is a row's end in a few words: the exit code, else the state.
func howEnded(r api.HistoryRow) string {
	switch {
	case r.ExitCode != nil:
		if *r.ExitCode == 0 {
			return "completed"
		}
		return "failed (exit " + strconv.Itoa(*r.ExitCode) + ")"
	case r.State == lease.StateFolded && r.Folded > 0:
		return fmt.Sprintf("%d leases", r.Folded)
	case r.State == lease.StateFolded:
		return "many leases"
	}
	return string(r.State)
}

// gpuWords is what a row held: "2×H100", "1g.10gb", "20 GiB budget".
func gpuWords(r api.HistoryRow) string {
	switch {
	case r.MIG != "":
		return safe(r.MIG)
	case r.BudgetMiB > 0:
		return lease.FormatMem(r.BudgetMiB) + " budget"
	case len(r.GPUs) == 0:
		return "-"
	}
	m := shortModel(r.Model)
	if m == "" {
		m = "GPU"
	}
	return fmt.Sprintf("%dx%s", len(r.GPUs), safe(m))
}

func meanWords(r api.HistoryRow) string {
	switch {
	case r.MeanSM != nil:
		return fmt.Sprintf("%.0f%%", *r.MeanSM)
	case r.Figures != nil:
		return "n/r"
	}
	return "-"
}

func peakWords(r api.HistoryRow) string {
	if r.MemTotalMiB == 0 {
		return "-"
	}
	return lease.FormatMem(r.PeakMemMiB)
}

// printEfficiency prints one run's figures: each lease (a gang's ranks,
// a request's attempts) with each GPU's line and chart, then verdicts.
func printEfficiency(w io.Writer, rep api.HistoryReport, plain bool) {
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%s  %s on %s  %s  %s → %s (%s)  %s\n", safe(r.ID), safe(r.User), safe(r.Node), gpuWords(r),
			r.Start.Local().Format("01-02 15:04"), r.End.Local().Format("01-02 15:04"),
			words.FormatDuration(time.Duration(r.Seconds)*time.Second), howEnded(r))
		fmt.Fprintf(w, "  %.2f GPU-hours", r.GPUHours)
		if r.IdleHours > 0 {
			fmt.Fprintf(w, ", %.2f of them idle", r.IdleHours)
		}
		fmt.Fprintln(w)
		if r.Figures == nil {
			fmt.Fprintln(w, "  no figures recorded (ended by an older dibs, or it never ran)")
			continue
		}
		for _, g := range r.Figures.GPUs {
			fmt.Fprintf(w, "  gpu %-2d %s\n", g.GPU, gpuLine(g))
			if len(g.Series) > 0 {
				fmt.Fprintf(w, "         %s\n", sparkline(g.Series, plain))
			}
		}
		for _, v := range r.Verdicts {
			fmt.Fprintf(w, "  → %s\n", v)
		}
	}
	noteNodes(w, rep)
}

// gpuLine is one GPU's figures in words.
func gpuLine(g runrecord.GPUFigures) string {
	var parts []string
	if g.MeanSM != nil {
		parts = append(parts, fmt.Sprintf("SM mean %.0f %%, peak %d %%, idle %.0f %%", *g.MeanSM, *g.PeakSM, *g.IdlePct))
	} else {
		parts = append(parts, "utilization not reported")
	}
	if g.MemTotalMiB > 0 {
		parts = append(parts, fmt.Sprintf("peak memory %s of %s", lease.FormatMem(g.PeakMemMiB), lease.FormatMem(g.MemTotalMiB)))
	}
	if g.EnergyWh > 0 {
		parts = append(parts, fmt.Sprintf("%.1f Wh", g.EnergyWh))
	}
	if g.Profile != "" {
		parts = append(parts, "MIG "+safe(g.Profile))
	}
	return strings.Join(parts, "; ")
}

// sparkline draws a utilization series (0–100 %, runrecord.NotReported
// where none was reported) as one line of block characters, or of ASCII
// when plain; a point not reported is a '·' ('?' when plain).
func sparkline(series []byte, plain bool) string {
	blocks := []rune("▁▂▃▄▅▆▇█")
	ascii := []rune("_.-=+*#@")
	ramp, none := blocks, '·'
	if plain {
		ramp, none = ascii, '?'
	}
	var b strings.Builder
	for _, v := range series {
		if v == runrecord.NotReported || v > 100 {
			b.WriteRune(none)
			continue
		}
		b.WriteRune(ramp[min(int(v)*len(ramp)/101, len(ramp)-1)])
	}
	return b.String()
}
