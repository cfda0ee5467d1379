package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/chart"
	"github.com/dibs-gpu/dibs/base/columns"
)

// chartMinBar is the narrowest bar worth drawing: below it (a narrow
// terminal) `dibs usage --chart` prints the figures alone.
const chartMinBar = 10

// printUsageChart prints GPU-hours per person per day as bars, one block
// per day, each person's bar scaled to the largest day of anyone in the
// window so bars compare across days. width is the terminal's; plain
// draws with '#' (NO_COLOR, TERM=dumb). Names come from every node: all
// are escaped.
func printUsageChart(w io.Writer, u api.DailyUsageReport, width int, plain bool) {
	fmt.Fprintf(w, "GPU-hours per person per day, since %s\n", u.Since.Local().Format("Mon Jan 2 15:04"))
	// The same order every day: the most GPU-hours over the window first.
	total := map[string]float64{}
	peak := 0.0
	for _, d := range u.Days {
		for user, h := range d.GPUHours {
			total[user] += h
			peak = max(peak, h)
		}
	}
	users := make([]string, 0, len(total))
	nameW := 4
	for user := range total {
		users = append(users, user)
		nameW = max(nameW, min(len(safe(user)), 12))
	}
	slices.SortFunc(users, func(a, b string) int {
		if c := cmp.Compare(total[b], total[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	const dayW, numW = 11, 7
	barW := width - dayW - 1 - nameW - 2 - numW
	if barW < chartMinBar {
		barW = 0 // too narrow for bars: the figures alone
	}
	for _, d := range u.Days {
		day := d.Start.Local().Format("Mon Jan 2")
		printed := false
		for _, user := range users {
			h := d.GPUHours[user]
			if !(h > 0) {
				continue
			}
			label := ""
			if !printed {
				label = day
			}
			printed = true
			bar := ""
			if barW > 0 {
				bar = chart.Bar(h, peak, barW, plain)
			}
			fmt.Fprintf(w, "%-*s %-*s  %s%*s\n", dayW, label, nameW, columns.Clip(safe(user), 12), bar,
				numW+max(barW-len([]rune(bar)), 0), strconv.FormatFloat(h, 'f', 1, 64))
		}
		if !printed {
			fmt.Fprintf(w, "%-*s %s\n", dayW, day, "-")
		}
	}
	if len(u.Missing) > 0 {
		missing := make([]string, len(u.Missing))
		for i, m := range u.Missing {
			missing[i] = safe(m)
		}
		fmt.Fprintf(w, "not counted (no answer, or a dibs too old to split by day): %s\n", strings.Join(missing, ", "))
	}
}

// terminalWidth is how wide stdout's terminal is: the kernel's answer for
// a terminal, else $COLUMNS, else 80 (a pipe, a file).
func terminalWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// plainOutput reports whether charts must be plain ASCII: NO_COLOR (any
// value, https://no-color.org) or a dumb terminal.
func plainOutput() bool {
	return os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb"
}
