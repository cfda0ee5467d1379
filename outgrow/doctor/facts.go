package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// The rules that turn what an agent gathers of its node (its leases, its
// GPUs as judged, its users' tmux sessions) into the facts of its Report.
// The agent gathers; these decide what is overdue, squatted, stray or lost.

// Bounds on what one fact lists.
const (
	// maxSquatNames bounds the users and the processes a SquatFact names.
	maxSquatNames = 16
	// SessionUsers bounds how many users' tmux servers a report lists.
	SessionUsers = 64
	// lostAfter is how long a lease may be without its session before a
	// report names it: the node ends those itself soon after.
	lostAfter = time.Minute
)

// LeaseFacts are a node's overdue leases and squatted GPUs at now, from
// its leases, its GPUs and how each was judged. squatSince says since when
// a GPU has been seen squatted (zero: not known); nil knows none. A
// booking's reservation is neither overdue nor a GPU's holder.
func LeaseFacts(leases []lease.Lease, gpus []nodeprobe.GPU, judged map[int]lease.Judgement, now time.Time, squatSince func(gpu int) time.Time) (overdue []LeaseFact, squatted []SquatFact) {
	holder := map[int]lease.Lease{}
	for _, l := range leases {
		if !l.ReservedUntil.IsZero() {
			continue
		}
		for _, g := range l.GPUs {
			holder[g] = l
		}
		if l.ExpiresAt.Before(now) {
			overdue = append(overdue, LeaseFact{Lease: l.ID, User: l.User, GPUs: l.GPUs, Session: l.Session, For: now.Sub(l.ExpiresAt)})
		}
	}
	for _, g := range gpus {
		j := judged[g.Index]
		if !j.Has(lease.FlagSquatted) {
			continue
		}
		q := SquatFact{GPU: g.Index}
		if l, ok := holder[g.Index]; ok {
			q.Holder = l.User
		}
		for _, p := range j.Squatters {
			u := p.User
			if u == "" {
				u = fmt.Sprintf("uid %d", p.UID)
			}
			if !slices.Contains(q.Users, u) && len(q.Users) < maxSquatNames {
				q.Users = append(q.Users, u)
			}
			if len(q.PIDs) < maxSquatNames {
				q.PIDs = append(q.PIDs, p.PID)
			}
		}
		if squatSince != nil {
			if since := squatSince(g.Index); !since.IsZero() {
				q.For = max(now.Sub(since), 0)
			}
		}
		squatted = append(squatted, q)
	}
	return overdue, squatted
}

// SessionOwners are the users whose tmux sessions a report looks at: those
// holding a lease now and those who held one in the week (weekly, the
// users of the node's tally of the week), sorted, at most SessionUsers.
func SessionOwners(leases []lease.Lease, weekly Tally) []string {
	users := map[string]bool{}
	for _, l := range leases {
		users[l.User] = true
	}
	for u := range weekly.UserHours {
		users[u] = true
	}
	delete(users, "")
	names := slices.Sorted(mapKeys(users))
	return names[:min(len(names), SessionUsers)]
}

// SessionFacts are dibs's tmux sessions no lease holds (named dibs-…) and
// the leases whose session is gone (for more than lostAfter), from the
// sessions listed per user (a user not listed is not judged).
func SessionFacts(leases []lease.Lease, listed map[string][]string, now time.Time) (stray []SessionFact, lost []LeaseFact) {
	held := map[string]bool{}
	for _, l := range leases {
		if l.Session != "" {
			held[l.User+"\x00"+l.Session] = true
		}
	}
	for _, name := range slices.Sorted(mapKeys(listed)) {
		for _, sess := range listed[name] {
			if strings.HasPrefix(sess, "dibs-") && !held[name+"\x00"+sess] {
				stray = append(stray, SessionFact{User: name, Session: sess})
			}
		}
	}
	for _, l := range leases {
		sessions, ok := listed[l.User]
		if l.Session == "" || !ok || !l.ReservedUntil.IsZero() || now.Sub(l.StartedAt) < lostAfter || slices.Contains(sessions, l.Session) {
			continue
		}
		lost = append(lost, LeaseFact{Lease: l.ID, User: l.User, GPUs: l.GPUs, Session: l.Session, For: now.Sub(l.StartedAt)})
	}
	return stray, lost
}

// SquatClock remembers since when each GPU has been seen squatted, for a
// SquatFact's For: a GPU seen squatted starts its clock, one seen clean
// stops it. Not safe for concurrent use.
type SquatClock map[int]time.Time

// Seen updates the clock from one look at the node's GPUs at now.
func (c SquatClock) Seen(judged map[int]lease.Judgement, now time.Time) {
	for g, j := range judged {
		if _, ok := c[g]; j.Has(lease.FlagSquatted) && !ok {
			c[g] = now
		}
	}
	for g := range c {
		if !judged[g].Has(lease.FlagSquatted) {
			delete(c, g)
		}
	}
}

// CountServices adds the services among leases, and the GPUs they hold,
// to f: a service of several replicas (a lease each) counts once, its
// replicas' GPUs all.
func (f *Findings) CountServices(leases []lease.Lease) {
	seen := map[string]bool{}
	for _, l := range leases {
		if !l.IsService() {
			continue
		}
		f.ServiceGPUs += len(l.GPUs)
		if k := l.User + "\x00" + l.Service.Name; !seen[k] {
			seen[k] = true
			f.Services++
		}
	}
}
