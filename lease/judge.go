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
)

// Judgement is what the rules say about one GPU right now.
type Judgement struct {
	Flags []Flag `json:"flags"`
	// Squatters are the processes that have no business on the GPU.
	Squatters []nodeprobe.Process `json:"squatters,omitempty"`
	// IdleSince is when the GPU last had work, zero when it has work now.
	IdleSince time.Time `json:"idle_since,omitzero"`
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
// idle may be nil, in which case no GPU is judged idle.
func Judge(snap nodeprobe.Snapshot, leases []Lease, idle *IdleTracker, now time.Time, p Policy) map[int]Judgement {
	holder := make(map[int]*Lease)
	for i := range leases {
		for _, g := range leases[i].GPUs {
			holder[g] = &leases[i]
		}
	}
	out := make(map[int]Judgement, len(snap.GPUs))
	for _, g := range snap.GPUs {
		var j Judgement
		l := holder[g.Index]
		for _, pr := range g.Processes {
			if l == nil || !ownedBy(pr, l) {
				j.Squatters = append(j.Squatters, pr)
			}
		}
		if len(j.Squatters) > 0 {
			j.Flags = append(j.Flags, FlagSquatted)
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
			switch left := l.ExpiresAt.Sub(now); {
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

// ownedBy reports whether a process belongs to the lease holder. The uid is
// the truth; the name is used only when /proc could not give a uid.
func ownedBy(pr nodeprobe.Process, l *Lease) bool {
	if pr.UID >= 0 {
		return pr.UID == l.UID
	}
	return pr.User != "" && pr.User == l.User
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
