package procfs

import (
	"os/user"
	"strconv"
	"time"
)

// NewFakeUsers returns Users that answer from names instead of the system's
// account database and count every lookup in *lookups, so tests of the
// backends can own the uids of a fake /proc that the test machine has no
// accounts for, and check that answers are cached. names is read at every
// lookup: a test may add an account later.
func NewFakeUsers(now func() time.Time, names map[int]string, lookups *int) *Users {
	c := NewUsers(now)
	c.lookupID = func(uid string) (*user.User, error) {
		*lookups++
		id, _ := strconv.Atoi(uid)
		if n, ok := names[id]; ok {
			return &user.User{Uid: uid, Username: n}, nil
		}
		return nil, user.UnknownUserIdError(id)
	}
	c.lookupName = func(name string) (*user.User, error) {
		*lookups++
		for id, n := range names {
			if n == name {
				return &user.User{Uid: strconv.Itoa(id), Username: n}, nil
			}
		}
		return nil, user.UnknownUserError(name)
	}
	return c
}
