// Package account resolves the people behind a request: a uid the kernel
// reported (SO_PEERCRED), a name an SSH key was accepted for, or a name a
// peer forwarded. It is the one place that turns those into a lease.Caller,
// so admin rights always come from this node's own account database and
// config, never from the request.
package account

import (
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// Users resolves accounts; tests swap it. Methods are safe for concurrent
// use and may block on NSS.
type Users interface {
	LookupUID(uid int) (launch.User, error)
	LookupUser(name string) (launch.User, error)
	// InGroup reports whether the account is a member of the named group.
	InGroup(u launch.User, group string) bool
}

// System reads the system account database.
type System struct{}

// LookupUID implements Users.
func (System) LookupUID(uid int) (launch.User, error) { return launch.LookupUID(uid) }

// LookupUser implements Users.
func (System) LookupUser(name string) (launch.User, error) { return launch.LookupUser(name) }

// InGroup implements Users.
func (System) InGroup(u launch.User, group string) bool {
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

// CacheTTL is how long a lookup is kept: os/user can take a millisecond
// (NSS), a claim should not.
const CacheTTL = time.Minute

// Directory is this node's view of its accounts, cached, with its admin
// group. Safe for concurrent use.
type Directory struct {
	node       string
	users      Users
	now        func() time.Time
	adminGroup string

	mu     sync.Mutex
	byUID  map[int]cached
	byName map[string]cached
}

type cached struct {
	u   launch.User
	err error
	at  time.Time
}

// NewDirectory caches users' answers for node; adminGroup's members (and
// root) are admins.
func NewDirectory(node string, users Users, adminGroup string, now func() time.Time) *Directory {
	if users == nil {
		users = System{}
	}
	return &Directory{node: node, users: users, now: now, adminGroup: adminGroup, byUID: map[int]cached{}, byName: map[string]cached{}}
}

// ByUID resolves a uid.
func (d *Directory) ByUID(uid int) (launch.User, error) {
	now := d.now()
	d.mu.Lock()
	e, ok := d.byUID[uid]
	d.mu.Unlock()
	if ok && now.Sub(e.at) < CacheTTL && now.Sub(e.at) >= 0 {
		return e.u, e.err
	}
	u, err := d.users.LookupUID(uid)
	d.mu.Lock()
	d.byUID[uid] = cached{u: u, err: err, at: now}
	d.mu.Unlock()
	return u, err
}

// ByName resolves a login name.
func (d *Directory) ByName(name string) (launch.User, error) {
	now := d.now()
	d.mu.Lock()
	e, ok := d.byName[name]
	d.mu.Unlock()
	if ok && now.Sub(e.at) < CacheTTL && now.Sub(e.at) >= 0 {
		return e.u, e.err
	}
	u, err := d.users.LookupUser(name)
	d.mu.Lock()
	d.byName[name] = cached{u: u, err: err, at: now}
	d.mu.Unlock()
	return u, err
}

// Caller is the identity of an account on this node: its uid and name, and
// admin when it is root or in this node's admin group.
func (d *Directory) Caller(u launch.User) lease.Caller {
	return lease.Caller{UID: u.UID, User: u.Name, Admin: u.UID == 0 || d.users.InGroup(u, d.adminGroup)}
}

// CallerForUID is the identity of the process the kernel named. An uid
// with no account is still itself (named "uid1234" for uid 1234), never an admin.
func (d *Directory) CallerForUID(uid int) lease.Caller {
	u, err := d.ByUID(uid)
	if err != nil {
		return lease.Caller{UID: uid, User: fmt.Sprintf("uid%d", uid)}
	}
	return d.Caller(u)
}

// CallerForName is this node's account of the same name, for an SSH login
// or a request another agent forwarded: the name is what crosses nodes,
// never the uid or admin flag. No account is a refusal that says so.
func (d *Directory) CallerForName(name, from string) (lease.Caller, error) {
	u, err := d.ByName(name)
	if err != nil {
		return lease.Caller{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account named %q, so %s cannot act there as that user: create the account on %s (the same name on every node), or work from a node where it exists", d.node, name, from, d.node)}
	}
	return d.Caller(u), nil
}

// Holder is the account a lease's session runs as: the account named name
// whose uid is uid, both as this node resolved them when it accepted the
// lease, booking or placement. It asks the account database afresh (no
// cache), because it guards a process about to start: a user deleted and
// their uid given to someone new must not have their booked or queued
// command run as the newcomer, nor as a new account that took the name.
// A mismatch is an error saying which, and that nothing was started
// (refusal.CodeForbidden); an account database that does not answer is
// refusal.CodeUnavailable, to try again, not a verdict.
func (d *Directory) Holder(name string, uid int) (launch.User, error) {
	if name == "" || uid < 0 {
		return launch.User{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s, so nothing runs as them there", lease.Caller{UID: uid, User: name}, d.node)}
	}
	u, err := d.users.LookupUser(name)
	now := d.now()
	d.mu.Lock()
	d.byName[name] = cached{u: u, err: err, at: now}
	d.mu.Unlock()
	var unknown user.UnknownUserError
	if err != nil && !errors.As(err, &unknown) {
		// The account database did not answer (LDAP down): not a verdict.
		return launch.User{}, refusal.Wrapf(refusal.CodeUnavailable, err, "cannot look up the account %s on %s now (%v): try again", name, d.node, err)
	}
	if err != nil {
		return launch.User{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s any more, so nothing was started as them (uid %d is not run as anyone else)", name, d.node, uid)}
	}
	if u.UID != uid {
		return launch.User{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf("the account %s on %s now has uid %d, not uid %d as when this was accepted: the account was replaced, so nothing was started", name, d.node, u.UID, uid)}
	}
	return u, nil
}
