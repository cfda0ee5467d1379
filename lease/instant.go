package lease

import "time"

// Instant is one reading of the agent's clock. Wall is the time of day:
// what leases show, what the store and the wire keep. Mono is time on a
// clock that never steps (in production the kernel's boot clock), so a
// limit measured on both — a lease's end, the SIGTERM-to-SIGKILL grace, the
// preemption grace, a reservation's expiry — comes no earlier than either
// says: a wall-clock step forward cannot shorten it, a step back only makes
// it late.
type Instant struct {
	Wall time.Time
	Mono time.Duration
	// Boot names the boot Mono counts from; a lease written under the same
	// boot keeps its limits on Mono across an agent restart.
	Boot string
}

// processStart anchors At's monotonic readings; it is set once and never
// changes.
var processStart = time.Now()

// At reads t as an Instant: its monotonic reading when it has one
// (time.Now()), else its wall clock (times read back from the store or the
// wire, and the rule tests' fixed times).
func At(t time.Time) Instant { return Instant{Wall: t, Mono: t.Sub(processStart)} }

// Add moves both clocks by d.
func (i Instant) Add(d time.Duration) Instant {
	i.Wall, i.Mono = i.Wall.Add(d), i.Mono+d
	return i
}

// MonoLimits are a lease's limits on the monotonic clock of the boot that
// wrote them. The store keeps them so a restarted agent measures what is
// left on the same clock; after a reboot they are measured again from the
// wall clock. The wire and the API leave them out.
type MonoLimits struct {
	Boot string `json:"boot"`
	// End, Signalled, Preempted and Reserved mirror ExpiresAt, SignalledAt,
	// PreemptedAt and ReservedUntil; zero when the wall field is zero.
	End       time.Duration `json:"end"`
	Signalled time.Duration `json:"signalled,omitempty"`
	Preempted time.Duration `json:"preempted,omitempty"`
	Reserved  time.Duration `json:"reserved,omitempty"`
}

// monoOf places a wall time on the monotonic clock as seen from now.
func monoOf(wall time.Time, now Instant) time.Duration {
	if wall.IsZero() {
		return 0
	}
	return now.Mono + wall.Sub(now.Wall)
}

// limits derives l's monotonic limits at now from its wall fields.
func limitsAt(l *Lease, now Instant) MonoLimits {
	return MonoLimits{
		Boot: now.Boot, End: monoOf(l.ExpiresAt, now), Signalled: monoOf(l.SignalledAt, now),
		Preempted: monoOf(l.PreemptedAt, now), Reserved: monoOf(l.ReservedUntil, now),
	}
}

// moved carries old's monotonic limits over to l: a field that did not
// change keeps its limit, one that moved moves its limit by as much (so an
// extension after a wall-clock jump is not shortened by the jump), and one
// that is newly set is measured from now.
func moved(old MonoLimits, prev, l *Lease, now Instant) MonoLimits {
	shift := func(limit time.Duration, was, is time.Time) time.Duration {
		switch {
		case is.IsZero():
			return 0
		case was.IsZero():
			return monoOf(is, now)
		}
		return limit + is.Sub(was)
	}
	return MonoLimits{
		Boot:      old.Boot,
		End:       shift(old.End, prev.ExpiresAt, l.ExpiresAt),
		Signalled: shift(old.Signalled, prev.SignalledAt, l.SignalledAt),
		Preempted: shift(old.Preempted, prev.PreemptedAt, l.PreemptedAt),
		Reserved:  shift(old.Reserved, prev.ReservedUntil, l.ReservedUntil),
	}
}

// reached reports whether a limit set at wall (and mono on the monotonic
// clock) plus d has come at now by both clocks.
func reached(now Instant, wall time.Time, mono, d time.Duration) bool {
	return !now.Wall.Before(wall.Add(d)) && now.Mono >= mono+d
}
