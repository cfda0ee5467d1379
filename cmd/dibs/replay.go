package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/outgrow/replay"
)

type replayFlags struct {
	trace    string
	policies string
	window   string
	seed     uint64
	write    string
	asJSON   bool
}

func replayCmd(c *cli) *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "What-if: replay a trace of GPU requests under dibs, Slack and a SLURM-like queue",
		Long: `Replay a trace of GPU requests — by default this cluster's own ledger over the
window; --trace week the bundled synthetic week of a 6-person team on 4 nodes × 8
GPUs; --trace FILE your own (JSON lines, docs/doctor.md) — under each policy, with
dibs's own scheduling rules, and print what each costs: GPU utilisation, queue
waits, fairness, GPU-hours held but idle, work that never started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.replay(f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "week (the bundled week), or a trace file; default: this cluster's ledger")
	fl.StringVar(&f.policies, "policy", "dibs,slack,slurm", "policies to compare, comma-separated")
	fl.StringVar(&f.window, "window", "30d", "with the cluster's ledger: how far back")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for the bundled week and the Slack users' choices")
	fl.StringVar(&f.write, "write-trace", "", "also write the trace replayed to this file (a start for your own)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

// replayOutput is `dibs replay --json`.
type replayOutput struct {
	Trace   traceSummary    `json:"trace"`
	Results []replay.Result `json:"results"`
}

type traceSummary struct {
	Name     string    `json:"name"`
	Requests int       `json:"requests"`
	Nodes    int       `json:"nodes"`
	GPUs     int       `json:"gpus"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
}

func (c *cli) replay(f replayFlags) error {
	var policies []replay.Policy
	for _, s := range strings.Split(f.policies, ",") {
		p, err := replay.ParsePolicy(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
		policies = append(policies, p)
	}
	cfg := replay.Config{Seed: f.seed}
	var tr replay.Trace
	switch f.trace {
	case "week":
		tr = replay.Week(f.seed)
	case "":
		var err error
		if tr, cfg, err = c.ledgerTrace(f); err != nil {
			return err
		}
	default:
		file, err := os.Open(f.trace)
		if err != nil {
			return fmt.Errorf("--trace: %w: give week, or a trace file (docs/doctor.md describes the format)", err)
		}
		tr, err = replay.Read(file)
		file.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f.trace, err)
		}
	}
	if f.write != "" {
		if err := writeTrace(f.write, tr); err != nil {
			return err
		}
	}
	out := replayOutput{Trace: traceSummary{Name: tr.Name, Requests: len(tr.Requests), Nodes: len(tr.Nodes)}}
	for _, p := range policies {
		r, err := replay.Run(tr, p, cfg)
		if err != nil {
			return err
		}
		out.Trace.GPUs, out.Trace.Start, out.Trace.End = r.GPUs, r.Start, r.End
		out.Results = append(out.Results, r)
	}
	if f.asJSON {
		return printJSON(c.stdout, out)
	}
	printReplay(c.stdout, out)
	return nil
}

func writeTrace(path string, tr replay.Trace) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--write-trace: %w", err)
	}
	if err := replay.Write(file, tr); err != nil {
		file.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return file.Close()
}

// ledgerTrace rebuilds the cluster's own requests from every node's
// ledger, on the cluster's nodes as they are, with its settings.
func (c *cli) ledgerTrace(f replayFlags) (replay.Trace, replay.Config, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client()
	rep, err := cl.Doctor(ctx, api.DoctorRequest{Window: f.window, Ledger: true})
	if err != nil {
		return replay.Trace{}, replay.Config{}, err
	}
	b, err := cl.Board(ctx)
	if err != nil {
		return replay.Trace{}, replay.Config{}, err
	}
	var nodes []replay.NodeSpec
	for _, n := range b.Nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		snap := nodeprobe.Snapshot{Host: n.Host}
		for _, g := range n.GPUs {
			snap.GPUs = append(snap.GPUs, g.GPU)
		}
		nodes = append(nodes, replay.NodeSpec{Name: n.Name, Snapshot: &snap})
	}
	if len(nodes) == 0 {
		return replay.Trace{}, replay.Config{}, fmt.Errorf("no node with GPUs to replay on: `dibs ls` shows the cluster")
	}
	busy := 1.0
	if fd := rep.Findings; fd != nil && fd.BusyShare+fd.HeldIdleShare > 0 && fd.Coverage > 0 {
		busy = fd.BusyShare / (fd.BusyShare + fd.HeldIdleShare)
	}
	end := rep.GeneratedAt
	start := end.Add(-doctorWindow(rep))
	tr := replay.FromLedger(nodes, rep.Ledger, rep.Running, start, end, busy)
	if len(tr.Requests) == 0 {
		return tr, replay.Config{}, fmt.Errorf("the ledger holds no lease in the last %s: try --trace week to see what the replay shows", f.window)
	}
	cfg := replay.Config{Seed: f.seed, Lease: rep.Config.Policy(), Sched: rep.Config.Sched()}
	return tr, cfg, nil
}

func doctorWindow(rep api.DoctorReport) time.Duration {
	if rep.Findings != nil {
		return rep.Findings.Window
	}
	return 30 * 24 * time.Hour
}

// printReplay prints the policy table and what each line means.
func printReplay(w io.Writer, out replayOutput) {
	t := out.Trace
	fmt.Fprintf(w, "replay of %s: %s on %s, %s, %s to %s (%s)\n\n", safe(columns.OrDash(t.Name)), counted(t.Requests, "request"), counted(t.Nodes, "node"), counted(t.GPUs, "GPU"),
		t.Start.UTC().Format("Mon Jan 2 15:04"), t.End.UTC().Format("Mon Jan 2 15:04"), words.FormatDuration(t.End.Sub(t.Start)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tUTIL\tBUSY\tHELD IDLE\tFREE\tWAIT P50\tWAIT P95\tFAIRNESS\tSERVED\tNEVER STARTED\tALSO")
	for _, r := range out.Results {
		var also []string
		if r.Reclaimed > 0 {
			also = append(also, fmt.Sprintf("%d idle leases reclaimed", r.Reclaimed))
		}
		if r.Killed > 0 {
			also = append(also, fmt.Sprintf("%d runs cut at their limit", r.Killed))
		}
		if r.Forgot > 0 {
			also = append(also, fmt.Sprintf("%d forgot to say they were done", r.Forgot))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%s\t%s\t%.2f\t%s\t%d\t%s\n", r.Policy, share(r.Utilisation), r.BusyGPUHours, r.HeldIdleGPUHours, r.FreeGPUHours,
			dur(r.WaitP50.Round(time.Minute)), dur(r.WaitP95.Round(time.Minute)), r.Fairness, share(r.Served), r.NeverStarted, columns.OrDash(strings.Join(also, ", ")))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nBUSY, HELD IDLE and FREE are GPU-hours of the window; WAIT from asking to starting (work that never\n"+
		"started counts until the replay ended); FAIRNESS is Jain's index of GPU-hours computed per user (1 = equal);\n"+
		"SERVED the share of the work asked for that ran to its end. dibs: as configured; slack: no queue, people\n"+
		"retry every ~10m and give up after a day, some forget to say they are done; slurm: everything queues,\n"+
		"jobs end at their time limit. docs/doctor.md explains the model and its limits.\n")
}
