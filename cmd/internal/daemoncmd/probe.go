package daemoncmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/probe"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// probeCmd is `dibs probe`: one look at this node's GPUs without an agent,
// the way nvidia-smi is used today, and the quickest check that dibs sees
// the hardware.
func probeCmd(c *cli) *cobra.Command {
	var (
		jsonOut bool
		simSpec string
		simLoad string
		backend string
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Show this node's GPUs, their load and who runs what on them",
		Long: "probe reads this node's GPUs once, through NVML, nvidia-smi or the simulator,\n" +
			"and prints them as a table or (--json) as the snapshot the agent gossips.\n\n" +
			"Simulated models: " + strings.Join(sim.Models(), ", ") + ".",
		Example: "  dibs probe\n  dibs probe --json\n  dibs probe --sim 4xRTX-PRO-6000,2xL40S --sim-load load.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := nodeprobe.ParseBackend(backend)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			p, err := probe.Open(ctx, nodeprobe.Options{
				Backend: b,
				Sim:     simSpec,
				SimLoad: simLoad,
				Logf: func(format string, args ...any) {
					fmt.Fprintln(c.stderr, "dibs: "+safe(fmt.Sprintf(format, args...)))
				},
			})
			if err != nil {
				return err
			}
			defer p.Close()
			snap, err := p.Snapshot(ctx)
			if err != nil {
				return err
			}
			if jsonOut {
				return printJSON(c.stdout, snap)
			}
			return writeProbeTable(c.stdout, snap)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&jsonOut, "json", false, "print the snapshot as JSON")
	f.StringVar(&simSpec, "sim", "", "simulate GPUs instead of reading them, e.g. 8xH100-80GB or 4xRTX-PRO-6000,2xL40S")
	f.StringVar(&simLoad, "sim-load", "", "JSON `FILE` scripting the simulated GPUs' load (see docs/probe.md)")
	f.StringVar(&backend, "backend", "auto", "where to read GPUs: auto, nvml, nvidia-smi or sim")
	return cmd
}

// writeProbeTable prints a snapshot as a compact nvidia-smi: a host line,
// one line per GPU (and per MIG device), then the processes. Every line fits
// 80 columns. Process names and owners are anyone's to choose, and driver
// strings are the hardware's: every string is escaped (termsafe) first.
func writeProbeTable(w io.Writer, s nodeprobe.Snapshot) error {
	s.GPUs = slices.Clone(s.GPUs)
	for i := range s.GPUs {
		g := &s.GPUs[i]
		g.Processes, g.MIGDevices, g.Links = slices.Clone(g.Processes), slices.Clone(g.MIGDevices), slices.Clone(g.Links)
	}
	s.EachString(func(_ string, p *string) { *p = safe(*p) })
	var b strings.Builder
	h := s.Host
	fmt.Fprintf(&b, "%s  via %s  at %s\n", columns.Clip(h.Name, 40), h.Backend, s.TakenAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "%d CPUs  %s RAM  driver %s  CUDA %s\n\n",
		h.CPUs, humanMiB(h.MemoryMiB), columns.OrDash(h.DriverVersion), columns.OrDash(h.CUDAVersion))

	fmt.Fprintf(&b, "%3s  %-28s  %15s  %4s  %4s  %9s  %3s\n", "GPU", "MODEL", "MEMORY MiB", "UTIL", "TEMP", "POWER W", "MIG")
	for _, g := range s.GPUs {
		mem := fmt.Sprintf("%d/%d", g.MemoryUsedMiB, g.MemoryTotalMiB)
		power := optFloat(g.PowerDrawW) + "/" + optFloat(g.PowerLimitW)
		fmt.Fprintf(&b, "%3d  %-28s  %15s  %4s  %4s  %9s  %3s\n",
			g.Index, columns.Clip(shortModel(g.Model), 28), mem, optInt(g.UtilizationPct, "%"), optInt(g.TemperatureC, "C"), power, migShort(g.MIG))
		for _, m := range g.MIGDevices {
			fmt.Fprintf(&b, "     MIG %-2d %-10s  %-40s  %d/%d\n", m.Index, columns.Clip(m.Profile, 10), columns.Clip(m.UUID, 40), m.MemoryUsedMiB, m.MemoryTotalMiB)
		}
		if g.Error != "" {
			fmt.Fprintf(&b, "     error: %s\n", columns.Clip(g.Error, 68))
		}
	}

	if line := lease.CoresLine(s.GPUs); line != "" {
		fmt.Fprintf(&b, "\nlocal CPUs: %s\n", line)
	}

	var procs int
	for _, g := range s.GPUs {
		procs += len(g.Processes)
	}
	b.WriteString("\n")
	if procs == 0 {
		b.WriteString("no GPU processes\n")
	} else {
		fmt.Fprintf(&b, "%3s  %8s  %-12s  %-16s  %10s  %s\n", "GPU", "PID", "USER", "COMMAND", "MEMORY MiB", "CONTAINER")
		for _, g := range s.GPUs {
			for _, p := range g.Processes {
				fmt.Fprintf(&b, "%3d  %8d  %-12s  %-16s  %10d  %s\n",
					g.Index, p.PID, columns.Clip(procUser(p), 12), columns.Clip(columns.OrDash(p.Command), 16), p.UsedMemoryMiB, columns.OrDash(p.Container))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shortModel drops the vendor prefix every model shares.
func shortModel(m string) string {
	m = strings.TrimPrefix(m, "NVIDIA ")
	return strings.TrimPrefix(m, "GeForce ")
}

// migShort fits the MIG mode in three columns.
func migShort(m nodeprobe.MIGMode) string {
	switch m {
	case nodeprobe.MIGEnabled:
		return "on"
	case nodeprobe.MIGDisabled:
		return "off"
	default:
		return "-"
	}
}

// procUser names a process owner, falling back to the uid when the account
// has no name here and to "?" when /proc could not tell.
func procUser(p nodeprobe.Process) string {
	switch {
	case p.User != "":
		return p.User
	case p.UID >= 0:
		return strconv.Itoa(p.UID)
	default:
		return "?"
	}
}

func optInt(v *int, unit string) string {
	if v == nil {
		return "-"
	}
	return strconv.Itoa(*v) + unit
}

func optFloat(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 0, 64)
}

func humanMiB(mib uint64) string {
	switch {
	case mib >= 1<<20:
		return strconv.FormatFloat(float64(mib)/(1<<20), 'f', 1, 64) + " TiB"
	case mib >= 1<<10:
		return strconv.FormatFloat(float64(mib)/(1<<10), 'f', 0, 64) + " GiB"
	default:
		return strconv.FormatUint(mib, 10) + " MiB"
	}
}

// safe makes text from outside (/proc, the driver, peers) safe to print;
// see termsafe.String.
func safe(s string) string { return termsafe.String(s) }

// printJSON writes v indented, with every string escaped as the client's
// --json output is (termsafe.JSON).
func printJSON(w io.Writer, v any) error { return termsafe.WriteJSON(w, v) }
