package queue

import "github.com/dibs-gpu/dibs/lease"

// Store keeps a node's leases and the queue entries submitted at it
// durable: a lease.Store that keeps entries too, with the same promise
// (every method returns once the change is on disk). Package store is
// the bbolt one; store/storetest the in-memory one with faults.
type Store interface {
	lease.Store
	// PutEntry writes a queue entry submitted here and raises the queue
	// sequence to seq, in one transaction.
	PutEntry(e QueueEntry, seq uint64) error
	// DeleteEntry forgets a queue entry (started for good, or cancelled).
	DeleteEntry(id string) error
	// Entries returns this node's queue entries and the highest sequence used.
	Entries() ([]QueueEntry, uint64, error)
}
