package lease

import (
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Flag is a judgement the board shows on a GPU.
type Flag string

// Flags a GPU can carry.
const (
	// FlagIdle: leased, but no process and low utilisation for Policy.IdleAfter.
	FlagIdle Flag = "idle"
	// FlagSquatted: a process runs with no lease, or belongs to someone other
	// than the holder.
	FlagSquatted Flag = "squatted"
	// FlagExpiring: the lease ends within Policy.WarnBefore.
	FlagExpiring Flag = "expiring"
	// FlagOverdue: the lease is past its end and still held (end action warn,
	// or signal in its grace).
	FlagOverdue Flag = "overdue"
	// FlagOverBudget: on a shared GPU, a holder's processes use more memory
	// than their budget, which can push the others' jobs out of memory.
	FlagOverBudget Flag = "over-budget"
)

// Judgement is what the rules say about one GPU right now.
type Judgement struct {
	Flags []Flag `json:"flags"`
	// Squatters are the processes that have no business on the GPU.
	Squatters []nodeprobe.Process `json:"squatters,omitempty"`
	// IdleSince is when the GPU last had work, zero when it has work now.
	IdleSince time.Time `json:"idle_since,omitzero"`
	// OverBudget are the holders of a shared GPU whose processes use more
	// than their budgets.
	OverBudget []Overrun `json:"over_budget,omitempty"`
}

// Overrun is one holder of a shared GPU using more memory than their
// budgets on it add up to.
type Overrun struct {
	User      string `json:"user"`
	UID       int    `json:"uid"`
	UsedMiB   uint64 `json:"used_mib"`
	BudgetMiB uint64 `json:"budget_mib"`
}

// Has reports whether the judgement carries f.
func (j Judgement) Has(f Flag) bool { return slices.Contains(j.Flags, f) }

// IdleTracker remembers since when each GPU has been quiet (no process and
// utilisation under the threshold); a single snapshot cannot say "for 30 min".
// Not safe for concurrent use.
type IdleTracker struct {
	quietSince map[int]time.Time
}

// NewIdleTracker starts with no history: every GPU counts as quiet from its
// first observation.
func NewIdleTracker() *IdleTracker {
	return &IdleTracker{quietSince: make(map[int]time.Time)}
}

// Observe records one snapshot.
func (it *IdleTracker) Observe(snap nodeprobe.Snapshot, p Policy) {
	now := snap.TakenAt
	seen := make(map[int]bool, len(snap.GPUs))
	for _, g := range snap.GPUs {
		seen[g.Index] = true
		quiet := len(g.Processes) == 0 && (g.UtilizationPct == nil || *g.UtilizationPct < p.IdleUtilPct)
		if !quiet {
			delete(it.quietSince, g.Index)
			continue
		}
		if _, ok := it.quietSince[g.Index]; !ok {
			it.quietSince[g.Index] = now
		}
	}
	for i := range it.quietSince {
		if !seen[i] {
			delete(it.quietSince, i)
		}
	}
}

// QuietSince returns when gpu went quiet, and false when it has work.
func (it *IdleTracker) QuietSince(gpu int) (time.Time, bool) {
	t, ok := it.quietSince[gpu]
	return t, ok
}

// Judge computes every GPU's flags from a snapshot and the node's leases.
// idle may be nil, in which case no GPU is judged idle. A process is a
// squatter unless it belongs to a holder of its GPU (one NVML places on a
// MIG instance: to that instance's holder); a shared GPU's holder whose
// processes use more than their budget is flagged over budget.
func Judge(snap nodeprobe.Snapshot, leases []Lease, idle *IdleTracker, now time.Time, p Policy) map[int]Judgement {
	return JudgeWithEnded(snap, leases, nil, idle, now, p)
}

// JudgeWithEnded is Judge on the node that ended the leases in ended (its
// ledger entries, see WithinEndGrace): a process on a GPU of one of them
// that ended within EndGrace of now, owned by its holder, is taken for that
// lease's work still exiting and is not a squatter. Any other user's process
// there is one at once, as in Judge.
func JudgeWithEnded(snap nodeprobe.Snapshot, leases []Lease, ended []LedgerEntry, idle *IdleTracker, now time.Time, p Policy) map[int]Judgement {
	uses := usesOfList(leases)
	out := make(map[int]Judgement, len(snap.GPUs))
	for gi := range snap.GPUs {
		g := &snap.GPUs[gi]
		var j Judgement
		u := uses[g.Index]
		l := u.first()
		for _, pr := range g.Processes {
			if !u.holdsProcess(pr) && !exiting(ended, g.Index, pr, now) {
				j.Squatters = append(j.Squatters, pr)
			}
		}
		if len(j.Squatters) > 0 {
			j.Flags = append(j.Flags, FlagSquatted)
		}
		if u != nil && u.budget > 0 {
			j.OverBudget = overBudget(g, u)
			if len(j.OverBudget) > 0 {
				j.Flags = append(j.Flags, FlagOverBudget)
			}
		}
		if idle != nil {
			if since, ok := idle.QuietSince(g.Index); ok {
				j.IdleSince = since
				if l != nil {
					from := since
					if l.StartedAt.After(from) {
						from = l.StartedAt
					}
					if now.Sub(from) >= p.IdleAfter {
						j.Flags = append(j.Flags, FlagIdle)
					}
				}
			}
		}
		if l != nil {
			switch left := soonestEnd(u).Sub(now); {
			case left <= 0:
				j.Flags = append(j.Flags, FlagOverdue)
			case left <= p.WarnBefore:
				j.Flags = append(j.Flags, FlagExpiring)
			}
		}
		out[g.Index] = j
	}
	return out
}

// soonestEnd is when the first lease on a GPU (or on one of its parts) ends.
func soonestEnd(u *Use) time.Time {
	var end time.Time
	if u.Whole != nil {
		end = u.Whole.ExpiresAt
	}
	for _, l := range u.parts {
		if end.IsZero() || l.ExpiresAt.Before(end) {
			end = l.ExpiresAt
		}
	}
	return end
}

// overBudget lists the shared holders of g whose processes use more memory
// than their budgets on it.
func overBudget(g *nodeprobe.GPU, u *Use) []Overrun {
	var out []Overrun
	for i, l := range u.parts {
		if l.MemMiB == 0 || slices.ContainsFunc(u.parts[:i], func(x *Lease) bool { return x.MemMiB > 0 && x.UID == l.UID }) {
			continue // one line per holder
		}
		o := Overrun{User: l.User, UID: l.UID}
		for _, x := range u.parts {
			if x.UID == l.UID {
				o.BudgetMiB += x.MemMiB
			}
		}
		for _, pr := range g.Processes {
			if pr.MIGDevice == "" && ownedBy(pr, l) {
				o.UsedMiB += pr.UsedMemoryMiB
			}
		}
		if o.UsedMiB > o.BudgetMiB {
			out = append(out, o)
		}
	}
	return out
}

// ownedBy reports whether a process belongs to the lease holder. The uid is
// the truth; the name is used only when /proc could not give a uid. Root's
// processes in a container the lease adopted count as the holder's too.
func ownedBy(pr nodeprobe.Process, l *Lease) bool {
	return ownedByUser(pr, l.UID, l.User) || l.ownsContainerProcess(pr)
}

// ownedByUser is ownedBy for a holder known by uid and name.
func ownedByUser(pr nodeprobe.Process, uid int, user string) bool {
	if pr.UID >= 0 {
		return pr.UID == uid
	}
	return pr.User != "" && pr.User == user
}

// QuietSinceAll returns a copy of when each quiet GPU went quiet, so a node
// can publish it and other nodes judge idleness the way it does.
func (it *IdleTracker) QuietSinceAll() map[int]time.Time {
	out := make(map[int]time.Time, len(it.quietSince))
	for k, v := range it.quietSince {
		out[k] = v
	}
	return out
}

// IdleTrackerFrom rebuilds a tracker from a published QuietSinceAll.
func IdleTrackerFrom(m map[int]time.Time) *IdleTracker {
	it := NewIdleTracker()
	for k, v := range m {
		it.quietSince[k] = v
	}
	return it
}
