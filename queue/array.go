package queue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A job array (`dibs run --array 0-19%4`) is one queue entry, the parent,
// that stands for many tasks: the same request run once per index, as
// SLURM's `sbatch --array`. The parent is never scheduled itself. Its
// origin makes tasks from it lazily, a few at a time (at most Throttle
// waiting or running at once, and never more than ArrayWindow waiting), as
// ordinary entries named ID/INDEX, so the scheduler, fair-share, quotas,
// backfill, pools and bookings treat each task as its own request and a
// scheduling pass never walks the tasks that are not made yet. The origin
// persists the parent (which indices were made, and how each ended) and
// the tasks, so the throttle holds across nodes and restarts.

// Array limits.
const (
	// MaxArrayTasks bounds the tasks of one array (SLURM's MaxArraySize is
	// 1001 by default).
	MaxArrayTasks = 1000
	// ArrayWindow is how many tasks of an array without a throttle wait
	// made at once: enough to fill a small cluster in one pass, few enough
	// that a pass over a hundred arrays stays short.
	ArrayWindow = 8
	// maxArraySpec bounds an array spec's text.
	maxArraySpec = 1024
)

// Array is a parent entry's record of its tasks.
type Array struct {
	// Spec lists the indices, canonical: "0-19", "1,3,5-9".
	Spec string `json:"spec"`
	// Throttle is how many tasks may wait or run at once (0: no limit).
	Throttle int `json:"throttle,omitempty"`
	// Next is how many indices, in Spec's order, have been made tasks.
	Next int `json:"next,omitempty"`
	// Done, Failed and Cancelled are the indices that exited 0, that
	// failed, and that were cancelled (one task, `dibs cancel ID/5`),
	// as ranges like Spec.
	Done      string `json:"done,omitempty"`
	Failed    string `json:"failed,omitempty"`
	Cancelled string `json:"cancelled,omitempty"`
	// Started is set when its first task started.
	Started bool `json:"started,omitempty"`
}

// ParseArray reads `--array`'s value: indices and ranges separated by
// commas, then an optional %N throttle ("0-19%4", "1,3,7-9"). It returns
// the array with its canonical spec, or an error saying what is wrong.
func ParseArray(s string) (*Array, error) {
	if len(s) > maxArraySpec {
		return nil, refusal.Invalidf("--array is %d characters; at most %d", len(s), maxArraySpec)
	}
	list, thr, hasThr := strings.Cut(s, "%")
	a := &Array{}
	if hasThr {
		n, err := strconv.Atoi(thr)
		if err != nil || n < 1 || n > MaxArrayTasks {
			return nil, refusal.Invalidf("--array %s: the throttle after %% must be a whole number from 1 to %d", words.QuoteInput(s), MaxArrayTasks)
		}
		a.Throttle = n
	}
	idx, err := parseIndexSet(list)
	if err != nil {
		return nil, refusal.Wrapf(refusal.CodeInvalid, err, "--array %s: %v (e.g. 0-19%%4, or 1,3,5-9)", words.QuoteInput(s), err)
	}
	if len(idx) == 0 {
		return nil, refusal.Invalidf("--array %s names no task (e.g. 0-19%%4)", words.QuoteInput(s))
	}
	a.Spec = FormatIndices(idx)
	return a, nil
}

// String is the array as `--array` takes it.
func (a *Array) String() string {
	if a.Throttle > 0 {
		return a.Spec + "%" + strconv.Itoa(a.Throttle)
	}
	return a.Spec
}

// Indices are the array's task indices in order.
func (a *Array) Indices() []int {
	idx, _ := parseIndexSet(a.Spec)
	return idx
}

// Check refuses an array record no correct agent writes.
func (a *Array) Check() error {
	idx, err := parseIndexSet(a.Spec)
	if err != nil || len(idx) == 0 || len(a.Spec) > maxArraySpec {
		return refusal.Invalidf("a bad array spec")
	}
	if a.Throttle < 0 || a.Throttle > MaxArrayTasks || a.Next < 0 || a.Next > len(idx) {
		return refusal.Invalidf("array counts out of range")
	}
	for _, s := range []string{a.Done, a.Failed, a.Cancelled} {
		if len(s) > maxArraySpec*4 {
			return refusal.Invalidf("an array's task list is too long")
		}
		if _, err := parseIndexSet(s); err != nil {
			return refusal.Invalidf("a bad array task list")
		}
	}
	return nil
}

