// Package doctor is the arithmetic of `dibs doctor`: it turns what the
// agents report — their health, their ledgers, the samples they take of
// their GPUs — into checks with a fix each, and into the figures and the
// verdict of "have we outgrown dibs?". It is pure; the agents gather, the
// CLI prints.
package doctor

import (
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Sample is one look at a node's GPUs: how many computed, sat held but
// idle, were free, had someone's process without a lease (squatted), or
// could not be read; and whether work waited in the cluster's queue.
type Sample struct {
	GPUs     int
	Busy     int
	Idle     int
	Free     int
	Squatted int
	Unknown  int
	// Waiting: the queue had work that had not started.
	Waiting bool
}

// Observe judges a node's GPUs now. A GPU under a lease (not a gang's
// reservation) is idle when quiet (no process, utilisation under the
// idle threshold: quiet holds when it went quiet), else busy; a GPU with
// no lease is free, or busy when something runs on it anyway. A GPU with a
// process that is not its holder's (or with no lease at all) also counts
// as squatted. A GPU with an error is unknown.
func Observe(snap nodeprobe.Snapshot, leases []lease.Lease, quiet map[int]time.Time, waiting bool, now time.Time, p lease.Policy) Sample {
	s := Sample{GPUs: len(snap.GPUs), Waiting: waiting}
	var committed []lease.Lease
	for _, l := range leases {
		if l.ReservedUntil.IsZero() {
			committed = append(committed, l)
		}
	}
	held := map[int]bool{}
	for _, l := range committed {
		for _, g := range l.GPUs {
			held[g] = true
		}
	}
	judged := lease.Judge(snap, committed, nil, now, p)
	for _, g := range snap.GPUs {
		_, isQuiet := quiet[g.Index]
		switch {
		case g.Error != "":
			s.Unknown++
			continue
		case held[g.Index] && isQuiet:
			s.Idle++
		case held[g.Index] || len(g.Processes) > 0:
			s.Busy++
		default:
			s.Free++
		}
		if judged[g.Index].Has(lease.FlagSquatted) {
			s.Squatted++
		}
	}
	return s
}

// Bucket sums a node's samples over one hour, in seconds: each sample
// counts for the time since the one before (at most MaxGap), so the
// figures do not depend on how often the agent looked.
type Bucket struct {
	Hour time.Time `json:"hour"`
	// Seconds observed, and GPU-seconds by state.
	Seconds     int64 `json:"seconds"`
	BusySec     int64 `json:"busy_gpu_seconds"`
	IdleSec     int64 `json:"idle_gpu_seconds"`
	FreeSec     int64 `json:"free_gpu_seconds"`
	SquattedSec int64 `json:"squatted_gpu_seconds,omitempty"`
	UnknownSec  int64 `json:"unknown_gpu_seconds,omitempty"`
	// WaitingSec: seconds with work waiting in the queue; WaitingIdleSec:
	// of those, seconds with at least one GPU here held idle, and
	// WaitingIdleGPUSec the GPU-seconds held idle meanwhile.
	WaitingSec        int64 `json:"waiting_seconds,omitempty"`
	WaitingIdleSec    int64 `json:"waiting_idle_seconds,omitempty"`
	WaitingIdleGPUSec int64 `json:"waiting_idle_gpu_seconds,omitempty"`
}

// MaxGap is the longest time one sample counts for: after an agent was
// down, the time it did not look is not made up.
const MaxGap = 5 * time.Minute

// Keep is how long a node keeps its buckets: the longest window `dibs
// doctor` looks back over.
const Keep = 90 * 24 * time.Hour

// Series is a node's buckets, oldest first. Not safe for concurrent use.
type Series struct {
	Buckets []Bucket `json:"buckets"`
	// Last is when the last sample was taken.
	Last time.Time `json:"last,omitzero"`
}

// Add counts a sample taken at now for the time since the last one (at
// most MaxGap; nothing for the first), and forgets buckets older than Keep.
func (s *Series) Add(x Sample, now time.Time) {
	dt := MaxGap
	if !s.Last.IsZero() {
		dt = min(now.Sub(s.Last), MaxGap)
	} else {
		dt = 0
	}
	s.Last = now
	if dt <= 0 {
		return
	}
	secs := int64(dt.Round(time.Second) / time.Second)
	hour := now.UTC().Truncate(time.Hour)
	if n := len(s.Buckets); n == 0 || !s.Buckets[n-1].Hour.Equal(hour) {
		s.Buckets = append(s.Buckets, Bucket{Hour: hour})
	}
	b := &s.Buckets[len(s.Buckets)-1]
	b.Seconds += secs
	b.BusySec += secs * int64(x.Busy)
	b.IdleSec += secs * int64(x.Idle)
	b.FreeSec += secs * int64(x.Free)
	b.SquattedSec += secs * int64(x.Squatted)
	b.UnknownSec += secs * int64(x.Unknown)
	if x.Waiting {
		b.WaitingSec += secs
		if x.Idle > 0 {
			b.WaitingIdleSec += secs
			b.WaitingIdleGPUSec += secs * int64(x.Idle)
		}
	}
	cut := now.Add(-Keep)
	i := 0
	for i < len(s.Buckets) && s.Buckets[i].Hour.Before(cut) {
		i++
	}
	if i > 0 {
		s.Buckets = slices.Delete(s.Buckets, 0, i)
	}
}

// Since returns the buckets of hours that end after t.
func (s *Series) Since(t time.Time) []Bucket {
	i := 0
	for i < len(s.Buckets) && !s.Buckets[i].Hour.Add(time.Hour).After(t) {
		i++
	}
	return slices.Clone(s.Buckets[i:])
}

// MaxBuckets bounds the buckets one node sends: Keep of hours.
const MaxBuckets = int(Keep / time.Hour)

// Validate checks a bucket from another agent: whole hours, counts that
// fit the hour for up to words.MaxGPUsPerNode GPUs.
func (b *Bucket) Validate() error {
	if !words.ValidSince(b.Hour) || !b.Hour.Equal(b.Hour.Truncate(time.Hour)) {
		return fmt.Errorf("bucket hour %s is not a whole hour", b.Hour.Format(time.RFC3339))
	}
	const hour = int64(time.Hour / time.Second)
	if b.Seconds < 0 || b.Seconds > hour+int64(MaxGap/time.Second) {
		return fmt.Errorf("bucket %s holds %d seconds", b.Hour.Format(time.RFC3339), b.Seconds)
	}
	gpuMax := b.Seconds * words.MaxGPUsPerNode
	for _, v := range []int64{b.BusySec, b.IdleSec, b.FreeSec, b.SquattedSec, b.UnknownSec, b.WaitingIdleGPUSec} {
		if v < 0 || v > gpuMax {
			return fmt.Errorf("bucket %s has GPU-seconds out of range", b.Hour.Format(time.RFC3339))
		}
	}
	if b.WaitingSec < 0 || b.WaitingSec > b.Seconds || b.WaitingIdleSec < 0 || b.WaitingIdleSec > b.WaitingSec {
		return fmt.Errorf("bucket %s has waiting seconds out of range", b.Hour.Format(time.RFC3339))
	}
	return nil
}
