package events

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
)

// BenchmarkRecordClaimEvent is what recording a claim costs the claim: the
// event made (its text) and kept in memory; the disk comes later.
func BenchmarkRecordClaimEvent(b *testing.B) {
	l := New(Config{Node: "node01"}, Deps{Store: NewMemStore(100), Notice: func(event.Notice) {}})
	l.Open()
	ls := testLease()
	ls.Session = "dibs-node01-7"
	now := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.Record(event.LeaseEvent(event.EventClaim, ls, now))
		if i%1000 == 0 {
			l.settle(l.take(), true)
		}
	}
}
