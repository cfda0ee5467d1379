package lease

import "time"

// FinalWarnBefore is when the last warning before a lease's end comes.
const FinalWarnBefore = time.Minute

// Step is one thing the agent must do for a lease because of the time.
type Step string

// Steps the clock can call for.
const (
	// StepWarn: tell the holder the end is near (once).
	StepWarn Step = "warn"
	// StepWarnFinal: tell the holder the end is a minute away (once).
	StepWarnFinal Step = "warn-final"
	// StepOverdue: the end has come and the action is warn: tell them (once).
	StepOverdue Step = "overdue"
	// StepSignal: send SIGTERM to the session and record when.
	StepSignal Step = "signal"
	// StepEnd: end the lease now (kill its session if any).
	StepEnd Step = "end"
	// StepReservationExpired: a gang reservation was never committed; it
	// ends by itself so nothing stays held.
	StepReservationExpired Step = "reservation-expired"
	// StepPreemptEnd: a preempted or reclaimed lease's grace is over.
	StepPreemptEnd Step = "preempted"
	// StepBookingStart: a booking's time has come: it becomes a lease.
	StepBookingStart Step = "booking-start"
	// StepBookingLapsed: a booking's whole time passed before it could
	// start (the agent was down): it ends.
	StepBookingLapsed Step = "booking-lapsed"
)

// Due is a step for one lease.
type Due struct {
	Lease Lease
	Step  Step
}

// Due lists what the clock calls for at now. A lease counts as ended, and a
// grace or a reservation as over, only when both the wall clock and the
// monotonic clock say so: a wall-clock jump forward cannot end them early, a
// jump back only makes them end late.
func (t *Table) Due(at Instant, p Policy) []Due {
	now := at.Wall
	var out []Due
	for _, b := range t.Bookings() {
		// A booking keeps the wall clock's time: it was made for 09:00.
		switch {
		case !now.Before(b.ExpiresAt):
			out = append(out, Due{Lease: b, Step: StepBookingLapsed})
		case !now.Before(b.StartedAt):
			out = append(out, Due{Lease: b, Step: StepBookingStart})
		}
	}
	for _, l := range t.List() {
		e := t.leases[l.ID]
		if !e.ReservedUntil.IsZero() {
			if reached(at, e.ReservedUntil, e.mono.Reserved, 0) {
				out = append(out, Due{Lease: l, Step: StepReservationExpired})
			}
			continue
		}
		if !e.PreemptedAt.IsZero() && reached(at, e.PreemptedAt, e.mono.Preempted, p.PreemptGrace) {
			out = append(out, Due{Lease: l, Step: StepPreemptEnd})
			continue
		}
		switch {
		case !e.ended(at):
			left, monoLeft := e.ExpiresAt.Sub(now), e.mono.End-at.Mono
			switch {
			case !e.FinalWarned && p.WarnBefore > FinalWarnBefore && left <= FinalWarnBefore && monoLeft <= FinalWarnBefore:
				// One warning is enough when both are due at once.
				out = append(out, Due{Lease: l, Step: StepWarnFinal})
			case !e.Warned && !e.FinalWarned && left <= p.WarnBefore && monoLeft <= p.WarnBefore:
				out = append(out, Due{Lease: l, Step: StepWarn})
			}
		case p.EndAction == ActionEnd:
			out = append(out, Due{Lease: l, Step: StepEnd})
		case p.EndAction == ActionSignal && l.Session == "":
			out = append(out, Due{Lease: l, Step: StepEnd})
		case p.EndAction == ActionSignal && e.SignalledAt.IsZero():
			out = append(out, Due{Lease: l, Step: StepSignal})
		case p.EndAction == ActionSignal && reached(at, e.SignalledAt, e.mono.Signalled, p.SignalGrace):
			out = append(out, Due{Lease: l, Step: StepEnd})
		case p.EndAction == ActionWarn && !e.OverdueNoticed:
			out = append(out, Due{Lease: l, Step: StepOverdue})
		}
	}
	return out
}

// StillDue reports whether the clock still calls for d in t at at. A node
// reads what is due, then takes each step; a change in between that keeps
// the token (an extend: a later end) must cancel a warning, a signal or an
// end the old limit called for.
func StillDue(t *Table, at Instant, p Policy, d Due) bool {
	for _, x := range t.Due(at, p) {
		if x.Step == d.Step && x.Lease.ID == d.Lease.ID && x.Lease.Token == d.Lease.Token {
			return true
		}
	}
	return false
}

// ended reports whether the lease's time is up at now by both the wall clock
// (ExpiresAt) and the monotonic clock (end).
func (e *entry) ended(now Instant) bool {
	return reached(now, e.ExpiresAt, e.mono.End, 0)
}
