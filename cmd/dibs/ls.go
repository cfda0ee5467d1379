package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func lsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "ls",
		ValidArgsFunction: cobra.NoFileCompletions,
		Short:             "List every GPU: who holds it, for how long, what runs on it",
		Args:              cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(c, asJSON, (*api.Client).Board, func(b api.Board) error {
				printBoard(c.stdout, b, time.Now())
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (see docs/api.md)")
	return cmd
}

// printBoard writes the board as a table that reads at 80 columns: one line
// per GPU, its processes indented below, then the leases.
func printBoard(w io.Writer, b api.Board, now time.Time) {
	b = b.Escaped()
	for _, n := range b.Notices {
		fmt.Fprintf(w, "! %s\n", n)
	}
	fmt.Fprintf(w, "%-8s %3s %-16s %9s %4s  %-10s %6s  %s\n", "NODE", "GPU", "MODEL", "MEMORY", "UTIL", "HOLDER", "LEFT", "FLAGS")
	var leases []lease.Lease
	seen := map[string]bool{}
	for _, n := range b.Nodes {
		switch n.State {
		case api.NodeAlive:
		case api.NodeRestarting:
			fmt.Fprintf(w, "%-8s restarting: its agent is away, its leases and gangs hold for the grace (last heard %s ago)\n", columns.Clip(n.Name, 8), words.FormatDuration(now.Sub(n.TelemetryAt)))
		default:
			fmt.Fprintf(w, "%-8s %s: GPUs unknown (last heard %s ago)\n", columns.Clip(n.Name, 8), n.State, words.FormatDuration(now.Sub(n.TelemetryAt)))
		}
		if len(n.Host.Tags) > 0 {
			fmt.Fprintf(w, "%-8s pools: %s\n", columns.Clip(n.Name, 8), columns.Clip(strings.Join(n.Host.Tags, ", "), 60))
		}
		if n.State == api.NodeAlive {
			var gpus []nodeprobe.GPU
			for _, g := range n.GPUs {
				gpus = append(gpus, g.GPU)
			}
			if line := lease.CoresLine(gpus); line != "" {
				fmt.Fprintf(w, "%-8s cores: %s\n", columns.Clip(n.Name, 8), columns.Clip(line, 64))
			}
		}
		for _, g := range n.GPUs {
			holder, left := "-", ""
			switch {
			case g.MIG == nodeprobe.MIGEnabled:
				holder = "MIG"
			case len(g.Shares) > 0:
				holder = "shared"
			}
			for _, l := range g.Shares {
				if !seen[l.ID] {
					seen[l.ID] = true
					leases = append(leases, l)
				}
			}
			if l := g.Lease; l != nil {
				holder = l.User
				left = timeLeft(*l, now)
				if !seen[l.ID] {
					seen[l.ID] = true
					leases = append(leases, *l)
				}
			} else if n.State == api.NodeAlive && len(g.Processes) == 0 && holder == "-" {
				holder = "free"
			}
			flags := make([]string, 0, len(g.Flags))
			for _, f := range g.Flags {
				flags = append(flags, string(f))
			}
			if g.Lease != nil && g.Lease.Borrowed {
				flags = append(flags, "borrowed")
			}
			fmt.Fprintf(w, "%-8s %3d %-16s %9s %4s  %-10s %6s  %s\n", columns.Clip(n.Name, 8), g.Index, columns.Clip(lsModel(g.Model), 16),
				memStr(g.MemoryUsedMiB, g.MemoryTotalMiB), pct(g.UtilizationPct), columns.Clip(holder, 10), left, strings.Join(flags, ","))
			printParts(w, n.State == api.NodeAlive, g, now)
			for _, p := range g.Processes {
				who := p.User
				if who == "" {
					who = "uid " + strconv.Itoa(p.UID)
				}
				extra := ""
				if p.SMUtilPct != nil { // where NVML samples processes
					extra = " SM " + strconv.Itoa(*p.SMUtilPct) + "%"
				}
				if p.Container != "" {
					extra += " container " + p.Container
				}
				fmt.Fprintf(w, "%14s└ pid %d %s %s %s%s\n", "", p.PID, columns.Clip(who, 12), columns.Clip(p.Command, 20), mib(p.UsedMemoryMiB), extra)
			}
		}
	}
	defer printBoardBookings(w, b, now)
	if len(leases) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-12s %-10s %-16s %-6s %-14s %s\n", "LEASE", "USER", "GPUS", "LEFT", "SESSION", "NOTE")
	for _, l := range leases {
		left := timeLeft(l, now)
		sess := l.Session
		if sess == "" {
			sess = "-"
		}
		fmt.Fprintf(w, "%-12s %-10s %-16s %-6s %-14s %s\n", columns.Clip(l.ID, 12), columns.Clip(l.User, 10), gpusCell(l, 16), left, columns.Clip(sess, 14), leaseNote(l, 16))
		printMIGUUID(w, l)
		printContainers(w, l)
		printCores(w, l, leases)
	}
	printArrays(w, leases)
}

// printParts lists a GPU's parts under it: each MIG instance with its
// holder (or free), or each budget of a shared GPU.
func printParts(w io.Writer, alive bool, g api.GPU, now time.Time) {
	for _, d := range g.MIGDevices {
		who, left := "free", ""
		if !alive {
			who = "?"
		}
		for _, l := range g.Shares {
			if l.MIG == d.UUID {
				who, left = l.User, timeLeft(l, now)
			}
		}
		sel := strconv.Itoa(g.Index) + ":" + strconv.Itoa(d.Index)
		fmt.Fprintf(w, "%14s├ %-5s %-9s %6s  %-10s %6s\n", "", columns.Clip(sel, 5), columns.Clip(d.Profile, 9), mib(d.MemoryTotalMiB), columns.Clip(who, 10), left)
		// The UUID is what CUDA_VISIBLE_DEVICES takes: printed whole, on
		// its own line, so the table stays within 80 columns.
		fmt.Fprintf(w, "%14s│   %s\n", "", d.UUID)
	}
	if g.MIG == nodeprobe.MIGEnabled {
		return
	}
	for _, l := range g.Shares {
		fmt.Fprintf(w, "%14s├ %-15s %6s  %-10s %6s\n", "", "budget", mib(l.MemMiB), columns.Clip(l.User, 10), timeLeft(l, now))
	}
}

// timeLeft is a lease's time left as every table shows it: "2h13m", or
// "over" once its end has passed (it lingers while the end action acts).
func timeLeft(l lease.Lease, now time.Time) string {
	if l.IsService() {
		return "service"
	}
	if !l.ExpiresAt.After(now) {
		return "over"
	}
	return words.FormatDuration(l.ExpiresAt.Sub(now))
}

// gpusCell is a table's GPUS cell for a lease, clipped to width: a MIG
// instance is "node03:MIG", its UUID whole on the next line
// (printMIGUUID) — a cut UUID is of no use to CUDA_VISIBLE_DEVICES.
func gpusCell(l lease.Lease, width int) string {
	s := leaseGPUs(l)
	if l.MIG != "" {
		s = l.Node + ":MIG"
	}
	return fmt.Sprintf("%-*s", width, columns.Clip(s, width))
}

// printMIGUUID writes a MIG lease's instance UUID whole, under its row.
func printMIGUUID(w io.Writer, l lease.Lease) {
	if l.MIG != "" {
		fmt.Fprintf(w, "%12s └ %s\n", "", l.MIG)
	}
}

// printContainers lists under a lease the containers its holder adopted
// (dibs adopt --container): root's processes in them on its GPUs are the
// holder's, which is why the board does not flag them.
func printContainers(w io.Writer, l lease.Lease) {
	for _, c := range l.Containers {
		fmt.Fprintf(w, "%12s └ container %s (adopted)\n", "", c)
	}
}

// printCores lists the cores chosen for a lease (--cpus-per-gpu) under
// it, and the leases that chose some of the same.
func printCores(w io.Writer, l lease.Lease, leases []lease.Lease) {
	if len(l.CPUs) == 0 {
		return
	}
	line := "cores " + lease.CPUUnion(l.CPUs)
	for _, sh := range lease.SharedCores(l, leases) {
		line += fmt.Sprintf(" (shares %s with %s)", sh.CPUs, sh.Lease.ID)
	}
	fmt.Fprintf(w, "%12s └ %s\n", "", columns.Clip(line, 64))
}

// leaseNote is a table's NOTE cell: the note, after "borrowed" for a lease
// beyond its holder's quota (it may be preempted).
func leaseNote(l lease.Lease, width int) string {
	if l.Borrowed {
		if l.Note == "" {
			return "borrowed"
		}
		return "borrowed; " + columns.Clip(l.Note, width)
	}
	return columns.Clip(l.Note, width)
}

// leaseGPUs says what a lease holds: node:0,1 or node:MIG-… or node:0 20G.
func leaseGPUs(l lease.Lease) string {
	s := l.Node + ":" + l.CUDAVisibleDevices()
	if l.MemMiB > 0 {
		s += " " + mib(l.MemMiB)
	}
	return s
}

// lsModel shortens a model name to what tells GPUs apart on a board.
func lsModel(m string) string {
	m = shortModel(m)
	for _, w := range []string{" Workstation Edition", " Server Edition", " Blackwell", " HBM3e", " HBM3", " PCIe", " SXM5", " SXM4"} {
		m = strings.Replace(m, w, "", 1)
	}
	return m
}

func memStr(used, total uint64) string {
	return fmt.Sprintf("%.0f/%.0fG", float64(used)/1024, float64(total)/1024)
}

func mib(v uint64) string {
	if v >= 1024 {
		return fmt.Sprintf("%.1fG", float64(v)/1024)
	}
	return fmt.Sprintf("%dM", v)
}

func pct(p *int) string {
	if p == nil {
		return "?"
	}
	return strconv.Itoa(*p) + "%"
}

func whoCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "who [USER|NODE:GPU|GPU]",
		Short:             "Who holds what: every lease, one user's, or one GPU's",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: c.completeWho,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			b, err := c.client().Board(ctx)
			if err != nil {
				return err
			}
			if !asJSON {
				b = b.Escaped()
			}
			q := ""
			if len(args) == 1 {
				q = args[0]
			}
			rows, err := who(b, q)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.stdout, rows)
			}
			printWho(c.stdout, rows, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printWho prints leases as `dibs who` shows them. The leases come from an
// escaped board (api.Board.Escaped).
func printWho(w io.Writer, rows []lease.Lease, now time.Time) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "nobody holds anything")
		return
	}
	fmt.Fprintf(w, "%-10s %-14s %-14s %-7s %s\n", "USER", "LEASE", "GPUS", "LEFT", "NOTE")
	for _, l := range rows {
		fmt.Fprintf(w, "%-10s %-14s %-14s %-7s %s\n", columns.Clip(l.User, 10), l.ID, gpusCell(l, 14), timeLeft(l, now), leaseNote(l, 30))
		printMIGUUID(w, l)
	}
}

