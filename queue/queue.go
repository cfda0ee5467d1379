// Package queue holds the rules of queued work, with no I/O: a queue entry
// and its checks, the fair-share priority, the scheduling pass that places
// waiting entries (gangs all or nothing, backfill, MIG and shared GPUs,
// pools, bookings) and plans reclaims, job arrays, dependencies, a gang's
// progress and verdicts, requeue and its backoff, and the cluster view they
// read. It is scheduling apart from the rules of one lease, which it uses
// (package lease: a queue entry becomes leases; lease does not know the
// queue). The agent runs it: agent/origin keeps the entries submitted at a
// node, agent/sched runs a pass on the scheduling agent.
package queue

import (
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

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
	Node string `json:"node,omitempty"`
	// NodeChoice is its --nodelist and --exclude (JSON nodelist, exclude):
	// the nodes it may run on and those it must not (MayRunOn). An entry
	// with one is submitted only once every live node speaks the protocol
	// that brought it (agent/peer.NodeLists): an older scheduler would
	// ignore it. A nodelist of one on a single-node entry is its Node.
	lease.NodeChoice
	Duration time.Duration `json:"duration"`
	Kind     lease.Kind    `json:"kind"`
	Note     string        `json:"note,omitempty"`
	// Job is nil for a queued claim.
	Job *job.Job `json:"job,omitempty"`
	// Requeue puts a gang whose rank failed (or a preempted run) back in
	// the queue, at most MaxRestarts times; Restarts counts them.
	Requeue     bool `json:"requeue,omitempty"`
	MaxRestarts int  `json:"max_restarts,omitempty"`
	Restarts    int  `json:"restarts,omitempty"`
	// NoRequeue keeps a run preempted for someone else (quota, idle
	// reclaim) out of the queue: it ends. Without it such a run goes back
	// in line, as SLURM requeues a preempted batch job (JobRequeue=1), and
	// that does not count as a restart.
	NoRequeue bool `json:"no_requeue,omitempty"`
	// Attempt grows on every requeue; with ID it names one placement, so a
	// retried start is recognised and never granted twice.
	Attempt int `json:"attempt,omitempty"`
	// Running is set by the origin once the entry's leases exist; running
	// entries are not scheduled, only watched (for --requeue).
	Running bool `json:"running,omitempty"`
	// Model restricts placement to GPUs whose model contains it.
	Model string `json:"model,omitempty"`
	// Tags restricts placement to nodes carrying every one (a pool).
	Tags []string `json:"tags,omitempty"`
	// MemMiB asks for a memory budget on a shared GPU instead of whole
	// GPUs (one node, GPUsPerNode 1).
	MemMiB uint64 `json:"mem_mib,omitempty"`
	// MIG asks for one MIG instance instead of whole GPUs (one node,
	// GPUsPerNode 1): a profile (3g.40gb), a MIG- UUID or GPU:INDEX, as
	// `dibs claim --mig` takes.
	MIG string `json:"mig,omitempty"`
	// CPUsPerGPU and AnyCPU are the claim's (lease.Claim): the cores
	// each rank's session is bound to. Older agents ignore them.
	CPUsPerGPU int  `json:"cpus_per_gpu,omitempty"`
	AnyCPU     bool `json:"any_cpu,omitempty"`
	// RequestID is the client's id for the submission, so a retried submit
	// whose answer was lost finds this entry instead of queueing another.
	RequestID string `json:"request_id,omitempty"`
	// Placer names the scheduler its origin last let start this attempt
	// (node/instance): only one scheduler at a time may start an attempt,
	// so two that both believe they schedule (a partition, a paused agent
	// that goes on) never run it twice. The origin keeps it durable so a
	// restart does not let a second one in while the first may still be
	// starting.
	Placer string `json:"placer,omitempty"`
	// RetryAt is when a requeued run may start again: restarts are spaced
	// (RequeueDelay), so a rank that cannot start does not use up every
	// restart in seconds. The scheduler leaves the entry until then.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// RetryWhy is why the last attempt failed, shown while it waits to
	// retry.
	RetryWhy string `json:"retry_why,omitempty"`
	// Array makes the entry a job array (queue/array.go): its origin
	// makes its tasks, which are scheduled; it is not.
	Array *Array `json:"array,omitempty"`
	// After are the entries it waits for (queue/after.go); its origin
	// removes each once it ended as asked, and the scheduler leaves the
	// entry until none is left.
	After []Dep `json:"after,omitempty"`
}

