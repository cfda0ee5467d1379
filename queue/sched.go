package queue

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Signal is the signal a reclaim sends the session: SIGTERM (15) for an
// overdue lease, as end_action "signal" sends at the end; 0 (the
// configured preemption signal) for the others.
func (r Reclaim) Signal() int {
	if r.Reason == lease.PreemptOverdue {
		return 15
	}
	return 0
}

// WaitingStarting is Ranked.Waiting for an entry whose start is under way
// (its leases or reservations exist, the origin has not marked it running
// yet): it does not wait for anything.
const WaitingStarting = "starting"

// Ranked is one waiting entry as `dibs queue` shows it.
type Ranked struct {
	Entry    QueueEntry `json:"entry"`
	Priority float64    `json:"priority"`
	// Position is 1-based, in the order the scheduler considers entries.
	Position int `json:"position"`
	// EstStart is when the entry is expected to start: now when it starts in
	// this pass, zero when it cannot be told (its GPUs are held outside
	// dibs, or it cannot run on the nodes that are up).
	EstStart time.Time `json:"est_start,omitzero"`
	// Waiting says in one line why it waits; empty when it starts now.
	// It is Reason's words.
	Waiting string `json:"waiting,omitempty"`
	// Reason is why it waits, as a code and words: the cause on the node
	// where it would start soonest. Zero when it starts now.
	Reason Reason `json:"reason,omitzero"`
	// Nodes are every node's reason, with SchedConfig.Explain (dibs queue
	// -v and --json): why it does not start there now.
	Nodes []Reason `json:"nodes,omitempty"`
}

// RankPlacement is where one rank of a start runs.
type RankPlacement struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
}

// Start is an entry the scheduler starts in this pass: every rank at once, or
// (for a gang) reservations on every rank's node that the agent commits
// together.
type Start struct {
	Entry QueueEntry `json:"entry"`
	// Ranks has one placement per node, rank 0 (MASTER_ADDR) first.
	Ranks []RankPlacement `json:"ranks"`
	// Borrowed: the start takes its user (or group) beyond quota; its leases
	// are marked so and may be preempted for someone within quota.
	Borrowed bool `json:"borrowed,omitempty"`
	// Backfill: it starts ahead of a higher-priority entry that waits, on
	// GPUs that entry does not need, or only until it could start.
	Backfill bool `json:"backfill,omitempty"`
}

// Reclaim asks the agent to end a lease cooperatively for a waiting entry:
// tell the holder, wait the preempt grace, end it.
type Reclaim struct {
	Lease  lease.Lease `json:"lease"`
	Reason string      `json:"reason"` // PreemptQuota, PreemptIdle or PreemptOverdue
	For    string      `json:"for"`    // the entry id it is reclaimed for
}

// Plan is what one scheduling pass decides.
type Plan struct {
	// Order is every entry that is not Running, in the order the scheduler
	// considered them.
	Order   []Ranked  `json:"order"`
	Start   []Start   `json:"start,omitempty"`
	Reclaim []Reclaim `json:"reclaim,omitempty"`
}

// Schedule runs one pass of the queue: it ranks every entry, starts what fits
// now, and asks for leases to be reclaimed for the first entry that waits.
// It is pure and deterministic: the same inputs, in any order, give the same
// plan, so any agent can compute `dibs queue` and agree with the scheduler.
//
// Order. Entries whose start would keep their user (and group) within quota
// come before entries that would borrow (Kueue's rule, so a borrower never
// takes GPUs that a within-quota request is waiting to reclaim); within each
// part, by Priority descending, then SubmittedAt, then ID. With no quotas
// configured this is plain priority order.
//
// Free GPUs. A GPU is free when its node is alive, it has no error, no
// process and no lease (of it or of a part of it), and is not split into
// MIG instances; a gang reservation holds its GPUs until ReservedUntil,
// a lease past its end holds them until the agent ends it. A node may offer
// at most its 64 lowest-numbered GPUs. Bookings, pools and budgets on
// shared GPUs add the rules described in sched_parts.go.
//
// Starts. Entries are walked in order. A single-node entry lands where
// ChooseNode would put it (fewest free GPUs left over, closest GPUs, its
// origin node, the name), honouring its Node pin and Model. A gang needs
// Nodes distinct nodes with GPUsPerNode free GPUs each, packing (fewest left
// over, then name); rank 0 is the chosen node with the lowest name. A start
// is emitted only when every rank fits at once in this pass, so two gangs
// competing for the same nodes never each hold part: one starts, the other
// waits whole. Running entries are not in the queue at all; an entry whose
// attempt already has leases or live reservations (Lease.Entry == Key()) is
// starting and is left alone; a reservation that is never committed expires
// by itself and its entry is planned again.
//
// Backfill (EASY). The first entry that cannot start — the head — gets the
// GPUs it would start on at its shadow time (the earliest time enough GPUs
// come free, from lease ends, planned starts and reclaims) protected: a
// later entry may start now on a protected GPU only if its Duration ends by
// that shadow time; on unprotected free GPUs it may start at once. Later
// waiting entries are not protected. An entry that cannot run on the nodes
// that are up (too few alive nodes, a down pinned node) waits without
// blocking anyone; so does a head whose shadow time is unknown (GPUs held
// outside dibs).
//
// Reclaim, for the head only, only when the head could then start now
// (counting leases already being preempted first, so passes do not pile up
// reclaims), and only when its GPUs would not come free within PreemptGrace
// anyway (a lease past its end does not count: it may linger): leases of other users idle for at least IdleReclaimAfter
// (reason idle, longest idle first), then, when the head's user is within
// quota, borrowed leases of other users (reason quota, most recently started
// first). The chosen set is irreducible: no lease in it could be spared. A
// gang is reclaimed whole. A waiting user's own idle leases are never
// reclaimed for them: they can end those themselves.
// The budgets on one shared GPU are reclaimed together, as one lease (all
// reclaimable, none the head's user's); MIG leases never are for the head.
// A waiting MIG or budget entry, which is never the head, reclaims a part
// of a GPU by the same rules (sched_mig.go).
//
// EstStart. List scheduling on each GPU's expected free time: lease ends
// (a lease past its end or already preempted is expected to go within a
// minute or its grace), the ends of starts planned in this pass, and the
// estimated runs of the waiting entries ahead; holes are not backfilled in
// the estimate. An entry with no Duration is taken to hold its GPUs for good:
// it never backfills onto protected GPUs, and what waits for its GPUs has no
// estimate.
func Schedule(entries []QueueEntry, nodes []lease.SchedNode, usage Usage, now time.Time, cfg SchedConfig) Plan {
	cfg = cfg.WithDefaults()
	s := newScheduler(nodes, now, cfg)
	order := s.rank(entries, usage)
	plan := Plan{Order: make([]Ranked, len(order))}
	for i, k := range order {
		e := &entries[k.idx]
		r := &plan.Order[i]
		r.Entry, r.Priority, r.Position = *e, k.prio, i+1
		s.cur = k
		s.visit(e, r, &plan)
	}
	return plan
}
