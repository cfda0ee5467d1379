package queue

import (
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
)

// MaxAfter bounds the entries one run may wait for.
const MaxAfter = 16

// Dep is one entry a queued run waits for (`--after ID`, `--after-any ID`,
// SLURM's afterok and afterany): the run starts once every one of its
// dependencies ended, and is ended itself, with a notice naming the
// dependency, when one it needs to succeed did not.
type Dep struct {
	// ID is the entry waited for: a run, a gang or a whole array.
	ID string `json:"id"`
	// Any: any end will do (--after-any); else it must succeed: every rank
	// of a gang, every task of an array exited 0.
	Any bool `json:"any,omitempty"`
}

// String is the dependency as sbatch's --dependency spells it.
func (d Dep) String() string {
	if d.Any {
		return "afterany:" + d.ID
	}
	return "afterok:" + d.ID
}

// DepVerdict is what a dependency's state means for the run waiting on it.
type DepVerdict int

// What DepFor may say.
const (
	// DepWait: it has not ended yet.
	DepWait DepVerdict = iota
	// DepMet: it ended as asked.
	DepMet
	// DepBroken: it ended, and not as asked (or how is no longer known).
	DepBroken
)

// DepFor judges one dependency from its entry's status at its origin.
func DepFor(d Dep, s EntryStatus) DepVerdict {
	switch s.State {
	case EntryWaiting, EntryRunning, EntryBackoff:
		return DepWait
	case EntryFinished:
		return DepMet
	}
	// Failed, cancelled, or ended so long ago its origin forgot how
	// (it existed when the run waiting on it was submitted).
	if d.Any {
		return DepMet
	}
	return DepBroken
}

// ParseAfter reads the ids given to --after (ok: false) or --after-any
// (ok: true): several ids may be given, each flag repeated or comma
// separated.
func ParseAfter(ids []string, any bool) ([]Dep, error) {
	var out []Dep
	for _, arg := range ids {
		for id := range strings.SplitSeq(arg, ",") {
			id = strings.TrimSpace(id)
			if _, ok := OriginOfQueueID(id); !ok {
				return nil, refusal.Invalidf("--after %s is not a queue id: ids look like node01-q3 (`dibs queue` shows them)", words.QuoteInput(id))
			}
			if _, _, task := job.ArrayTaskOf(id); task {
				return nil, refusal.Invalidf("--after %s names one task of an array: wait for the whole array (its id without /N)", words.QuoteInput(id))
			}
			out = append(out, Dep{ID: id, Any: any})
		}
	}
	return out, nil
}

// checkSweep checks an entry's array and dependencies: their shapes, and
// that only a parent (not a task id) carries an array.
func (e *QueueEntry) checkSweep() error {
	if e.Array != nil {
		if _, _, task := job.ArrayTaskOf(e.ID); task {
			return refusal.Invalidf("queue entry %s is a task and an array", e.ID)
		}
		if err := e.Array.Check(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
		}
	}
	if len(e.After) > MaxAfter {
		return refusal.Invalidf("queue entry %s waits for %d entries; at most %d", e.ID, len(e.After), MaxAfter)
	}
	for _, d := range e.After {
		if _, ok := OriginOfQueueID(d.ID); !ok || len(d.ID) > 2*words.MaxNameLen || d.ID == e.ID {
			return refusal.Invalidf("queue entry %s waits for a bad id", e.ID)
		}
	}
	return nil
}
