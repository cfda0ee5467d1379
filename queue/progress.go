package queue

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// Progress is what the cluster shows of every queued attempt: where each
// started, and which hold only gang reservations so far. The scheduler reads
// it so an attempt is never started twice.
type Progress struct {
	// Started maps an attempt's key to a node where it has (or had) a
	// committed lease.
	Started map[string]string
	// Reserving holds the keys of attempts with only gang reservations.
	Reserving map[string]bool
}

// Progress reads the view's leases and ended runs. An attempt that already
// ran somewhere counts as started even when its lease is gone before its
// origin's "running" mark arrives.
func (v ClusterView) Progress() Progress {
	p := Progress{Started: map[string]string{}, Reserving: map[string]bool{}}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, l := range n.Leases {
			switch {
			case l.Entry == "":
			case l.ReservedUntil.IsZero():
				p.Started[l.Entry] = n.Name
			default:
				p.Reserving[l.Entry] = true
			}
		}
		for _, x := range n.Ended {
			if !x.Reserved {
				p.Started[x.Entry] = n.Name
			}
		}
	}
	return p
}

// InFlight is a start the scheduler has sent and not yet seen in the
// cluster's state. Until it shows, its GPUs count as taken, so no other
// entry is planned onto them, and the attempt is not planned again.
type InFlight struct {
	Key string
	// Mono is the scheduler's monotonic clock (clock.Clock.Mono) when the
	// start was sent. Its age is never judged on the wall clock: a wall
	// clock stepped forward (NTP, an administrator) would end the hold at
	// once and let the scheduler start the same attempt a second time.
	Mono  time.Duration
	Ranks []RankPlacement
	User  string
	UID   int
}

// InFlightTimeout is how long an unseen start holds its GPUs in the
// scheduler's plans before it is forgotten.
const InFlightTimeout = 15 * time.Second

// Settled reports whether the scheduler is done with an in-flight start:
// its lease shows, its origin says it runs, its entry is gone or moved on to
// another attempt, or it is stale — InFlightTimeout has passed on the
// monotonic clock, mono being that clock now.
func (f InFlight) Settled(p Progress, entries map[string]QueueEntry, mono time.Duration) bool {
	if mono-f.Mono > InFlightTimeout {
		return true
	}
	if _, seen := p.Started[f.Key]; seen {
		return true
	}
	id, _, _ := strings.Cut(f.Key, "#")
	e, ok := entries[id]
	return !ok || e.Running || e.Key() != f.Key
}

// Hold adds placeholder leases for in-flight starts to the nodes they were
// sent to. The placeholders are dated from now, the pass's wall clock, so
// a step of that clock neither frees their GPUs nor holds them longer:
// they last exactly as long as the starts stay in flight.
func Hold(nodes []lease.SchedNode, inflight []InFlight, now time.Time) {
	for _, f := range inflight {
		for _, rk := range f.Ranks {
			for i := range nodes {
				if nodes[i].Name == rk.Node {
					nodes[i].Leases = append(nodes[i].Leases, lease.Lease{ID: "inflight-" + f.Key, Node: rk.Node, GPUs: rk.GPUs,
						User: f.User, UID: f.UID, Entry: f.Key, StartedAt: now, ExpiresAt: now.Add(time.Hour), ReservedUntil: now.Add(InFlightTimeout)})
				}
			}
		}
	}
}

// Waiting splits the cluster's queue for one scheduling pass: the entries
// the scheduler may start now, and those that already started somewhere
// whose origin has not heard (to be told again, never started twice). An
// entry is started only while its origin, its source of truth, is alive to
// hear that it runs.
func (v ClusterView) Waiting(p Progress) (waiting, retell []QueueEntry) {
	for _, e := range v.Entries() {
		if e.Running || e.Backoff(v.Now) || e.Held() {
			continue
		}
		if o, ok := v.Node(e.Origin); !ok || !o.Alive() {
			continue
		}
		key := e.Key()
		if p.Reserving[key] {
			continue
		}
		if _, ok := p.Started[key]; ok {
			retell = append(retell, e)
			continue
		}
		waiting = append(waiting, e)
	}
	return waiting, retell
}