// EachString calls f with the JSON name and the address of every string
// field of e, its job's included ("command" once per argument), so code that
// checks or escapes text from outside need not list the fields. f may
// replace the string.
func (e *QueueEntry) EachString(f func(field string, p *string)) {
	f("id", &e.ID)
	f("origin", &e.Origin)
	f("user", &e.User)
	f("node", &e.Node)
	f("kind", (*string)(&e.Kind))
	f("note", &e.Note)
	f("model", &e.Model)
	f("request_id", &e.RequestID)
	f("placer", &e.Placer)
	f("retry_why", &e.RetryWhy)
	f("mig", &e.MIG)
	for i := range e.Tags {
		f("tag", &e.Tags[i])
	}
	for i := range e.Only {
		f("nodelist", &e.Only[i])
	}
	for i := range e.Exclude {
		f("exclude", &e.Exclude[i])
	}
	e.Job.EachString(f)
}

// MayRunOn reports whether the entry may run on node: its Node pin and
// its NodeChoice.
func (e *QueueEntry) MayRunOn(node string) bool {
	if e.Node != "" && e.Node != node {
		return false
	}
	return len(e.Only) == 0 && len(e.Exclude) == 0 || e.NodeChoice.Allows(node)
}

// CheckText refuses an entry holding text no correct agent accepts: a
// control character, bidi control or invisible character in its user,
// node, kind, note, model or session name (Check refuses them at
// submission, so one in an entry from a peer means a broken or hostile
// peer). The job's command and directory are the submitter's own argv and
// path and may hold anything; front ends escape them when they print them.
func (e *QueueEntry) CheckText() error {
	c := words.TextChecker{Skip: []string{"command", "dir"}}
	e.EachString(c.Check)
	return c.Err
}

// Key names one attempt of an entry; the leases started for it carry it in
// Lease.Entry.
func (e *QueueEntry) Key() string { return e.ID + "#" + strconv.Itoa(e.Attempt) }

// GPUs is the total the entry asks for.
func (e *QueueEntry) GPUs() int { return e.Nodes * e.GPUsPerNode }

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
	// Pools are the pools' limits (the agent passes Policy.Pools): a node
	// in a pool whose limits an entry breaks is not eligible for it.
	Pools lease.Pools
	// LostAfter is the grace: how long a node that is restarting or
	// silent keeps its leases, its gangs' ranks and their gangs. An
	// agent's restart (an upgrade, a crash, an admin) leaves its sessions
	// running, so within the grace nothing is ended for it; after it, the
	// node's ranks are lost, and their entries finish as failed (and
	// requeue, if they asked) without waiting for the node to return.
	// The default, 5 minutes, is SLURM's SlurmdTimeout: long enough for a
	// package upgrade on a slow node.
	LostAfter time.Duration
	// RequeueBackoff is the pause before a requeued run's first retry;
	// each later retry waits twice as long as the one before, up to
	// MaxRequeueBackoff, with jitter (default 10 s, at most 5 min).
	RequeueBackoff    time.Duration
	MaxRequeueBackoff time.Duration
	// MaxQueuedPerUser is how many entries (waiting or running) one person
	// may have at one origin (default DefaultMaxQueuedPerUser). Every entry
	// travels in its origin's gossip, so the cap bounds what one person
	// adds to it. A task of a job array would count as one entry.
	MaxQueuedPerUser int
	// Explain makes a pass give every waiting entry every node's reason
	// (Ranked.Nodes), for `dibs queue` to show; the scheduler's own
	// passes leave it off (it costs a look at every node per entry).
	Explain bool
	// Terse makes a pass give a whole-GPU entry's reason as its code and
	// node alone, without words: the scheduler's own passes show no one
	// their reasons, and the words are most of a reason's cost.
	Terse bool
}

// Borrows reports whether n more GPUs take user beyond their nominal quota,
// given the GPUs they (userUsed) and their group (groupUsed) hold now.
// Quotas count GPUs fractionally: a MIG instance or a memory budget counts
// the share of its GPU it holds (Lease.Weight), so a quota of 1 holds two
// half-GPU budgets, and a third borrows. With
// no quotas configured nobody borrows; with quotas configured, a user with
// neither a user nor a group quota has a nominal quota of zero, so
// everything they run is borrowed. The scheduler and a direct claim judge
// by this one rule.
func (c SchedConfig) Borrows(user string, n, userUsed, groupUsed float64) bool {
	if len(c.Quotas) == 0 && len(c.GroupQuotas) == 0 {
		return false
	}
	uq, hasU := c.Quotas[user]
	g := c.UserGroups[user]
	gq, hasG := 0, false
	if g != "" {
		gq, hasG = c.GroupQuotas[g]
	}
	if !hasU && !hasG {
		return true
	}
	// A hair of slack: shares are sums of fractions.
	const eps = 1e-9
	return hasU && userUsed+n > float64(uq)+eps || hasG && groupUsed+n > float64(gq)+eps
}

