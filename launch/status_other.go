//go:build !linux

package launch

import "errors"

// errStatusUnsupported: the checks that make a status file safe to read as
// root (O_PATH, *at calls relative to checked directories) are Linux's.
var errStatusUnsupported = errors.New("recording exit status needs Linux")

func openStatusRoot(string, int, bool) (int, error)            { return -1, errStatusUnsupported }
func openUserDir(int, string, User, int, bool) (int, error)    { return -1, errStatusUnsupported }
func readStatusFile(int, string, string, User) ([]byte, error) { return nil, errStatusUnsupported }
func unlinkAt(int, string) error                               { return errStatusUnsupported }

func (l *Launcher) capUserDir(_ int, _ string, fd int, _ User) (int, error) { return fd, nil }

// ReleaseStatusDir does nothing where no status tmpfs is mounted.
func ReleaseStatusDir(string) error { return nil }

// writeStartFile has nowhere checked to write: Start passes the command
// list on tmux's argv.
func (l *Launcher) writeStartFile(User, string) (string, func(), error) {
	return "", nil, errNoStartFile
}
