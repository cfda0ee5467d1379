package lease

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
)

// EndAction is what happens when a lease reaches its end.
type EndAction string

// End actions, from gentlest to firmest.
const (
	// ActionWarn leaves the session running and shows the lease as overdue.
	ActionWarn EndAction = "warn"
	// ActionSignal sends SIGTERM to the session, SIGKILL after a grace, then ends the lease.
	ActionSignal EndAction = "signal"
	// ActionEnd ends the lease and kills its session at once.
	ActionEnd EndAction = "end"
)

// Policy is the node's configured limits. The zero value is not useful; start
// from DefaultPolicy.
type Policy struct {
	DefaultInteractive time.Duration
	DefaultBatch       time.Duration
	MaxInteractive     time.Duration
	MaxBatch           time.Duration
	// WarnBefore is how long before the end the holder is told.
	WarnBefore time.Duration
	EndAction  EndAction
	// SignalGrace is the time between SIGTERM and SIGKILL for ActionSignal.
	SignalGrace time.Duration
	// IdleAfter is how long a leased GPU must sit without processes and under
	// IdleUtilPct before the board calls it idle.
	IdleAfter   time.Duration
	IdleUtilPct int
	// AdminGroup members may end anyone's lease.
	AdminGroup string
	// PreemptGrace is how long a preempted (or reclaimed) lease's holder has
	// to checkpoint between the signal and the end.
	PreemptGrace time.Duration
	// Pools are the limits of the pools (node tags) that have any, by tag.
	Pools Pools
	// BookAhead is how far ahead a booking may start (0: 30 days).
	BookAhead time.Duration
	// BookMaxGPUHours is how many GPU-hours one person may hold booked
	// and not yet started, cluster-wide (default DefaultBookMaxGPUHours);
	// 0 means no limit.
	BookMaxGPUHours float64
	// BookMaxLength is the longest one booking may last (0: no limit
	// beyond the kind's maximum; default DefaultBookMaxLength).
	BookMaxLength time.Duration
	// BookMaxCount is how many bookings not yet started one person may
	// hold on this node (0: DefaultBookMaxCount). Every booking travels in
	// the node's gossip, so the count bounds what one person adds to it.
	BookMaxCount int
	// ServiceGPUsPerUser bounds the GPUs one person's services hold,
	// cluster-wide (0: DefaultServiceGPUsPerUser; -1: no services).
	ServiceGPUsPerUser int
	// ServiceGPUs bounds the GPUs all services hold, cluster-wide (0: a
	// quarter of the cluster's GPUs, at least one).
	ServiceGPUs int
	// ServicePools, when set, are the pools (node tags) services may run
	// in: a service goes only to a node carrying one of them.
	ServicePools []string
	// ServiceIdleAfter is how long a service may go without a request to
	// its port and without SM use on its GPUs before it is flagged idle
	// to its owner and on the board (never reclaimed); 0 never flags one.
	ServiceIdleAfter time.Duration
}

// DefaultServiceIdleAfter is a day: an endpoint nobody asked anything
// for a whole day is worth its owner's look (its GPUs are withdrawn from
// everyone else), while a night or a quiet afternoon is not.
const DefaultServiceIdleAfter = 24 * time.Hour

// DefaultServiceGPUsPerUser is two GPUs: one inference endpoint (a 7–13B
// model on one GPU, a 70B one in 4-bit on two) per person. A service
// withdraws its GPUs for good, so the default keeps the batch half of the
// cluster whole: with the cluster bound (a quarter of the GPUs), three
// quarters of a small team's GPUs stay for training and interactive work.
const DefaultServiceGPUsPerUser = 2

// Booking defaults that protect a shared cluster: without them one person
// could book every GPU for weeks on a fresh install.
const (
	// DefaultBookMaxGPUHours is four GPUs for a day, or one for four.
	DefaultBookMaxGPUHours = 96
	// DefaultBookMaxLength is three days: a booking is a promise of the
	// future, not a way to hold GPUs for a week ahead of everyone.
	DefaultBookMaxLength = 3 * 24 * time.Hour
	// DefaultBookMaxCount bounds one person's bookings on one node.
	DefaultBookMaxCount = 16
)

