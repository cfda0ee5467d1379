package lease

// What of a job travels and shows. A job's command, working directory and
// carried environment are its holder's own: a command line may hold an API
// key, a directory a project's name. They stay with the nodes that need
// them (the origin of a queued run, which hands them to the scheduler that
// places it; the node of a booked run, which starts it), and are shown only
// to the holder and admins. Everyone else, and every other node's gossip,
// gets the job's public part: its session name, whether it wraps torchrun,
// and whether it runs a command at all (Kept).

// SeesJobOf reports whether c may see the command, directory and
// environment of a job held by user: its holder (by name, the identity
// that holds across nodes) and admins.
func (c Caller) SeesJobOf(user string) bool { return c.Admin || c.User != "" && c.User == user }

// Published is l as its node gossips it: a booked run's job reduced to its
// public part. A service's job travels whole: every node holds its
// definition, so the service can be started elsewhere when its node is
// lost (bounded by service.MaxDefBytes and service.MaxPerUser).
func (l Lease) Published() Lease {
	if l.Job.Private() && l.Service == nil {
		l.Job = l.Job.Public()
	}
	return l
}

// ShownTo is l as c may see it: whole for its holder and admins, a booked
// run's public part for everyone else.
func (l Lease) ShownTo(c Caller) Lease {
	if c.SeesJobOf(l.User) {
		return l
	}
	if l.Job.Private() {
		l.Job = l.Job.Public()
	}
	return l
}
