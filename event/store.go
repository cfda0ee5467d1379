package event

import "time"

// EventRider is a store that writes events in the transactions it makes
// anyway: a lease change's fsync carries the events recorded since the
// last one, so keeping the log costs a claim no fsync of its own. take
// hands over the events waiting; done says whether they were written (if
// not, they wait for the next transaction).
type EventRider interface {
	RideEvents(take func() []Event, done func(evs []Event, written bool))
}

// EventStore keeps a node's event log and its users' notification
// settings, durable like the rest (package store's bbolt file has both; a
// store without them gets an in-memory log in the agent). Implementations
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
