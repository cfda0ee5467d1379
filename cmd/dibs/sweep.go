package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// addSweep adds run's flags for job arrays and dependencies.
func (q *queueFlags) addSweep(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&q.array, "array", "", "run CMD once per index, each task with DIBS_ARRAY_INDEX set: 0-19, 1,3,5-9; %N runs at most N at once (0-19%4), as sbatch --array; implies --queue")
	fl.StringArrayVar(&q.after, "after", nil, "start only after queued run ID succeeded (every rank, every task exited 0); repeat or comma-separate for several; implies --queue")
	fl.StringArrayVar(&q.afterAny, "after-any", nil, "start after queued run ID ended, however it ended; implies --queue")
}

// sweep reports whether the run is an array or waits for others.
func (q *queueFlags) sweep() bool {
	return q.array != "" || len(q.after) > 0 || len(q.afterAny) > 0
}

// reportSweep says what was queued for an array or a run that waits for
// others, like sbatch: it starts on its own later, so there is nothing to
// follow now.
func (c *cli) reportSweep(s api.Submitted, q queueFlags, asJSON bool) error {
	if asJSON {
		return printJSON(c.stdout, s)
	}
	id := safe(s.ID)
	what := "queued " + id
	if q.array != "" {
		what = fmt.Sprintf("queued array %s (tasks %s)", id, safe(q.array))
	}
	var waits []string
	for _, a := range q.after {
		waits = append(waits, safe(a)+" succeeds")
	}
	for _, a := range q.afterAny {
		waits = append(waits, safe(a)+" ends")
	}
	if len(waits) > 0 {
		what += "; it starts after " + strings.Join(waits, " and ")
	}
	fmt.Fprintln(c.stdout, what)
	if q.array != "" {
		fmt.Fprintf(c.stdout, "`dibs queue` shows its tasks, `dibs cancel %s` ends them all, `dibs cancel %s/N` one, `dibs logs %s/N` a task's output\n", id, id, id)
	} else {
		fmt.Fprintf(c.stdout, "`dibs queue` shows it, `dibs cancel %s` withdraws it\n", id)
	}
	return nil
}

// printArrays says, under `dibs ls`'s leases, which tasks of each job
// array hold them, compactly: array node01-q7[3-5] running (ana).
func printArrays(w io.Writer, leases []lease.Lease) {
	running := map[string][]int{}
	users := map[string]string{}
	var ids []string
	for _, l := range leases {
		entry, _, _ := strings.Cut(l.Entry, "#")
		arr, idx, ok := job.ArrayTaskOf(entry)
		if !ok || !l.ReservedUntil.IsZero() {
			continue
		}
		if _, seen := running[arr]; !seen {
			ids = append(ids, arr)
		}
		if !slices.Contains(running[arr], idx) {
			running[arr] = append(running[arr], idx)
		}
		users[arr] = l.User
	}
	slices.Sort(ids)
	for i, id := range ids {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "array %s[%s] running (%s)\n", safe(id), queue.FormatIndices(running[id]), safe(users[id]))
	}
}
