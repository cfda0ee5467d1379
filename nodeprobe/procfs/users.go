package procfs

import (
	"os/user"
	"strconv"
	"time"
)

// negativeUserTTL is how long a uid or name that has no account stays
// unresolved before it is looked up again, so a newly created account shows
// up without restarting the agent, while an unknown uid does not cost a
// passwd (or LDAP) lookup at every probe.
const negativeUserTTL = time.Minute

// Users maps uids to user names and back, remembering answers because
// os/user may go through NSS (LDAP, sssd) and is far slower than a probe
// should be. It is not safe for concurrent use.
type Users struct {
	now        func() time.Time
	lookupID   func(uid string) (*user.User, error)
	lookupName func(name string) (*user.User, error)
	byID       map[int]userEntry
	byName     map[string]userEntry
}

type userEntry struct {
	name    string
	uid     int
	ok      bool
	retryAt time.Time // for !ok entries
}

// NewUsers looks accounts up in the system's database (os/user); now
// decides when a missing account is looked up again.
func NewUsers(now func() time.Time) *Users {
	return &Users{
		now:        now,
		lookupID:   user.LookupId,
		lookupName: user.Lookup,
		byID:       make(map[int]userEntry),
		byName:     make(map[string]userEntry),
	}
}

// Name returns the account name of uid, or "" when it has none.
func (c *Users) Name(uid int) string {
	if e, hit := c.byID[uid]; hit && (e.ok || c.now().Before(e.retryAt)) {
		return e.name
	}
	e := userEntry{uid: uid}
	if u, err := c.lookupID(strconv.Itoa(uid)); err == nil {
		e.name, e.ok = u.Username, true
	} else {
		e.retryAt = c.now().Add(negativeUserTTL)
	}
	c.byID[uid] = e
	return e.name
}

// UID returns the uid of the account called name, or -1 when none exists.
func (c *Users) UID(name string) int {
	if e, hit := c.byName[name]; hit && (e.ok || c.now().Before(e.retryAt)) {
		return e.uid
	}
	e := userEntry{name: name, uid: -1}
	if u, err := c.lookupName(name); err == nil {
		if id, err := strconv.Atoi(u.Uid); err == nil {
			e.uid, e.ok = id, true
		}
	}
	if !e.ok {
		e.retryAt = c.now().Add(negativeUserTTL)
	}
	c.byName[name] = e
	return e.uid
}
