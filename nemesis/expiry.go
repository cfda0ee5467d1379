package nemesis

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// CheckExpiry: no lease ends for its time limit before that limit, on
// the monotonic clock (a wall clock stepped forward, or a pause, must not
// cut anyone's lease short).
const CheckExpiry = "ended-early"

// earlyTolerance is how much sooner than its limit a lease may be ended by
// expiry without a violation: the store's clock reading is taken after the
// write returns, so only the clocks' own resolution is forgiven.
const earlyTolerance = 10 * time.Millisecond

// checkExpiry finds leases ended for their time before their time: a
// clock stepped forward, or a pause, must not cut anyone's lease short.
// Each lease's limit is read from the last version of it the store made
// durable before the end (its lease.MonoLimits, on the system's monotonic
// clock, which the recorder reads at each write too).
func checkExpiry(h *History) []Violation {
	last := map[string]Write{}
	var out []Violation
	for _, w := range h.Writes {
		switch w.Kind {
		case WritePut:
			last[w.Node+"/"+w.Lease.ID] = w
		case WriteEnd:
			key := w.Node + "/" + w.Ledger.LeaseID
			put, ok := last[key]
			delete(last, key)
			if !ok || put.Lease.Mono == nil {
				continue
			}
			var limit time.Duration
			switch lease.EndReason(w.Ledger.Reason) {
			case lease.EndExpired:
				limit = put.Lease.Mono.End
			case lease.EndReservationExpired:
				limit = put.Lease.Mono.Reserved
			default:
				continue
			}
			if limit == 0 || w.Mono+earlyTolerance >= limit {
				continue
			}
			out = append(out, Violation{
				Check:   CheckExpiry,
				Subject: w.Node + "/" + w.Ledger.LeaseID,
				What:    fmt.Sprintf("lease %s ended (%s) %s before its limit", w.Ledger.LeaseID, w.Ledger.Reason, (limit - w.Mono).Round(time.Millisecond)),
				History: []string{
					fmt.Sprintf("%s  %s put %s on GPUs %v, its limit %s later", span(put.Start, put.Done), put.Node, put.Lease.ID, put.Lease.GPUs, (limit - put.Mono).Round(time.Millisecond)),
					fmt.Sprintf("%s  %s end %s: %s", span(w.Start, w.Done), w.Node, w.Ledger.LeaseID, w.Ledger.Reason),
				},
			})
		}
	}
	return out
}
