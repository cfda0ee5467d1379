package agent

import (
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/launch"
)

// SystemUsers reads the system account database.
type SystemUsers struct{}

// LookupUID implements Users.
func (SystemUsers) LookupUID(uid int) (launch.User, error) { return launch.LookupUID(uid) }

// LookupUser implements Users.
func (SystemUsers) LookupUser(name string) (launch.User, error) { return launch.LookupUser(name) }

// InGroup implements Users.
func (SystemUsers) InGroup(u launch.User, group string) bool {
	if group == "" {
		return false
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return false
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return false
	}
	return u.GID == gid || slices.Contains(u.Groups, gid)
}

// userCache keeps account lookups off the claim path: os/user can take a
// millisecond (NSS), a claim should not.
type userCache struct {
	users Users
	now   func() time.Time
	mu    sync.Mutex
	byUID map[int]cachedUser
}

type cachedUser struct {
	u   launch.User
	err error
	at  time.Time
}

const userCacheTTL = time.Minute

func newUserCache(u Users, now func() time.Time) *userCache {
	return &userCache{users: u, now: now, byUID: make(map[int]cachedUser)}
}

func (c *userCache) lookup(uid int) (launch.User, error) {
	c.mu.Lock()
	e, ok := c.byUID[uid]
	c.mu.Unlock()
	if ok && c.now().Sub(e.at) < userCacheTTL {
		return e.u, e.err
	}
	u, err := c.users.LookupUID(uid)
	c.mu.Lock()
	c.byUID[uid] = cachedUser{u: u, err: err, at: c.now()}
	c.mu.Unlock()
	return u, err
}
