package lease

import "time"

// LedgerEntry is one ended lease, kept on its node so usage and fair-share
// survive restarts.
type LedgerEntry struct {
	LeaseID    string    `json:"lease_id"`
	Node       string    `json:"node"`
	User       string    `json:"user"`
	UID        int       `json:"uid"`
	GPUs       []int     `json:"gpus"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	GPUSeconds float64   `json:"gpu_seconds"`
	// Reason says why it ended: released, session-ended, expired, admin, ...
	Reason string `json:"reason"`
	// By is who ended it when that was not the holder (an admin).
	By string `json:"by,omitempty"`
}

// Ended builds the ledger entry for a lease ending at end.
func Ended(l Lease, end time.Time, reason, by string) LedgerEntry {
	secs := end.Sub(l.StartedAt).Seconds()
	if secs < 0 {
		secs = 0
	}
	return LedgerEntry{
		LeaseID: l.ID, Node: l.Node, User: l.User, UID: l.UID, GPUs: l.GPUs,
		Start: l.StartedAt, End: end.Round(0), GPUSeconds: secs * float64(len(l.GPUs)),
		Reason: reason, By: by,
	}
}

// Store keeps a node's leases durable. Every method returns only after the
// change is on disk (fsynced), so the agent may acknowledge once it returns.
// A write that returns an error must not be acknowledged; later reads do not
// show it. An *Error with CodeUnavailable means the disk cannot take writes
// now (full, read-only) while reads still work; any other error is the disk
// failing or the file damaged. Implementations are safe for concurrent use.
// lease/store is the bbolt one; lease/store/storetest is an in-memory one
// with injectable faults, for tests.
type Store interface {
	// Load returns every lease and the highest token ever granted.
	Load() (leases []Lease, lastToken uint64, err error)
	// Put writes a granted or changed lease and raises the token counter to
	// its token, in one transaction.
	Put(l Lease) error
	// End deletes a lease and appends its ledger entry, in one transaction.
	End(id string, e LedgerEntry) error
	// Ledger returns the entries that ended at or after since.
	Ledger(since time.Time) ([]LedgerEntry, error)
	// PutEntry writes a queue entry submitted here and raises the queue
	// sequence to seq, in one transaction.
	PutEntry(e QueueEntry, seq uint64) error
	// DeleteEntry forgets a queue entry (started for good, or cancelled).
	DeleteEntry(id string) error
	// Entries returns this node's queue entries and the highest sequence used.
	Entries() ([]QueueEntry, uint64, error)
	Close() error
}

// EventRider is a store that writes events in the transactions it makes
// anyway: a lease change's fsync carries the events recorded since the
// last one, so keeping the log costs a claim no fsync of its own. take
// hands over the events waiting; done says whether they were written (if
// not, they wait for the next transaction).
type EventRider interface {
	RideEvents(take func() []Event, done func(evs []Event, written bool))
}

// EventStore keeps a node's event log and its users' notification
// settings, durable like the rest (lease/store's bbolt file has both; a
// Store without them gets an in-memory log in the agent). Implementations
// are safe for concurrent use.
type EventStore interface {
	// AppendEvents writes events, each with its sequence set, in one
	// transaction.
	AppendEvents(evs []Event) error
	// Events returns the events f matches, oldest first, at most limit;
	// more reports that others matched past the limit.
	Events(f EventFilter, limit int) (evs []Event, more bool, err error)
	// LastEventSeq is the highest sequence written, 0 for none.
	LastEventSeq() (uint64, error)
	// PruneEvents forgets at most max events from before t, oldest first,
	// and says how many it forgot.
	PruneEvents(before time.Time, max int) (int, error)
	// PutSetting keeps a user's notification setting (replacing theirs).
	PutSetting(s NotifySetting) error
	// DeleteSetting forgets a user's setting; forgetting none is no error.
	DeleteSetting(user string) error
	// Settings are every user's settings kept here.
	Settings() ([]NotifySetting, error)
}
