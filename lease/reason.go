package lease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EndReason says why a lease ended. It is written to the ledger, shown to
// the holder and, for a queued run, read by the entry's origin to tell a
// finished run from a failed one — so every part of dibs spells it the same
// way, from here.
type EndReason string

// Why leases end.
const (
	// EndReleased: the holder released it.
	EndReleased EndReason = "released"
	// EndByAdmin: an admin ended someone else's lease.
	EndByAdmin EndReason = "ended-by-admin"
	// EndExpired: it reached its time limit and the end action ended it.
	EndExpired EndReason = "expired"
	// EndSessionEnded: its session ended with no exit status recorded (an
	// interactive shell, or a run started without a status file).
	EndSessionEnded EndReason = "session-ended"
	// EndSessionFailed: its session could not be started.
	EndSessionFailed EndReason = "session-failed"
	// EndUserGone: its holder's account no longer exists on the node.
	EndUserGone EndReason = "user-gone"
	// EndReservationExpired: a gang reservation was never committed.
	EndReservationExpired EndReason = "reservation-expired"
	// EndLost: the lease's node left for good, or stayed silent past the
	// grace (SchedConfig.LostAfter); its rank is counted lost.
	EndLost EndReason = "lost"
	// EndUnbooked: a booking was withdrawn before it started.
	EndUnbooked EndReason = "unbooked"
	// EndBookingLapsed: a booking's whole time passed before its node
	// could start it (the agent was down).
	EndBookingLapsed EndReason = "booking-lapsed"
	// EndBooked: the lease was still there, past its end, when a booking
	// of its GPUs began.
	EndBooked EndReason = "booked"
	// EndRebooted: the lease's node rebooted (the kernel's boot id changed
	// while its agent was down), so the session it held died with every
	// other process of the node. A run that ends so failed: --requeue puts
	// it back in the queue, and its gang fails as after a node loss.
	EndRebooted EndReason = "node-rebooted"
	// EndCrashLoop: a service restarted too often in a short while
	// (service.Rules): stopped, its log kept, its owner told.
	EndCrashLoop EndReason = "crash-loop"
	// EndMovedAway: a service's copy on a node that was lost past the
	// grace, ended when the node returned because the replica runs
	// elsewhere now (agent/svcmove.go). The replica goes on: this end
	// leaves no stop behind (ServiceStop).
	EndMovedAway EndReason = "moved-away"
)

// ExitPrefix begins the reason of a run whose command exited (ExitReason);
// a notice tells such an end from the others by it.
const ExitPrefix = "exit-"

const preemptPrefix = "preempted-"

// ExitReason is the end of a run whose command exited with code.
func ExitReason(code int) EndReason { return EndReason(ExitPrefix + strconv.Itoa(code)) }

// PreemptedReason is the end of a lease reclaimed for why (PreemptQuota,
// PreemptIdle, or "gang" when the other ranks of its gang stopped).
func PreemptedReason(why string) EndReason { return EndReason(preemptPrefix + why) }