// who filters the board's leases by user, node:gpu or gpu index (on this node).
func who(b api.Board, q string) ([]lease.Lease, error) {
	var out []lease.Lease
	seen := map[string]bool{}
	node, gpu := "", -1
	if q != "" {
		if n, g, ok := strings.Cut(q, ":"); ok {
			i, err := strconv.Atoi(g)
			if err != nil {
				return nil, fmt.Errorf("%q: write a GPU as NODE:INDEX, like node01:3", q)
			}
			node, gpu = n, i
		} else if i, err := strconv.Atoi(q); err == nil {
			node, gpu = b.Self, i
		}
	}
	found := gpu < 0
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if gpu >= 0 && n.Name == node && g.Index == gpu {
				found = true
			}
			held := g.Shares
			if g.Lease != nil {
				held = append([]lease.Lease{*g.Lease}, held...)
			}
			for _, l := range held {
				if seen[l.ID] {
					continue
				}
				switch {
				case gpu >= 0 && !(n.Name == node && g.Index == gpu):
					continue
				case gpu < 0 && q != "" && l.User != q:
					continue
				}
				seen[l.ID] = true
				out = append(out, l)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("no GPU %d on %s: `dibs ls` lists them", gpu, node)
	}
	return out, nil
}

// printBoardBookings lists the board's bookings after its leases.
func printBoardBookings(w io.Writer, b api.Board, now time.Time) {
	var bs []lease.Lease
	for _, n := range b.Nodes {
		bs = append(bs, n.Bookings...)
	}
	if len(bs) == 0 {
		return
	}
	fmt.Fprintln(w)
	printBookings(w, bs, now)
}