// RunAction is what an origin does about one of its running entries.
type RunAction int

// What JudgeRunning may say.
const (
	// RunWait: nothing yet (it runs, or its end has not reached here).
	RunWait RunAction = iota
	// RunStopRanks: a gang rank failed or was lost: stop the others (Stop).
	RunStopRanks
	// RunDone: every lease is gone; the entry is finished (or, when
	// Failed and it asked for it, requeued: see QueueEntry.AfterRun).
	RunDone
)

// RunVerdict is JudgeRunning's answer.
type RunVerdict struct {
	Action RunAction
	Failed bool
	Why    string
	// Preempted: a lease of the attempt was preempted for someone else
	// (quota or idle reclaim), so it goes back in the queue unless it was
	// submitted with NoRequeue (QueueEntry.AfterPreempt).
	Preempted bool
	// Stop lists the live ranks to stop (RunStopRanks).
	Stop []lease.Lease
	// Missing counts the ranks of a running gang that no lease accounts
	// for — not committed, not ended, no reservation pending — so its other
	// ranks run without them (a commit that never arrived, a reservation
	// that expired). Gossip lags a little, so the origin acts only once it
	// has been so for a reservation's lifetime (origin.Reconcile); the
	// verdict stays RunWait, with Live the ranks that run.
	Missing int
	Live    []lease.Lease
}

// JudgeRunning decides what the origin does about a running entry, from
// what the cluster shows of its attempt: its live leases, how its ended
// leases ended, and which of its nodes are away. An agent's restart is not
// its node's death: the rank's session lives in tmux and outlives its
// agent, so a lease on a node that is restarting or silent (suspect, dead,
// not yet heard) still runs for the grace. Only a lease on a node that left
// for good, or has been silent for grace, counts as lost: its rank failed,
// and the entry finishes (and requeues, if it asked) without waiting for
// that node to return.
func (v ClusterView) JudgeRunning(e QueueEntry, grace time.Duration) RunVerdict {
	key := e.Key()
	interactive := !e.Job.RunsCommand()
	var out RunVerdict
	var live []lease.Lease
	// held counts the ranks on nodes away within the grace: they run on,
	// out of sight.
	ended, held := 0, 0
	// lost says which node's loss failed the attempt: the cause, where an
	// ended lease's failure may be only its effect (the other ranks are
	// stopped for it, and end with the signal's exit status).
	lost := ""
	// committed counts the gang's ranks that hold (or held) their GPUs as
	// a run, on any node; reserving, whether a commit is still pending.
	committed, reserving := 0, false
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, x := range n.Ended {
			if x.Entry != key || x.Reserved {
				continue
			}
			ended++
			committed++
			if x.Reason.Failed(interactive) {
				out.Failed, out.Why = true, fmt.Sprintf("lease %s ended: %s", x.Lease, x.Reason)
			}
			if x.Reason == lease.PreemptedReason(lease.PreemptQuota) || x.Reason == lease.PreemptedReason(lease.PreemptIdle) {
				out.Preempted = true
			}
		}
		for _, l := range n.Leases {
			if l.Entry != key {
				continue
			}
			if l.ReservedUntil.IsZero() {
				committed++
			} else {
				reserving = true
			}
			switch {
			case n.Alive():
				live = append(live, l)
			case n.State == NodeLeft:
				ended++
				out.Failed = true
				if lost == "" {
					lost = fmt.Sprintf("node %s left the cluster: rank %d (lease %s) is lost", n.Name, l.Rank, l.ID)
				}
			case n.Lost(v.Now, grace):
				ended++
				out.Failed = true
				if lost == "" {
					lost = fmt.Sprintf("node %s has been silent since %s, past the %s grace: rank %d (lease %s) is lost", n.Name, n.Since.Local().Format("15:04:05"), words.FormatDuration(grace), l.Rank, l.ID)
				}
			default:
				// Restarting, or silent within the grace: its rank
				// holds, and comes back with its agent.
				held++
			}
		}
	}
	if lost != "" {
		out.Why = lost
	}
	if len(live) > 0 {
		if out.Failed && e.Nodes > 1 {
			for _, l := range live {
				if l.PreemptedAt.IsZero() {
					out.Stop = append(out.Stop, l)
				}
			}
			if len(out.Stop) > 0 {
				out.Action = RunStopRanks
				return out
			}
		}
		wait := RunVerdict{Action: RunWait}
		if e.Nodes > 1 && !reserving && committed < e.Nodes && len(live) > 0 {
			wait.Missing, wait.Live = e.Nodes-committed, live
		}
		return wait
	}
	if ended == 0 || held > 0 && !out.Failed {
		// Not seen ending yet (gossip may lag), or a rank still runs on
		// a node that is away.
		return RunVerdict{Action: RunWait}
	}
	out.Action = RunDone
	return out
}

