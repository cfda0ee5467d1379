package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"
)

// User is who a session runs as, resolved from the account database. The agent
// resolves it once per request (from SO_PEERCRED or the SSH identity) and hands
// it to every Launcher method, so that all tmux calls reach that user's own
// server with that user's credentials.
type User struct {
	Name   string // login name; becomes USER and LOGNAME
	UID    int
	GID    int   // primary group
	Groups []int // every group the user is in, primary included, sorted
	Home   string
	Shell  string // login shell; becomes SHELL, which a new tmux server uses as its default-shell
}

// LookupUser resolves a login name, because the SSH front door and the CLI know
// people by name.
func LookupUser(name string) (User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	return fromOSUser(u)
}

// LookupUID resolves a uid, because the local API knows its callers only by the
// uid the kernel reports for the socket peer.
func LookupUID(uid int) (User, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return User{}, fmt.Errorf("look up uid %d: %w", uid, err)
	}
	return fromOSUser(u)
}

func fromOSUser(u *user.User) (User, error) {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: uid %q is not numeric", u.Username, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: gid %q is not numeric", u.Username, u.Gid)
	}
	ids, err := u.GroupIds()
	if err != nil {
		// Dropping the supplementary groups silently would start jobs that
		// cannot read the team's group-owned data, so say so instead.
		return User{}, fmt.Errorf("look up groups of user %s: %w", u.Username, err)
	}
	groups := []int{gid}
	for _, s := range ids {
		g, err := strconv.Atoi(s)
		if err != nil {
			return User{}, fmt.Errorf("look up groups of user %s: gid %q is not numeric", u.Username, s)
		}
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return User{
		Name:   u.Username,
		UID:    uid,
		GID:    gid,
		Groups: slices.Compact(groups),
		Home:   u.HomeDir,
		Shell:  loginShell(u.Username),
	}, nil
}

// loginShell finds a user's shell, which os/user does not report: /etc/passwd
// first (cheap, covers local accounts), then getent for directory-service
// accounts, then /bin/sh.
func loginShell(name string) string {
	if data, err := os.ReadFile("/etc/passwd"); err == nil {
		if sh, ok := passwdShell(data, name); ok {
			return sh
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "getent", "passwd", name).Output(); err == nil {
		if sh, ok := passwdShell(out, name); ok {
			return sh
		}
	}
	return "/bin/sh"
}

// passwdShell returns the shell field of name's entry in passwd(5) data.
func passwdShell(data []byte, name string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) == 7 && f[0] == name {
			if f[6] == "" {
				return "/bin/sh", true // passwd(5): an empty shell field means /bin/sh
			}
			return f[6], true
		}
	}
	return "", false
}
