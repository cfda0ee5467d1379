package nemesis

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// recordedStore is a node's fake disk with every durable write written
// down in the history. Writes that fail (a fault, a crash) are not
// recorded: they did not happen.
type recordedStore struct {
	*storetest.Store
	node string
	boot int
	rec  *recorder
	// mono is the system's monotonic clock, not the node's (which a pause
	// freezes): the truth a lease's limits are judged against.
	mono func() time.Duration
}

var _ queue.Store = (*recordedStore)(nil)

func (s *recordedStore) write(w Write, do func() error) error {
	w.Node, w.Boot = s.node, s.boot
	w.Start = s.rec.now()
	if err := do(); err != nil {
		return err
	}
	w.Done, w.Mono = s.rec.now(), s.mono()
	s.rec.write(w)
	return nil
}

// Put implements lease.Store.
func (s *recordedStore) Put(l lease.Lease) error {
	return s.write(Write{Kind: WritePut, Lease: l}, func() error { return s.Store.Put(l) })
}

// End implements lease.Store.
func (s *recordedStore) End(id string, e lease.LedgerEntry) error {
	return s.write(Write{Kind: WriteEnd, Ledger: e}, func() error { return s.Store.End(id, e) })
}

// PutEntry implements lease.Store.
func (s *recordedStore) PutEntry(e queue.QueueEntry, seq uint64) error {
	return s.write(Write{Kind: WritePutEntry, Entry: e}, func() error { return s.Store.PutEntry(e, seq) })
}

// DeleteEntry implements lease.Store.
func (s *recordedStore) DeleteEntry(id string) error {
	return s.write(Write{Kind: WriteDeleteEntry, EntryID: id}, func() error { return s.Store.DeleteEntry(id) })
}
