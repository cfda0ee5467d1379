package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// SystemSocket is where a root agent listens.
const SystemSocket = "/run/dibs/dibs.sock"

// SocketPath finds the agent socket: the flag, then $DIBS_SOCKET, then the
// system agent's socket when the caller is root or its directory exists (so a
// stopped system agent is reported as stopped, not looked for elsewhere),
// then the personal agent's socket (UserSocket). It says only where to look;
// every path, chosen or defaulted, goes through CheckSocket when dialled.
func SocketPath(flag string, getenv func(string) string) string {
	return socketPath(flag, getenv, os.Geteuid(), SystemSocket)
}

func socketPath(flag string, getenv func(string) string, euid int, system string) string {
	if flag != "" {
		return flag
	}
	if s := getenv("DIBS_SOCKET"); s != "" {
		return s
	}
	if euid == 0 {
		return system
	}
	if fi, err := os.Stat(filepath.Dir(system)); err == nil && fi.IsDir() {
		return system
	}
	return UserSocket(getenv)
}

// UserSocket is where an agent run by an ordinary user listens by default
// (`dibs agent` uses it), in a directory only that user can write, so no one
// else can be there first: $XDG_RUNTIME_DIR; else /run/user/UID when it exists
// and is the user's; else $XDG_STATE_HOME/dibs (~/.local/state/dibs), next to
// the personal agent's data. Never a shared directory such as /tmp, where
// anyone could create the directory first and pose as the agent.
func UserSocket(getenv func(string) string) string {
	if d := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "dibs.sock")
	}
	uid := os.Geteuid()
	run := filepath.Join("/run/user", strconv.Itoa(uid))
	if fi, err := os.Lstat(run); err == nil && fi.IsDir() && ownerOf(fi) == uid {
		return filepath.Join(run, "dibs.sock")
	}
	state := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home := getenv("HOME")
		if !filepath.IsAbs(home) {
			if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
				home = u.HomeDir
			}
		}
		if !filepath.IsAbs(home) {
			// No home to put it in: name the runtime dir, which the dial then
			// reports as missing, rather than fall back to a shared directory.
			return filepath.Join(run, "dibs.sock")
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "dibs", "dibs.sock")
}

// UntrustedError is a refusal to talk to a socket that could be an impostor's:
// its directory is not private to root or the caller, or the process serving
// it runs as someone else. Nothing has been sent when it is returned.
type UntrustedError struct {
	// Socket is the path as given (flag, DIBS_SOCKET or default).
	Socket string
	// Reason says what is wrong and what to do, in one line.
	Reason string
}

func (e *UntrustedError) Error() string {
	return "refusing the dibs socket " + e.Socket + ": " + e.Reason
}

// useInstead ends every refusal: where a trustworthy socket lives.
const useInstead = "use the system agent (" + SystemSocket + "), or point --socket / DIBS_SOCKET at a socket in a directory only root or you can write"

// CheckSocket decides whether socket may be dialled by this process, before
// anything is sent to it: it resolves symlinks and checks the real path. The
// socket's directory must belong to root or the caller and be writable by
// neither group nor others; every directory above it must belong to root or
// the caller, and one writable by group or others must be sticky (like /tmp),
// so no one else can swap what lies below it. It returns the real path to
// dial. A missing socket or directory is returned as an error wrapping
// fs.ErrNotExist; a refusal is an *UntrustedError.
func CheckSocket(socket string) (string, error) {
	return checkSocket(socket, os.Geteuid())
}

func checkSocket(socket string, me int) (string, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return "", fmt.Errorf("resolve socket path %s: %w", socket, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		// No socket (yet): the directory it would be in is what must be safe.
		// A dangling link there is no socket either, and is not followed
		// later: whatever appears at its target was never checked.
		var dir string
		if dir, err = filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			real = filepath.Join(dir, filepath.Base(abs))
			if fi, lerr := os.Lstat(real); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				err = &fs.PathError{Op: "resolve", Path: real, Err: syscall.ENOENT}
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("resolve socket path %s: %w", socket, err)
	}
	where := ""
	if real != abs {
		where = " (the real path of " + socket + " is " + real + ")"
	}
	refuse := func(format string, args ...any) error {
		return &UntrustedError{Socket: socket, Reason: fmt.Sprintf(format, args...) + where + "; " + useInstead}
	}
	dir := filepath.Dir(real)
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("check socket directory %s: %w", p, err)
		}
		if !fi.IsDir() {
			return "", refuse("%s changed while it was checked (it is no longer a directory)", p)
		}
		owner, mode := ownerOf(fi), fi.Mode()
		what := "its directory " + p
		if p != dir {
			what = p + ", above its directory,"
		}
		switch {
		case owner != 0 && owner != me:
			return "", refuse("%s belongs to %s, not to root or you, so that user could be posing as the agent", what, describeUID(owner))
		case p == dir && mode.Perm()&0o022 != 0:
			fix := ""
			if owner == me {
				fix = fmt.Sprintf(" (it is yours: chmod go-w %s, then restart the agent)", p)
			}
			return "", refuse("%s is writable by group or others (%s), so someone else could have put a fake agent there%s", what, mode, fix)
		case p != dir && mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0:
			return "", refuse("%s is writable by group or others and not sticky (%s), so someone else could replace what lies below it", what, mode)
		}
		if p == filepath.Dir(p) {
			return real, nil
		}
	}
}

// ownerOf is the uid that owns fi's file.
func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// describeUID names a uid for a message: "uid 1001 (bob)".
func describeUID(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, sanitize(u.Username))
	}
	return fmt.Sprintf("uid %d", uid)
}

// sanitize keeps a name from the account database printable on one line.
func sanitize(s string) string {
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
