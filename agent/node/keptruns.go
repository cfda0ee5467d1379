package node

import (
	"slices"
	"sync"
	"time"

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
	Job   lease.Job
	At    time.Time
}

func (r *KeptRun) size() int {
	n := len(r.Job.Dir) + len(r.Job.Name)
	for _, a := range r.Job.Command {
		n += len(a) + 1
	}
	return n
}

// keptRuns holds the kept runs of this node in memory, per person, within
// the bounds above. An agent restart forgets them.
type keptRuns struct {
	mu     sync.Mutex
	byUser map[string][]KeptRun
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

// KeptRun returns the command lease leaseID's session was started with,
// while this node keeps it (running or ended; not across an agent
// restart). The caller decides who may see it (lease.Caller.SeesJobOf).
func (n *Node) KeptRun(leaseID string) (KeptRun, bool) {
	return n.kept.find(leaseID)
}