// Orphans lists the committed leases started for origin's entries whose
// attempt is over: the entry is gone (finished or cancelled) or has moved on
// to another attempt. They appear when a rank's node comes back after its
// gang was given up; the origin stops them, so no rank of a past attempt
// keeps running.
func (v ClusterView) Orphans(origin string, entries map[string]QueueEntry) []lease.Lease {
	var out []lease.Lease
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Alive() {
			continue
		}
		for _, l := range n.Leases {
			if l.Entry == "" || !l.ReservedUntil.IsZero() || !l.PreemptedAt.IsZero() {
				continue
			}
			id, _, _ := strings.Cut(l.Entry, "#")
			if o, ok := OriginOfQueueID(id); !ok || o != origin {
				continue
			}
			if e, ok := entries[id]; !ok || e.Key() != l.Entry {
				out = append(out, l)
			}
		}
	}
	return out
}

// EntryState is where a queued run stands, as its origin says: what a
// client follows (`dibs run --queue`), never the words of a notice.
type EntryState string

// The states of an entry.
const (
	EntryWaiting EntryState = "waiting"
	// EntryBackoff: requeued after a failure, waiting until RetryAt.
	EntryBackoff   EntryState = "backoff"
	EntryRunning   EntryState = "running"
	EntryFinished  EntryState = "finished"
	EntryFailed    EntryState = "failed"
	EntryCancelled EntryState = "cancelled"
	// EntryUnknown: its origin has no record of it (it ended before the
	// agent last started, or long ago; `dibs events` may say more).
	EntryUnknown EntryState = "unknown"
)

// EntryStatus is one entry's state at its origin.
type EntryStatus struct {
	ID    string     `json:"id"`
	State EntryState `json:"state"`
	// Reason is why it failed, or why it waits to retry.
	Reason string `json:"reason,omitempty"`
	// RetryAt is when a requeued run tries again (EntryBackoff).
	RetryAt     time.Time `json:"retry_at,omitzero"`
	Restarts    int       `json:"restarts,omitempty"`
	MaxRestarts int       `json:"max_restarts,omitempty"`
}

// Status is the state of an entry its origin still holds, at now.
func (e *QueueEntry) Status(now time.Time) EntryStatus {
	s := EntryStatus{ID: e.ID, State: EntryWaiting, Restarts: e.Restarts, MaxRestarts: e.MaxRestarts}
	switch {
	case e.Running || e.Array != nil && e.Array.Started:
		s.State = EntryRunning
	case e.Backoff(now):
		s.State, s.Reason, s.RetryAt = EntryBackoff, e.RetryWhy, e.RetryAt
	}
	return s
}

// RunExit says how a finished queued run ended, from its ended leases:
// "exit 0", or the worst exit status of its ranks; when no rank recorded
// one (an interactive run), why its leases ended if that was not its
// holder's doing (its time limit, a booking of its GPUs); else empty.
func (v ClusterView) RunExit(e QueueEntry) string {
	key := e.Key()
	worst, found := 0, false
	why := ""
	for i := range v.Nodes {
		for _, x := range v.Nodes[i].Ended {
			if x.Entry != key || x.Reserved {
				continue
			}
			if code, ok := x.Reason.ExitCode(); ok && (!found || code > worst) {
				worst, found = code, true
			}
			if x.Reason == lease.EndExpired || x.Reason == lease.EndBooked {
				why = "ended " + x.Reason.Words()
			}
		}
	}
	if !found {
		return why
	}
	return "exit " + strconv.Itoa(worst)
}
