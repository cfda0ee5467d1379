package queue

import "github.com/dibs-gpu/dibs/lease"

// Published is e as its origin gossips it: the job's public part only.
func (e QueueEntry) Published() QueueEntry {
	if e.Job.Private() {
		e.Job = e.Job.Public()
	}
	return e
}

// ShownTo is e as c may see it: whole for its holder and admins, the job's
// public part for everyone else.
func (e QueueEntry) ShownTo(c lease.Caller) QueueEntry {
	if c.SeesJobOf(e.User) {
		return e
	}
	return e.Published()
}