// Ended reports whether task index has ended (done, failed or cancelled).
func (a *Array) Ended(index int) bool {
	for _, s := range []string{a.Done, a.Failed, a.Cancelled} {
		if idx, _ := parseIndexSet(s); slices.Contains(idx, index) {
			return true
		}
	}
	return false
}

// EndedSet is the set of indices that ended, for loops over many tasks.
func (a *Array) EndedSet() map[int]bool {
	out := map[int]bool{}
	for _, s := range []string{a.Done, a.Failed, a.Cancelled} {
		idx, _ := parseIndexSet(s)
		for _, i := range idx {
			out[i] = true
		}
	}
	return out
}

// Unmade is how many tasks are not made yet and have not ended (cancelled
// before they were made): what waits at the origin beyond the tasks made.
func (a *Array) Unmade() int {
	ended := a.EndedSet()
	n := 0
	for _, i := range a.Indices()[a.Next:] {
		if !ended[i] {
			n++
		}
	}
	return n
}

// MarkEnded records how task index ended: done, failed or cancelled.
func (a *Array) MarkEnded(index int, state EntryState) {
	p := &a.Done
	switch state {
	case EntryFailed:
		p = &a.Failed
	case EntryCancelled:
		p = &a.Cancelled
	}
	idx, _ := parseIndexSet(*p)
	if !slices.Contains(idx, index) {
		idx = append(idx, index)
		slices.Sort(idx)
	}
	*p = FormatIndices(idx)
}

// Counts says how many tasks are done, failed and cancelled.
func (a *Array) Counts() (done, failed, cancelled int) {
	d, _ := parseIndexSet(a.Done)
	f, _ := parseIndexSet(a.Failed)
	c, _ := parseIndexSet(a.Cancelled)
	return len(d), len(f), len(c)
}

// Remaining is how many tasks have not ended: made or not.
func (a *Array) Remaining() int {
	d, f, c := a.Counts()
	return len(a.Indices()) - d - f - c
}

// ArrayTaskID names task index of array id: node01-q7/5.
func ArrayTaskID(id string, index int) string { return id + "/" + strconv.Itoa(index) }

// TaskSessionName keeps the tasks of an array that the submitter named
// apart: each task's session is the name and its index (train-5), as two
// tasks may run for one person on one node.
func TaskSessionName(name, id string) string {
	if _, idx, ok := job.ArrayTaskOf(id); ok && name != "" {
		return name + "-" + strconv.Itoa(idx)
	}
	return name
}

// Task is array entry e's task for index: the same request, its own id,
// waiting from the array's submit time (so its fair-share age is the
// array's), with no array record, request id or dependencies of its own.
func (e QueueEntry) Task(index int) QueueEntry {
	t := e
	t.ID = ArrayTaskID(e.ID, index)
	t.Array = nil
	t.After = nil
	t.RequestID = ""
	t.Placer = ""
	t.Running = false
	t.Attempt, t.Restarts = 0, 0
	t.RetryAt, t.RetryWhy = time.Time{}, ""
	t.Tags = slices.Clone(e.Tags)
	if e.Job != nil {
		j := *e.Job
		j.Command = slices.Clone(e.Job.Command)
		if e.Job.Env != nil {
			j.Env = make(map[string]string, len(e.Job.Env))
			for k, v := range e.Job.Env {
				j.Env[k] = v
			}
		}
		t.Job = &j
	}
	return t
}

// Held reports whether e waits for something other than GPUs: it is an
// array (only its tasks are scheduled) or its dependencies have not all
// ended yet. The scheduler leaves it.
func (e *QueueEntry) Held() bool { return e.Array != nil || len(e.After) > 0 }

// parseIndexSet reads "1,3,5-9" (empty: none) into sorted unique indices.
func parseIndexSet(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := indexOf(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = indexOf(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("range %s runs backwards", part)
			}
		}
		if len(out)+b-a+1 > MaxArrayTasks {
			return nil, fmt.Errorf("more than %d tasks", MaxArrayTasks)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out, nil
}

func indexOf(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > job.MaxArrayIndex || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%s is not an index from 0 to %d", words.QuoteInput(s), job.MaxArrayIndex)
	}
	return n, nil
}

// FormatIndices writes indices compactly, as ranges (3-5,9).
// It is the kernel's CPU-list form, so nodeprobe's writer serves both.
func FormatIndices(idx []int) string {
	return nodeprobe.FormatCPUList(idx)
}
