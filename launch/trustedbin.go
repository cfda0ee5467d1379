package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUntrustedBinary marks a binary TrustedBinary refuses: someone other
// than root and the caller owns it, may write it, or may swap it (or a
// directory or link on its way) for another.
var ErrUntrustedBinary = errors.New("untrusted binary")

// maxLinks bounds the links TrustedBinary follows, as the kernel's
// ELOOP does (40).
const maxLinks = 40

// TrustedBinary resolves path (absolute) to the executable that a process
// running as uid may run without handing itself to another user, as sudo
// checks its secure path: every step of the way, "/" and each directory,
// each link and the file itself, is checked with lstat, none followed
// before it is checked, and each must be owned by root or uid; a
// directory others may write must be sticky (/tmp: only an entry's owner
// may then rename or remove it, and that owner was checked); the file must
// be a regular, executable file that nobody but its owner may write. So
// nobody but root and uid can change what the returned path names between
// this check and its use: `dibs` running as root does not run another
// user's dibsd planted beside it in /tmp, nor a link from there to
// /bin/bash.
//
// The error wraps fs.ErrNotExist when something on the way is not there
// (the caller may look elsewhere) and ErrUntrustedBinary when something is
// there but fails a check (the caller must refuse: looking elsewhere would
// hide the plant); its text names the step and what is wrong with it.
func TrustedBinary(path string, uid int) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s is not an absolute path", path)
	}
	resolved := "/"
	if err := checkStep("/", uid, true); err != nil {
		return "", err
	}
	rest := splitPath(path)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// resolved holds no link, so its parent is the real one, and
			// was checked on the way down.
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		var st syscall.Stat_t
		if err := syscall.Lstat(next, &st); err != nil {
			return "", &fs.PathError{Op: "lstat", Path: next, Err: err}
		}
		if err := checkOwner(next, &st, uid); err != nil {
			return "", err
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			// A link cannot be rewritten, only replaced by whoever may
			// write its directory (checked) or, in a sticky one, by its
			// owner (checked above).
			if links++; links > maxLinks {
				return "", fmt.Errorf("%s: %w", path, syscall.ELOOP)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("read the link %s: %w", next, err)
			}
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			rest = append(splitPath(target), rest...)
		case syscall.S_IFDIR:
			if err := checkStep(next, uid, len(rest) > 0); err != nil {
				return "", err
			}
			resolved = next
		case syscall.S_IFREG:
			if len(rest) > 0 {
				return "", &fs.PathError{Op: "lstat", Path: filepath.Join(next, filepath.Join(rest...)), Err: syscall.ENOTDIR}
			}
			perm := uint32(st.Mode) & 0o7777
			if othersWrite(&st) {
				return "", fmt.Errorf("%w: %s may be written by others than its owner (mode %04o, group %d)", ErrUntrustedBinary, next, perm, st.Gid)
			}
			if perm&0o111 == 0 {
				return "", fmt.Errorf("%w: %s is not executable (mode %04o)", ErrUntrustedBinary, next, perm)
			}
			resolved = next
		default:
			return "", fmt.Errorf("%w: %s is not a regular file", ErrUntrustedBinary, next)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(resolved, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return "", fmt.Errorf("%w: %s is a directory, not a program", ErrUntrustedBinary, resolved)
	}
	return resolved, nil
}

// checkStep checks directory dir (already lstat'ed as one, or "/"): owned
// by root or uid and, when others may write it, sticky. dir false means it
// is where the program should have been.
func checkStep(dir string, uid int, isDir bool) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if err := checkOwner(dir, &st, uid); err != nil {
		return err
	}
	if !isDir {
		return fmt.Errorf("%w: %s is a directory, not a program", ErrUntrustedBinary, dir)
	}
	perm := uint32(st.Mode) & 0o7777
	if othersWrite(&st) && perm&syscall.S_ISVTX == 0 {
		return fmt.Errorf("%w: the directory %s may be written by others than its owner and is not sticky (mode %04o, group %d), so they may swap what it holds", ErrUntrustedBinary, dir, perm, st.Gid)
	}
	return nil
}

// othersWrite reports whether someone other than the owner (and root) may
// write st: anyone, or a group other than root's (gid 0, as sudo allows).
func othersWrite(st *syscall.Stat_t) bool {
	return st.Mode&0o002 != 0 || st.Mode&0o020 != 0 && st.Gid != 0
}

// checkOwner refuses a step owned by someone other than root and uid.
func checkOwner(path string, st *syscall.Stat_t, uid int) error {
	if st.Uid == 0 || int64(st.Uid) == int64(uid) {
		return nil
	}
	who := "root"
	if uid != 0 {
		who = fmt.Sprintf("root or you (uid %d)", uid)
	}
	return fmt.Errorf("%w: %s is owned by uid %d, not by %s", ErrUntrustedBinary, path, st.Uid, who)
}

// splitPath cuts a path into its names.
func splitPath(p string) []string { return strings.Split(p, "/") }
