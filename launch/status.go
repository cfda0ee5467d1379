package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrStatusDir marks a refusal to use an exit-status directory or file that
// someone other than its rightful owner could have shaped: a link, a FIFO, a
// device, another user's file, an oversized file, a directory others may
// write. The agent treats such a status as unknown and logs the message, which
// says what to fix. Test with errors.Is.
var ErrStatusDir = errors.New("unsafe exit-status file")

// kindError is an error whose text is the whole one-line message and whose
// kind (ErrStatusDir, ErrWorkDir) errors.Is reports without adding its text.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func refusef(format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: ErrStatusDir}
}

// maxStatusSize bounds what ExitStatus reads: the wrapper writes at most
// "255\n"; anything past this was not written by it.
const maxStatusSize = 32

// exitWrapper runs command the way tmux would (one element: a command line for
// the pane's $SHELL, which tmux sets to its default-shell; more: an argv) and
// writes its exit status to file, as the user, once it ends. The file is an
// argument, not an environment variable, so the job never sees it.
func exitWrapper(file string, command []string) []string {
	const write = `s=$?; printf '%s\n' "$s" >"$f"; exit "$s"`
	if len(command) == 1 {
		return []string{"/bin/sh", "-c", `f=$1; "${SHELL:-/bin/sh}" -c "$2"; ` + write, "dibs-job", file, command[0]}
	}
	return append([]string{"/bin/sh", "-c", `f=$1; shift; "$@"; ` + write, "dibs-job", file}, command...)
}

// statusFileName is the file a session's wrapper writes in its user's
// directory. CheckName keeps session names free of '/' and dots.
func statusFileName(session string) string { return session + ".exit" }

// prepareExitFile makes sure u's status directory exists and is safe, removes
// a status left from an earlier session of the same name, and returns the
// path the wrapper writes. It refuses (ErrStatusDir) rather than write where
// another user has a say.
func (l *Launcher) prepareExitFile(u User, session string) (string, error) {
	if l.statusDir == "" {
		return "", refusef("no exit-status directory configured: set launch.Options.StatusDir (e.g. /run/dibs/exit)")
	}
	root, err := openStatusRoot(l.statusDir, l.euid, true)
	if err != nil {
		return "", err
	}
	defer syscall.Close(root)
	dir, err := openUserDir(root, l.statusDir, u, l.euid, true)
	if err != nil {
		return "", err
	}
	dir, err = l.capUserDir(root, strconv.Itoa(u.UID), dir, u)
	defer syscall.Close(dir)
	if err != nil {
		return "", err
	}
	name := statusFileName(session)
	if err := unlinkAt(dir, name); err != nil && !errors.Is(err, syscall.ENOENT) {
		return "", fmt.Errorf("remove old exit status %s: %w", filepath.Join(l.statusDir, strconv.Itoa(u.UID), name), err)
	}
	return filepath.Join(l.statusDir, strconv.Itoa(u.UID), name), nil
}

// ExitStatus reads and removes the exit status that a session started with
// Spec.RecordExit left behind. Call it once the session is gone (Watch
// closed). ok is false with a nil error when there is none: the session was
// killed as a whole, or did not record one. A status file that is a link, a
// FIFO, a device, belongs to someone other than u, is larger than an exit
// status or does not hold 0-255 is refused with an error wrapping
// ErrStatusDir, quickly and without reading it; it is removed all the same.
// Every file is opened relative to directories this process has checked,
// never by following a path a user could change. Safe for concurrent use.
func (l *Launcher) ExitStatus(u User, session string) (code int, ok bool, err error) {
	code, ok, err = l.exitStatus(u, session)
	if err != nil {
		return 0, false, fmt.Errorf("exit status of session %s of %s: %w", session, u.Name, err)
	}
	return code, ok, nil
}

func (l *Launcher) exitStatus(u User, session string) (int, bool, error) {
	if err := CheckName(session); err != nil {
		return 0, false, err
	}
	if _, err := credentialFor(l.euid, u); err != nil {
		return 0, false, err
	}
	if l.statusDir == "" {
		return 0, false, errors.New("no exit-status directory configured: set launch.Options.StatusDir (e.g. /run/dibs/exit)")
	}
	root, err := openStatusRoot(l.statusDir, l.euid, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer syscall.Close(root)
	dir, err := openUserDir(root, l.statusDir, u, l.euid, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer syscall.Close(dir)
	name := statusFileName(session)
	path := filepath.Join(l.statusDir, strconv.Itoa(u.UID), name)
	data, err := readStatusFile(dir, name, path, u)
	if rmErr := unlinkAt(dir, name); rmErr != nil && !errors.Is(rmErr, syscall.ENOENT) && err == nil {
		l.logf("remove exit status %s: %v", path, rmErr)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || code < 0 || code > 255 {
		return 0, false, refusef("%s does not hold an exit status (a number 0-255): refused", path)
	}
	return code, true, nil
}
