package queue

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Defaults of SchedConfig, SLURM multifactor style.
const (
	DefaultHalfLife          = 7 * 24 * time.Hour
	DefaultWeightFairShare   = 1000
	DefaultWeightAge         = 100
	DefaultMaxAge            = 7 * 24 * time.Hour
	DefaultIdleReclaimAfter  = 30 * time.Minute
	DefaultReservationTTL    = 30 * time.Second
	DefaultPreemptGrace      = 2 * time.Minute
	DefaultLostAfter         = 5 * time.Minute
	DefaultRequeueBackoff    = 10 * time.Second
	DefaultMaxRequeueBackoff = 5 * time.Minute
	// DefaultMaxQueuedPerUser is more than a team of a few people queues
	// on 4–32 GPUs, and few enough that one person's entries stay a small
	// part of their origin's gossip.
	DefaultMaxQueuedPerUser = 64
)

// WithDefaults fills every unset setting. The two weights are filled only
// when both are zero (the zero config), so setting one of them alone turns
// the other factor off, as a zero weight does in SLURM.
func (c SchedConfig) WithDefaults() SchedConfig {
	if c.HalfLife <= 0 {
		c.HalfLife = DefaultHalfLife
	}
	if c.WeightFairShare == 0 && c.WeightAge == 0 {
		c.WeightFairShare, c.WeightAge = DefaultWeightFairShare, DefaultWeightAge
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.IdleReclaimAfter <= 0 {
		c.IdleReclaimAfter = DefaultIdleReclaimAfter
	}
	if c.ReservationTTL <= 0 {
		c.ReservationTTL = DefaultReservationTTL
	}
	if c.PreemptGrace <= 0 {
		c.PreemptGrace = DefaultPreemptGrace
	}
	if c.LostAfter <= 0 {
		c.LostAfter = DefaultLostAfter
	}
	if c.RequeueBackoff <= 0 {
		c.RequeueBackoff = DefaultRequeueBackoff
	}
	if c.MaxRequeueBackoff <= 0 {
		c.MaxRequeueBackoff = max(DefaultMaxRequeueBackoff, c.RequeueBackoff)
	}
	if c.MaxQueuedPerUser <= 0 {
		c.MaxQueuedPerUser = DefaultMaxQueuedPerUser
	}
	return c
}

// DecayedUsage is each user's GPU-seconds with older use weighing less, so
// fair-share forgets a heavy week after a few half-lives. An ended lease
// (ledger) counts its GPU-seconds halved for every halfLife since it ended; a
// running lease counts its GPU-seconds so far, undecayed. Gang reservations
// are not use. A lease found both in the ledger and among the active ones (a
// gossip race around its end) counts once, from the ledger. halfLife <= 0
// means no decay.
//
// Sums are kept in integer milli-GPU-seconds so the result does not depend
// on the order of the inputs: every agent computes the same usage, and with
// it the same queue order.
func DecayedUsage(ledger []lease.LedgerEntry, active []lease.Lease, now time.Time, halfLife time.Duration) Usage {
	running := make(map[string]bool, len(active))
	for i := range active {
		running[active[i].ID] = false
	}
	milli := make(map[string]int64)
	for i := range ledger {
		e := &ledger[i]
		if _, ok := running[e.LeaseID]; ok {
			running[e.LeaseID] = true // ended: the ledger has it
		}
		if e.User == "" || !(e.GPUSeconds > 0) {
			continue
		}
		milli[e.User] += toMilli(e.GPUSeconds * decay(now.Sub(e.End), halfLife))
	}
	for i := range active {
		l := &active[i]
		if l.User == "" || !l.ReservedUntil.IsZero() || l.Booked || running[l.ID] {
			continue
		}
		if secs := now.Sub(l.StartedAt).Seconds(); secs > 0 {
			milli[l.User] += toMilli(secs * l.Weight())
		}
	}
	out := make(Usage, len(milli))
	for u, m := range milli {
		out[u] = float64(m) / 1000
	}
	return out
}

// WindowUsage is each user's raw GPU-seconds within [from, now], what
// `dibs usage` shows beside the fair-share factor: ended leases (ledger) and
// running ones, each clipped to the window, counted once as in DecayedUsage.
func WindowUsage(ledger []lease.LedgerEntry, active []lease.Lease, from, now time.Time) Usage {
	overlap := func(start, end time.Time) float64 {
		if start.Before(from) {
			start = from
		}
		if end.After(now) {
			end = now
		}
		return max(end.Sub(start).Seconds(), 0)
	}
	running := make(map[string]bool, len(active))
	for i := range active {
		running[active[i].ID] = false
	}
	milli := make(map[string]int64)
	for i := range ledger {
		e := &ledger[i]
		if _, ok := running[e.LeaseID]; ok {
			running[e.LeaseID] = true
		}
		if e.User == "" || !(e.GPUSeconds > 0) {
			continue
		}
		secs := e.GPUSeconds
		if d := e.End.Sub(e.Start).Seconds(); d > 0 {
			secs *= overlap(e.Start, e.End) / d
		} else if e.End.Before(from) || e.End.After(now) {
			secs = 0
		}
		milli[e.User] += toMilli(secs)
	}
	for i := range active {
		l := &active[i]
		if l.User == "" || !l.ReservedUntil.IsZero() || l.Booked || running[l.ID] {
			continue
		}
		milli[l.User] += toMilli(overlap(l.StartedAt, now) * l.Weight())
	}
	out := make(Usage, len(milli))
	for u, m := range milli {
		out[u] = float64(m) / 1000
	}
	return out
}

// decay is the weight of use that ended age ago: 2^(-age/halfLife).
func decay(age, halfLife time.Duration) float64 {
	if halfLife <= 0 || age <= 0 {
		return 1
	}
	return math.Exp2(-float64(age) / float64(halfLife))
}

func toMilli(secs float64) int64 {
	const max = float64(1 << 52)
	m := math.Round(secs * 1000)
	if !(m > 0) {
		return 0
	}
	return int64(min(m, max))
}

// FairShareFactor is SLURM's classic fair-share factor 2^(-U/S): U is the
// user's part of all decayed usage, S the user's part of all shares (every
// user named in cfg.Shares or in usage, each 1 unless configured). A user
// who used exactly their share gets 0.5, one who used nothing gets 1, and a
// user whose share is configured as zero (or less) gets 0: they run on age
// alone.
func FairShareFactor(user string, usage Usage, cfg SchedConfig) float64 {
	fs := newFairShare(usage, cfg)
	return fs.factor(user)
}

// Priority is an entry's place in the queue, SLURM multifactor style:
// WeightFairShare × fair-share factor + WeightAge × min(wait/MaxAge, 1).
// Waiting raises it, so a light user's request is not starved by a stream of
// even lighter ones.
func Priority(e QueueEntry, usage Usage, now time.Time, cfg SchedConfig) float64 {
	cfg = cfg.WithDefaults()
	fs := newFairShare(usage, cfg)
	return priority(&e, fs.factor(e.User), now, cfg)
}

func priority(e *QueueEntry, fairShare float64, now time.Time, cfg SchedConfig) float64 {
	age := 0.0
	if wait := now.Sub(e.SubmittedAt); wait > 0 {
		age = min(float64(wait)/float64(cfg.MaxAge), 1)
	}
	return cfg.WeightFairShare*fairShare + cfg.WeightAge*age
}

// fairShare holds the totals the factor is relative to, computed once per
// pass.
type fairShare struct {
	usage       Usage
	shares      map[string]float64
	total       float64
	totalShares float64
}

func newFairShare(usage Usage, cfg SchedConfig) fairShare {
	fs := fairShare{usage: usage, shares: cfg.Shares}
	// Summed in name order: float addition is not associative, and every
	// agent must rank the queue the same way.
	users := slices.Collect(maps.Keys(usage))
	for u := range cfg.Shares {
		if _, ok := usage[u]; !ok {
			users = append(users, u)
		}
	}
	slices.SortFunc(users, cmp.Compare[string])
	for _, u := range users {
		if x := usage[u]; x > 0 {
			fs.total += x
		}
		fs.totalShares += fs.share(u)
	}
	return fs
}

func (fs *fairShare) share(user string) float64 {
	s, ok := fs.shares[user]
	if !ok {
		return 1
	}
	if !(s > 0) {
		return 0
	}
	return s
}

func (fs *fairShare) factor(user string) float64 {
	s := fs.share(user)
	if s <= 0 {
		return 0
	}
	u := fs.usage[user]
	if !(u > 0) || !(fs.total > 0) {
		return 1
	}
	// A user with usage is among the users summed, so totalShares >= s > 0.
	return math.Exp2(-(u / fs.total) / (s / fs.totalShares))
}

// DailyUsage is WindowUsage split at cuts (ascending; the first is the
// window's start): one Usage per span, [cuts[i], cuts[i+1]) and the last
// to now, each lease counted in each day by the part of it in that day.
// `dibs usage --chart` draws it, a bar per person per day. The spans add
// up to WindowUsage(ledger, active, cuts[0], now).
func DailyUsage(ledger []lease.LedgerEntry, active []lease.Lease, cuts []time.Time, now time.Time) []Usage {
	out := make([]Usage, len(cuts))
	for i, from := range cuts {
		end := now
		if i+1 < len(cuts) && cuts[i+1].Before(now) {
			end = cuts[i+1]
		}
		if !end.After(from) {
			out[i] = Usage{}
			continue
		}
		u := WindowUsage(ledger, active, from, end)
		for user, secs := range u {
			if secs == 0 { // a running lease that began after this day
				delete(u, user)
			}
		}
		out[i] = u
	}
	return out
}
