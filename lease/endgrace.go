package lease

import (
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// EndGrace is how long after a lease ends its holder's processes on its
// GPUs are taken for the lease's own work still exiting, not for squatters.
// Ending a lease ends its tmux session, but a CUDA process takes from
// hundreds of milliseconds to a few seconds to exit and free the GPU; the
// once-a-second probe would otherwise call the holder a squatter of the GPU
// they just gave back, and notify about it. 30 s covers a slow exit (a large
// model freeing its memory) and is short enough that a process left running
// on purpose is soon flagged as before.
const EndGrace = 30 * time.Second

// WithinEndGrace keeps, in a new slice, the ledger entries of leases that
// ended within EndGrace of now: what a node passes to JudgeWithEnded. A node
// trims its list with it each time it records an end, so the list stays as
// short as the ends of the last EndGrace.
func WithinEndGrace(ended []LedgerEntry, now time.Time) []LedgerEntry {
	var out []LedgerEntry
	for _, e := range ended {
		if inEndGrace(e.End, now) {
			out = append(out, e)
		}
	}
	return out
}

// inEndGrace reports whether a lease that ended at end is within EndGrace
// of now. A wall clock stepped back a little must not end the grace early,
// so the distance counts either way.
func inEndGrace(end, now time.Time) bool {
	d := now.Sub(end)
	return d < EndGrace && d > -EndGrace
}

// exiting reports whether pr, on gpu, may be the work of one of the ended
// leases still exiting: a lease on gpu that ended within EndGrace of now,
// held by pr's owner. An uncommitted reservation ran nothing, so it excuses
// nothing.
func exiting(ended []LedgerEntry, gpu int, pr nodeprobe.Process, now time.Time) bool {
	for i := range ended {
		e := &ended[i]
		if !e.Reserved && inEndGrace(e.End, now) && slices.Contains(e.GPUs, gpu) && ownedByUser(pr, e.UID, e.User) {
			return true
		}
	}
	return false
}
