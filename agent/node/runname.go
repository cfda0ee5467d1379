package node

import (
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/job"
)

// RunMatch is how a run answers to a name given to `dibs logs` or `dibs
// attach` (MatchRun).
type RunMatch struct {
	// Entry is the queued request the run was started for, without its
	// attempt (an array task's own id, node01-q3/5); empty for a bare run.
	Entry   string
	Attempt int
	// Task is set when the name was an array's id and the run one of its
	// tasks: the task's id, which the person names to pick it.
	Task string
}

// MatchRun is the one resolver of the names `dibs logs` and `dibs attach`
// take, so both take the same ones: a lease id (node01-42), a tmux session
// name (dibs-node01-42, or the --name given), a queued request (node01-q3,
// every rank of it), or an array (node01-q3, every task of it; one task is
// node01-q3/5). entryKey is the run's queue entry key (ID#attempt, as a
// lease's Entry and an event's Entry hold it), empty for a bare run.
func MatchRun(name, leaseID, session, entryKey string) (RunMatch, bool) {
	entry, a, _ := strings.Cut(entryKey, "#")
	m := RunMatch{Entry: entry}
	m.Attempt, _ = strconv.Atoi(a)
	if name == "" {
		return m, false
	}
	if name == leaseID || name == session || (entry != "" && name == entry) {
		return m, true
	}
	if arr, _, ok := job.ArrayTaskOf(entry); ok && arr == name {
		m.Task = entry
		return m, true
	}
	return m, false
}
