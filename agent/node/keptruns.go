package node

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// Bounds on the runs a node keeps per person for `dibs export sbatch`: the
// newest MaxKeptRunsPerUser, and no more than MaxKeptBytesPerUser of
// commands, directories and names; the oldest go first.
const (
	MaxKeptRunsPerUser  = 64
	MaxKeptBytesPerUser = 64 << 10
)

// KeptRun is the command a lease's session was started with, kept after
// the lease ends so `dibs export sbatch` can write the script of a
// finished run. It is the holder's to see (and admins'), as the command
// of a queued run is.
type KeptRun struct {
	Lease string
	User  string
	Job   job.Job
	At    time.Time
	// Session, Log, Entry and Rank are where the run's output is kept
	// (its tmux session; its log, lease.Lease.LogName) and which queued
	// request (with its attempt) and rank it was, so `dibs logs` finds the
	// run by its own record, not through the event log, which stops
	// keeping a person's events past their hourly cap. Empty in a file an
	// older agent saved.
	Session string `json:",omitempty"`
	Log     string `json:",omitempty"`
	Entry   string `json:",omitempty"`
	Rank    int    `json:",omitempty"`
}

// Named reports whether name is the run's (MatchRun): its lease id, its
// session's name, its queued request's id (without the attempt) or its
// array's.
func (r *KeptRun) Named(name string) bool {
	_, ok := MatchRun(name, r.Lease, r.Session, r.Entry)
	return ok
}

func (r *KeptRun) size() int {
	n := len(r.Job.Dir) + len(r.Job.Name) + len(r.Session) + len(r.Log) + len(r.Entry)
	for _, a := range r.Job.Command {
		n += len(a) + 1
	}
	return n
}

// MaxKeptRunsFile bounds the file the kept runs are saved in: one read at
// start, refused past it.
const MaxKeptRunsFile = 16 << 20

// keptRuns holds the kept runs of this node, per person, within the bounds
// above, and saves them whole in path (when set) after each change, so an
// agent restart keeps them.
type keptRuns struct {
	mu     sync.Mutex
	byUser map[string][]KeptRun
	path   string
	// saveMu makes saves one at a time: two sessions starting together
	// would otherwise write the same temporary file.
	saveMu sync.Mutex
}

// keep adds r, dropping the person's oldest runs past the bounds; a run
// over the byte bound alone is not kept.
func (k *keptRuns) keep(r KeptRun) {
	if r.size() > MaxKeptBytesPerUser {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byUser == nil {
		k.byUser = map[string][]KeptRun{}
	}
	runs := slices.DeleteFunc(k.byUser[r.User], func(x KeptRun) bool { return x.Lease == r.Lease })
	runs = append(runs, r)
	total := 0
	for i := range runs {
		total += runs[i].size()
	}
	for len(runs) > MaxKeptRunsPerUser || total > MaxKeptBytesPerUser {
		total -= runs[0].size()
		runs = runs[1:]
	}
	k.byUser[r.User] = slices.Clip(runs)
}

// save writes every kept run to k.path (a new file renamed over the old).
// Saves run one at a time and each reads the runs once it is their turn,
// so the last save to write holds every run kept before it began.
func (k *keptRuns) save() error {
	if k.path == "" {
		return nil
	}
	k.saveMu.Lock()
	defer k.saveMu.Unlock()
	k.mu.Lock()
	var all []KeptRun
	for _, runs := range k.byUser {
		all = append(all, runs...)
	}
	k.mu.Unlock()
	slices.SortFunc(all, func(a, b KeptRun) int { return a.At.Compare(b.At) })
	b, err := json.Marshal(all)
	if err != nil {
		return fmt.Errorf("encode the kept runs: %w", err)
	}
	// Synced before and after the rename: a power cut leaves the old
	// runs or the new, never none (TestKeptRunsSurviveAPowerCut).
	if err := durable.WriteFile(k.path, b, 0o600); err != nil {
		return fmt.Errorf("save the kept runs: %w", err)
	}
	return nil
}

// load reads the runs saved in k.path, if any, oldest first, each held to
// the bounds again.
func (k *keptRuns) load() error {
	if k.path == "" {
		return nil
	}
	f, err := os.Open(k.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the kept runs: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeptRunsFile+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Base(k.path), err)
	}
	runs, err := decodeKeptRuns(b)
	if err != nil {
		return fmt.Errorf("read %s: %w", k.path, err)
	}
	for _, r := range runs {
		k.keep(r)
	}
	return nil
}

// decodeKeptRuns decodes a saved file of kept runs: at most
// MaxKeptRunsFile bytes, each run's lease id, holder and job checked as a
// job from another agent is.
func decodeKeptRuns(b []byte) ([]KeptRun, error) {
	if len(b) > MaxKeptRunsFile {
		return nil, fmt.Errorf("over %d bytes", MaxKeptRunsFile)
	}
	var runs []KeptRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	for i := range runs {
		r := &runs[i]
		if _, ok := lease.NodeOfID(r.Lease); !ok || len(r.Lease) > 2*words.MaxNameLen {
			return nil, fmt.Errorf("run %d has a bad lease id", i)
		}
		if !words.ValidUserName(r.User) {
			return nil, fmt.Errorf("run %s has a bad holder", r.Lease)
		}
		if err := r.Job.Check(); err != nil || r.Job.Kept || len(r.Job.Command) == 0 {
			return nil, fmt.Errorf("run %s has a bad command: %v", r.Lease, err)
		}
		for _, name := range []string{r.Session, r.Log} {
			if name != "" && launch.CheckName(name) != nil {
				return nil, fmt.Errorf("run %s has a bad session or log name", r.Lease)
			}
		}
		if r.Entry != "" && !words.ValidToken(r.Entry, 2*words.MaxNameLen) || r.Rank < 0 {
			return nil, fmt.Errorf("run %s has a bad queued request or rank", r.Lease)
		}
	}
	return runs, nil
}

func (k *keptRuns) find(leaseID string) (KeptRun, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, runs := range k.byUser {
		for i := range runs {
			if runs[i].Lease == leaseID {
				return runs[i], true
			}
		}
	}
	return KeptRun{}, false
}

// RunsNamed returns user's runs this node keeps that name names (KeptRun.Named),
// oldest first: the newest MaxKeptRunsPerUser, running or ended, across
// agent restarts when they were saved.
func (n *Node) RunsNamed(user, name string) []KeptRun {
	n.kept.mu.Lock()
	defer n.kept.mu.Unlock()
	var out []KeptRun
	for _, r := range n.kept.byUser[user] {
		if r.Named(name) {
			out = append(out, r)
		}
	}
	return out
}

// KeptRun returns the command lease leaseID's session was started with,
// while this node keeps it (running or ended; not across an agent
// restart). The caller decides who may see it (lease.Caller.SeesJobOf).
func (n *Node) KeptRun(leaseID string) (KeptRun, bool) {
	return n.kept.find(leaseID)
}
