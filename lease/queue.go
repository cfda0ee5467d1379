package lease

import (
	"strconv"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Job is what a queued run starts when its turn comes. A queued claim
// (`dibs claim --queue`) has none.
type Job struct {
	Command []string `json:"command,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Name    string   `json:"name,omitempty"`
	// Torchrun wraps Command in torchrun with the gang's rendezvous.
	Torchrun bool `json:"torchrun,omitempty"`
}

// QueueEntry is one waiting request. Its source of truth is the agent it was
// submitted to (Origin), which persists it; every other agent knows it from
// gossip, so the scheduler can run anywhere and its death loses nothing.
type QueueEntry struct {
	ID          string    `json:"id"`     // Origin + "-q" + sequence: node01-q7
	Origin      string    `json:"origin"` // the submitting node
	User        string    `json:"user"`
	UID         int       `json:"uid"`
	SubmittedAt time.Time `json:"submitted_at"`
	// Nodes × GPUsPerNode GPUs; Nodes 1 is a single-node request.
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpus_per_node"`
	// Node pins a single-node request to one node; empty means anywhere.
	Node     string        `json:"node,omitempty"`
	Duration time.Duration `json:"duration"`
	Kind     Kind          `json:"kind"`
	Note     string        `json:"note,omitempty"`
	// Job is nil for a queued claim.
	Job *Job `json:"job,omitempty"`
	// Requeue puts a gang whose rank failed (or a preempted run) back in
	// the queue, at most MaxRestarts times; Restarts counts them.
	Requeue     bool `json:"requeue,omitempty"`
	MaxRestarts int  `json:"max_restarts,omitempty"`
	Restarts    int  `json:"restarts,omitempty"`
	// Attempt grows on every requeue; with ID it names one placement, so a
	// retried start is recognised and never granted twice.
	Attempt int `json:"attempt,omitempty"`
	// Running is set by the origin once the entry's leases exist; running
	// entries are not scheduled, only watched (for --requeue).
	Running bool `json:"running,omitempty"`
	// Model restricts placement to GPUs whose model contains it.
	Model string `json:"model,omitempty"`
}

// Key names one attempt of an entry; the leases started for it carry it in
// Lease.Entry.
func (e *QueueEntry) Key() string { return e.ID + "#" + strconv.Itoa(e.Attempt) }

// GPUs is the total the entry asks for.
func (e *QueueEntry) GPUs() int { return e.Nodes * e.GPUsPerNode }

// SchedNode is one node as the scheduler sees it.
type SchedNode struct {
	Name  string
	Alive bool
	Snap  nodeprobe.Snapshot
	// Leases are the node's leases, reservations included.
	Leases []Lease
	// Idle is the node's idle history (nil: none known).
	Idle *IdleTracker
}

// Usage is each user's GPU-seconds, decayed with the half-life.
type Usage map[string]float64

// SchedConfig is the queue's policy.
type SchedConfig struct {
	// HalfLife decays past usage (default 7 days).
	HalfLife time.Duration
	// Shares are per-user fair shares (default 1 each).
	Shares map[string]float64
	// WeightFairShare and WeightAge weigh the two priority factors, SLURM
	// multifactor style (defaults 1000 and 100).
	WeightFairShare float64
	WeightAge       float64
	// MaxAge is the wait at which the age factor reaches 1 (default 7 days).
	MaxAge time.Duration
	// Quotas are nominal GPUs per user; a user beyond quota borrows. Empty
	// means no quotas (nobody borrows, nobody is preempted for quota).
	Quotas map[string]int
	// GroupQuotas are nominal GPUs per group, with UserGroups naming each
	// user's group; a group's members share it.
	GroupQuotas map[string]int
	UserGroups  map[string]string
	// IdleReclaimAfter: when someone waits, a lease idle this long is
	// reclaimed (default 30 min, the board's idle threshold).
	IdleReclaimAfter time.Duration
	// ReservationTTL is how long a gang reservation holds GPUs uncommitted
	// (default 30 s).
	ReservationTTL time.Duration
	// PreemptGrace is the time between telling a holder to stop (quota or
	// idle reclaim) and ending the lease: the agent enforces Policy's
	// PreemptGrace and should pass the same here; the scheduler only uses it
	// to estimate when reclaimed GPUs come free (default 2 min).
	PreemptGrace time.Duration
}