// QuotaUse counts the GPUs user and user's group hold in leases, for
// Borrows: whole GPUs, and the share of a GPU a part holds.
func (c SchedConfig) QuotaUse(user string, leases []lease.Lease) (userUsed, groupUsed float64) {
	g := c.UserGroups[user]
	for i := range leases {
		l := &leases[i]
		if l.Booked {
			continue
		}
		if l.User == user {
			userUsed += l.Weight()
		}
		if g != "" && c.UserGroups[l.User] == g {
			groupUsed += l.Weight()
		}
	}
	return userUsed, groupUsed
}

// QueueID names a queue entry after the node it was submitted to (its
// source of truth) and that node's sequence: node01-q7.
func QueueID(origin string, seq uint64) string {
	return origin + "-q" + strconv.FormatUint(seq, 10)
}

// OriginOfQueueID returns the node a queue id belongs to, so a cancel can be
// sent there.
func OriginOfQueueID(id string) (string, bool) {
	if arr, _, ok := job.ArrayTaskOf(id); ok {
		id = arr // a task of an array: node01-q7/5
	}
	i := strings.LastIndex(id, "-q")
	if i <= 0 || i+2 == len(id) {
		return "", false
	}
	if _, err := strconv.ParseUint(id[i+2:], 10, 64); err != nil {
		return "", false
	}
	return id[:i], true
}

// Check fills a new entry's defaults from the node's policy (its kind and
// time limit as its claim's, lease.Claim.Limit) and refuses what can never
// be queued, with the reason and the way out: no size, a gang pinned to one
// node or without a command, a time limit that is not positive or over the
// kind's maximum, a note that is not one short line of
// plain text, a model, node or session name with control or invisible
// characters, a restart count out of range.
func (e *QueueEntry) Check(p lease.Policy) error {
	if e.Nodes <= 1 {
		e.Nodes = 1
	} else {
		if e.Node != "" {
			return refusal.Invalidf("a multi-node request cannot be pinned to one node")
		}
		if e.Job == nil {
			return refusal.Invalidf("a multi-node request runs a command on every node: use dibs run --nodes N --gpus-per-node G -- CMD")
		}
	}
	if e.GPUsPerNode <= 0 {
		return refusal.Invalidf("say how many GPUs: -g N (or --nodes N --gpus-per-node G)")
	}
	if e.Job != nil && e.Job.Torchrun && len(e.Job.Command) == 0 {
		return refusal.Invalidf("--torchrun needs a command to wrap")
	}
	if e.Job != nil && e.Job.PerGPU && (e.Job.Torchrun || len(e.Job.Command) == 0) {
		return refusal.Invalidf("--per-gpu starts one process per GPU itself: give it a command, and drop --torchrun (which does the same)")
	}
	k, d, err := e.claim().Limit(p)
	if err != nil {
		return err
	}
	e.Kind, e.Duration = k, d
	if err := words.CheckNote(e.Note); err != nil {
		return err
	}
	if err := words.CheckText("model", e.Model); err != nil {
		return err
	}
	if err := words.CheckText("node name", e.Node); err != nil {
		return err
	}
	if e.Job != nil {
		if err := words.CheckText("session name", e.Job.Name); err != nil {
			return err
		}
	}
	if err := lease.CheckTags(e.Tags); err != nil {
		return err
	}
	if e.MemMiB > 0 && (e.Nodes > 1 || e.GPUsPerNode > 1) {
		return refusal.Invalidf("a memory budget (--mem) is part of one GPU: drop -g and --nodes")
	}
	if e.MIG != "" {
		switch {
		case e.MemMiB > 0:
			return refusal.Invalidf("ask for a MIG instance (--mig) or a memory budget (--mem), not both")
		case e.Nodes > 1 || e.GPUsPerNode > 1:
			return refusal.Invalidf("a MIG instance is part of one GPU, so it cannot be a gang or take -g N: drop -g and --nodes (queue one run per instance), or ask for whole GPUs")
		}
		if err := words.CheckText("MIG instance", e.MIG); err != nil {
			return err
		}
		if len(e.MIG) > words.MaxNameLen {
			return refusal.Invalidf("--mig %s is too long: name a profile (3g.40gb), a MIG- UUID or GPU:INDEX", words.QuoteInput(e.MIG))
		}
	}
	if e.Requeue && e.NoRequeue {
		return refusal.Invalidf("--requeue and --no-requeue say opposite things: keep one")
	}
	if e.Requeue && e.MaxRestarts == 0 {
		e.MaxRestarts = 3
	}
	if e.MaxRestarts < 0 || e.MaxRestarts > 100 {
		return refusal.Invalidf("--max-restarts must be between 0 and 100")
	}
	return nil
}