// DefaultPolicy is what a node enforces with no configuration: 4 h interactive,
// 24 h batch, a week at most, warned ten minutes before the end.
func DefaultPolicy() Policy {
	return Policy{
		DefaultInteractive: 4 * time.Hour,
		DefaultBatch:       24 * time.Hour,
		MaxInteractive:     7 * 24 * time.Hour,
		MaxBatch:           7 * 24 * time.Hour,
		WarnBefore:         10 * time.Minute,
		EndAction:          ActionWarn,
		SignalGrace:        30 * time.Second,
		IdleAfter:          30 * time.Minute,
		IdleUtilPct:        5,
		PreemptGrace:       120 * time.Second,
		BookAhead:          30 * 24 * time.Hour,
		BookMaxGPUHours:    DefaultBookMaxGPUHours,
		BookMaxLength:      DefaultBookMaxLength,
		BookMaxCount:       DefaultBookMaxCount,
		ServiceIdleAfter:   DefaultServiceIdleAfter,
	}
}

// IsZero reports whether p is the zero Policy (nothing configured), which
// callers replace with DefaultPolicy. (A Policy holds a map, so it cannot
// be compared with ==.)
func (p Policy) IsZero() bool {
	return p.DefaultInteractive == 0 && p.DefaultBatch == 0 && p.MaxInteractive == 0 && p.MaxBatch == 0 &&
		p.WarnBefore == 0 && p.EndAction == "" && p.SignalGrace == 0 && p.IdleAfter == 0 && p.IdleUtilPct == 0 &&
		p.AdminGroup == "" && p.PreemptGrace == 0 && len(p.Pools) == 0 && p.BookAhead == 0 && p.BookMaxGPUHours == 0 &&
		p.BookMaxLength == 0 && p.BookMaxCount == 0
}

// Validate reports the first setting that cannot work.
func (p Policy) Validate() error {
	pos := []struct {
		name string
		d    time.Duration
	}{
		{"default_interactive", p.DefaultInteractive},
		{"default_batch", p.DefaultBatch},
		{"max_interactive", p.MaxInteractive},
		{"max_batch", p.MaxBatch},
		{"warn_before", p.WarnBefore},
		{"signal_grace", p.SignalGrace},
		{"idle_after", p.IdleAfter},
		{"preempt_grace", p.PreemptGrace},
	}
	for _, x := range pos {
		if x.d <= 0 {
			return fmt.Errorf("%s must be positive, got %s", x.name, x.d)
		}
	}
	if p.DefaultInteractive > p.MaxInteractive {
		return fmt.Errorf("default_interactive %s is longer than max_interactive %s", words.FormatDuration(p.DefaultInteractive), words.FormatDuration(p.MaxInteractive))
	}
	if p.DefaultBatch > p.MaxBatch {
		return fmt.Errorf("default_batch %s is longer than max_batch %s", words.FormatDuration(p.DefaultBatch), words.FormatDuration(p.MaxBatch))
	}
	switch p.EndAction {
	case ActionWarn, ActionSignal, ActionEnd:
	default:
		return fmt.Errorf("end_action %q is not one of warn, signal, end", p.EndAction)
	}
	if p.IdleUtilPct < 0 || p.IdleUtilPct > 100 {
		return fmt.Errorf("idle_util_pct %d is not between 0 and 100", p.IdleUtilPct)
	}
	if p.BookAhead < 0 {
		return fmt.Errorf("book_ahead must be positive, got %s", p.BookAhead)
	}
	if p.BookMaxGPUHours < 0 {
		return fmt.Errorf("book_max_gpu_hours %g is negative", p.BookMaxGPUHours)
	}
	if p.BookMaxLength < 0 {
		return fmt.Errorf("book_max_length must be positive, got %s", p.BookMaxLength)
	}
	if p.BookMaxCount < 0 {
		return fmt.Errorf("book_max_count %d is negative", p.BookMaxCount)
	}
	if p.ServiceGPUsPerUser < -1 {
		return fmt.Errorf("service_gpus_per_user %d: give a number of GPUs, or -1 for no services", p.ServiceGPUsPerUser)
	}
	if p.ServiceIdleAfter < 0 {
		return fmt.Errorf("service_idle_after %s is negative: give a duration such as 24h, or 0 to never flag a service idle", p.ServiceIdleAfter)
	}
	if p.ServiceGPUs < 0 {
		return fmt.Errorf("service_gpus %d is negative", p.ServiceGPUs)
	}
	if err := CheckTags(p.ServicePools); err != nil {
		return fmt.Errorf("service_pools: %w", err)
	}
	return nil
}

// Limits returns the default and maximum time limit for a kind.
func (p Policy) Limits(k Kind) (def, max time.Duration) {
	if k == KindBatch {
		return p.DefaultBatch, p.MaxBatch
	}
	return p.DefaultInteractive, p.MaxInteractive
}