// ExitCode returns the exit status an ExitReason carries.
func (r EndReason) ExitCode() (int, bool) {
	s, ok := strings.CutPrefix(string(r), ExitPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Failed reports whether a run that ended so failed, for --requeue and for
// stopping a gang's other ranks. A run ends well when its command exited 0,
// when its holder released it, or at its time limit; an interactive run
// (a shell, no command) has no exit status, so its session ending is normal.
func (r EndReason) Failed(interactive bool) bool {
	switch r {
	case EndReleased, EndExpired, EndBooked, ExitReason(0), PreemptedReason(PreemptOverdue):
		// A lease ended past its time limit for someone waiting ended as
		// one at its limit does.
		return false
	case EndSessionEnded:
		return !interactive
	}
	return true
}

// RunEnd is how a queued run's lease ended, as its origin reads it: a run
// preempted for someone else (quota, idle reclaim) that failed within the
// grace — its command died of the signal, say — ended because it was
// preempted, so it goes back in the queue (QueueEntry.AfterPreempt); one
// that finished well finished.
func (l Lease) RunEnd(reason EndReason) EndReason {
	interactive := l.Session == ""
	if l.PreemptedAt.IsZero() || (l.PreemptReason != PreemptQuota && l.PreemptReason != PreemptIdle) || !reason.Failed(interactive) {
		return reason
	}
	return PreemptedReason(l.PreemptReason)
}

// EndedRun remembers, for a while, how a queued run's lease ended, so the
// entry's origin can tell a failed gang rank from a finished one. The node
// that held the lease publishes it; origins and the scheduler read it.
type EndedRun struct {
	// Entry is the attempt's key (QueueEntry.Key).
	Entry  string    `json:"entry"`
	Lease  string    `json:"lease"`
	Gang   string    `json:"gang,omitempty"`
	Reason EndReason `json:"reason"`
	At     time.Time `json:"at"`
	// Reserved: it ended as an uncommitted gang reservation, so nothing ran.
	Reserved bool `json:"reserved,omitempty"`
}

// EndedRunKeep is how long a node remembers its ended queued runs: long
// enough for an origin that was briefly away to hear of them.
const EndedRunKeep = 10 * time.Minute

// RememberEnded appends run to runs and forgets those older than
// EndedRunKeep at now.
// A service's stop (ServiceStop) is kept ServiceStopKeep, and at most
// MaxServiceStops of them.
func RememberEnded(runs []EndedRun, run EndedRun, now time.Time) []EndedRun {
	out := make([]EndedRun, 0, len(runs)+1)
	stops := 0
	for _, x := range append(slices.Clone(runs), run) {
		if strings.HasPrefix(x.Entry, serviceStopPrefix) {
			stops++
		}
	}
	for _, x := range runs {
		keep := EndedRunKeep
		if strings.HasPrefix(x.Entry, serviceStopPrefix) {
			if stops > MaxServiceStops {
				stops--
				continue // the oldest stops go first
			}
			keep = ServiceStopKeep
		}
		if now.Sub(x.At) <= keep {
			out = append(out, x)
		}
	}
	return append(out, run)
}

// Words says why a lease ended, for people, as what follows "ended".
func (r EndReason) Words() string {
	if code, ok := r.ExitCode(); ok {
		if code == 0 {
			return "when its command finished (exit 0)"
		}
		return fmt.Sprintf("when its command failed (exit %d)", code)
	}
	switch r {
	case EndReleased:
		return "by its holder"
	case EndByAdmin:
		return "by an admin"
	case EndExpired:
		return "at its time limit"
	case EndSessionEnded:
		return "when its session ended"
	case EndSessionFailed:
		return "because its session could not start"
	case EndUserGone:
		return "because its holder's account is gone"
	case EndReservationExpired:
		return "because the gang reservation was never committed"
	case EndLost:
		return "because its node went down"
	case EndUnbooked:
		return "when its booking was withdrawn"
	case EndBookingLapsed:
		return "because its booked time passed while its node could not start it"
	case EndBooked:
		return "because a booking of its GPUs began while it was past its end"
	case EndRebooted:
		return "because its node rebooted (its session died with the node)"
	case EndCrashLoop:
		return "because its service crash-looped (restarted too often): its log is kept"
	case EndMovedAway:
		return "because its service was moved to another node while this one was lost"
	}
	if why, ok := strings.CutPrefix(string(r), preemptPrefix); ok {
		return "after its grace (reclaimed: " + why + ")"
	}
	return "(" + string(r) + ")"
}

// Why a lease is reclaimed (Reclaim.Reason, Lease.PreemptReason).
const (
	// PreemptQuota: the lease is borrowed and someone within their quota
	// waits for its GPUs.
	PreemptQuota = "quota"
	// PreemptIdle: the lease has been idle past SchedConfig.IdleReclaimAfter
	// and someone waits for its GPUs.
	PreemptIdle = "idle"
	// PreemptOverdue: the lease is past its end (end_action "warn" keeps
	// it while nobody waits) and someone waits for its GPUs: it is
	// signalled (SIGTERM) and ended after the grace, as end_action
	// "signal" would have done.
	PreemptOverdue = "overdue"
	// PreemptGang: another rank of its gang failed or was lost, so this
	// rank is stopped too (all or nothing).
	PreemptGang = "gang"
)
