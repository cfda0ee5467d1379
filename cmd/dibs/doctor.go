package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

func doctorCmd(c *cli) *cobra.Command {
	var asJSON bool
	var window string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the cluster's health, and whether the team has outgrown dibs",
		Long: `Check every agent (reachable, same version, clocks, key, ports, tmux, GPU probe,
disk, overdue and squatted leases, lost sessions), each with its fix in one line;
then answer "have we outgrown dibs?" from every node's ledger and GPU samples over
the window: stay, tune dibs (which settings), or move to SLURM. The thresholds
behind the verdict are in docs/doctor.md. Exits 1 when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := words.ParseDuration(window); err != nil {
				return fmt.Errorf("--window: %w", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := c.client().Doctor(ctx, api.DoctorRequest{Window: window})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(c.stdout, rep); err != nil {
					return err
				}
			} else {
				printDoctor(c.stdout, rep)
			}
			for _, ch := range rep.Checks {
				if ch.Status == doctor.Fail {
					return &exitError{code: 1}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&window, "window", "30d", "how far back the verdict looks (at most 90d)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (docs/api.md)")
	return cmd
}

// printDoctor prints `dibs doctor`. Checks quote other agents' names,
// versions and users' process names: every line is escaped.
func printDoctor(w io.Writer, r api.DoctorReport) {
	gpus := 0
	if r.Findings != nil {
		gpus = r.Findings.GPUs
	}
	fmt.Fprintf(w, "dibs doctor at %s: %s", safe(r.Self), counted(len(r.Nodes), "node"))
	if gpus > 0 {
		fmt.Fprintf(w, ", %s", counted(gpus, "GPU"))
	}
	fmt.Fprintf(w, "\n\nHealth\n")
	for _, ch := range r.Checks {
		st := ch.Status
		if st == doctor.Fail {
			st = "FAIL"
		}
		fmt.Fprintf(w, "  %-4s  %-8s  %s\n", st, ch.Name, safe(ch.Detail))
		if ch.Fix != "" {
			fmt.Fprintf(w, "  %-4s  %-8s  fix: %s\n", "", "", safe(ch.Fix))
		}
	}
	f, v := r.Findings, r.Verdict
	if f == nil || v == nil {
		return
	}
	fmt.Fprintf(w, "\nHave we outgrown dibs? (last %s, since %s)\n", words.FormatDuration(f.Window), f.Since.Local().Format("Mon Jan 2 15:04"))
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "  %-14s %s\n", name, safe(fmt.Sprintf(format, args...)))
	}
	row("cluster", "%s on %s", counted(f.GPUs, "GPU"), counted(f.Nodes, "node"))
	weeks := make([]string, len(f.UsersPerWeek))
	for i, x := range f.UsersPerWeek {
		weeks[i] = fmt.Sprint(x.Users)
	}
	row("people", "%d in the window; per week %s (most %d)", f.Users, columns.OrDash(strings.Join(weeks, ", ")), f.UsersMaxWeek)
	top := ""
	if f.TopUser != "" {
		top = fmt.Sprintf(", most by %s (%s)", f.TopUser, share(f.TopUserShare))
	}
	row("held", "%.0f GPU-hours in %d leases%s", f.HeldGPUHours, f.Leases, top)
	row("GPU time", "busy %s, held but idle %s, free %s (sampled %s, %s of the window)",
		share(f.BusyShare), share(f.HeldIdleShare), share(f.FreeShare), words.FormatDuration(f.Sampled.Round(time.Minute)), share(f.Coverage))
	row("squatted", "%.1f GPU-hours (%s of GPU time), from samples", f.SquattedGPUHours, share(f.SquattedShare))
	row("work waiting", "%s of the time; %s while GPUs sat held but idle (%.1f GPU-hours idle meanwhile)", share(f.WaitingShare), share(f.WaitingIdleShare), f.WaitingIdleGPUHours)
	row("queue waits", "p50 %s, p95 %s, max %s over %d queued runs", dur(f.WaitP50), dur(f.WaitP95), dur(f.WaitMax), f.Queued)
	row("gangs", "%d, waited p50 %s, max %s for all ranks; %s of GPU-hours", f.Gangs, dur(f.GangWaitP50), dur(f.GangWaitMax), share(f.GangGPUShare))
	var pre []string
	for _, k := range slices.Sorted(maps.Keys(f.Preemptions)) {
		pre = append(pre, fmt.Sprintf("%s %d", k, f.Preemptions[k]))
	}
	row("preemptions", "%s; %d leases ended past their limit", columns.OrDash(strings.Join(pre, ", ")), f.Overdue)
	if len(f.Missing) > 0 {
		row("left out", "%s (no answer)", strings.Join(f.Missing, ", "))
	}
	call := map[string]string{doctor.CallStay: "STAY WITH DIBS", doctor.CallTune: "TUNE DIBS", doctor.CallSLURM: "MOVE TO SLURM"}[v.Call]
	fmt.Fprintf(w, "\nVerdict: %s — %s\n", columns.OrDash(call), safe(v.Summary))
	for _, x := range v.Reasons {
		fmt.Fprintf(w, "  - %s\n", safe(x))
	}
	for _, s := range v.Settings {
		fmt.Fprintf(w, "  set %s = %s   (%s)\n", safe(s.Key), safe(s.Value), safe(s.Why))
	}
	for _, x := range v.Caveats {
		fmt.Fprintf(w, "  note: %s\n", safe(x))
	}
	fmt.Fprintf(w, "  thresholds, and where they come from: docs/doctor.md\n")
}

func share(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func dur(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return words.FormatDuration(d)
}
