package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// Flags syscall does not export; the same on every Linux port Go supports.
const (
	oPath             = 0x200000 // O_PATH: a handle to walk from, never an open of the file
	atSymlinkNofollow = 0x100
)

// openStatusRoot opens dir for the *at calls below after checking every
// element of the path from /, without following links: each ancestor must
// belong to root or euid and be writable by nobody else unless sticky (so no
// one else can swap what lies under it), and when euid is root it must let
// others through (o+x) so jobs can reach their own directories. dir itself
// must belong to euid and be writable by nobody else. With create, a missing
// last element is made with mode 0711. The fd is an O_PATH handle.
func openStatusRoot(dir string, euid int, create bool) (int, error) {
	if !filepath.IsAbs(dir) || dir == "/" {
		return -1, refusef("exit-status directory %q is not an absolute path below /: set Options.StatusDir to one such as /run/dibs/exit", dir)
	}
	fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	if err := checkAncestor(fd, "/", euid); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	parts := strings.Split(dir[1:], "/")
	cur := ""
	for i, name := range parts {
		last := i == len(parts)-1
		cur += "/" + name
		nfd, err := syscall.Openat(fd, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err == syscall.ENOENT && last && create {
			nfd, err = makeStatusRoot(fd, name)
		}
		syscall.Close(fd)
		switch {
		case err == syscall.ENOENT:
			return -1, &missingError{fmt.Sprintf("exit-status directory %s: %s does not exist: create it, owned by root and mode 755", dir, cur)}
		case err == syscall.ENOTDIR || err == syscall.ELOOP:
			return -1, refusef("exit-status directory %s: %s is a symbolic link or not a directory: give a path made of real directories", dir, cur)
		case err != nil:
			return -1, fmt.Errorf("exit-status directory %s: open %s: %w", dir, cur, err)
		}
		fd = nfd
		if last {
			err = checkStatusRoot(fd, dir, euid)
		} else {
			err = checkAncestor(fd, cur, euid)
		}
		if err != nil {
			syscall.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// missingError is a directory that is not there yet: nothing recorded, for
// ExitStatus; something to create, for Start.
type missingError struct{ msg string }

func (e *missingError) Error() string        { return e.msg }
func (e *missingError) Is(target error) bool { return target == fs.ErrNotExist }

// makeStatusRoot creates the status directory in parent, mode 0711 whatever
// the umask, and opens it. Its parent has passed checkAncestor, so nobody
// else can replace the new entry between the calls.
func makeStatusRoot(parent int, name string) (int, error) {
	if err := syscall.Mkdirat(parent, name, 0o711); err != nil && err != syscall.EEXIST {
		return -1, err
	}
	if err := syscall.Fchmodat(parent, name, 0o711, 0); err != nil {
		return -1, err
	}
	return syscall.Openat(parent, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
}

// checkAncestor applies openStatusRoot's rule for a directory above the
// status directory.
func checkAncestor(fd int, path string, euid int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Uid != 0 && int(st.Uid) != euid {
		return refusef("exit-status directory: %s belongs to uid %d, who could replace what lies under it: keep the status directory under directories owned by root", path, st.Uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0 {
		return refusef("exit-status directory: %s is writable by group or others, who could replace what lies under it: chmod go-w %s or move the status directory", path, path)
	}
	if euid == 0 && st.Mode&0o001 == 0 {
		return refusef("exit-status directory: users cannot pass through %s to write their exit status: chmod o+x %s or move the status directory", path, path)
	}
	return nil
}

// checkStatusRoot applies openStatusRoot's rule for the status directory.
func checkStatusRoot(fd int, dir string, euid int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if int(st.Uid) != euid {
		return refusef("exit-status directory %s belongs to uid %d, not to this agent (uid %d): remove it so dibs can make it, or chown it to uid %d", dir, st.Uid, euid, euid)
	}
	if st.Mode&0o022 != 0 {
		return refusef("exit-status directory %s is writable by group or others, who could plant status files in it: chmod 711 %s", dir, dir)
	}
	if euid == 0 && st.Mode&0o001 == 0 {
		return refusef("exit-status directory %s does not let users through to write their exit status: chmod 711 %s", dir, dir)
	}
	return nil
}

// openUserDir opens u's directory, named by uid, inside the checked status
// directory root: a real directory (never a link) that u owns and nobody else
// may write. With create it is made (mode 0700, then given to u) when
// missing; one that root made but did not manage to give away is given to u
// now, since only this process can create entries in root. Anything else
// is refused, never repaired: it was not made by dibs.
func openUserDir(root int, rootPath string, u User, euid int, create bool) (int, error) {
	name := strconv.Itoa(u.UID)
	path := filepath.Join(rootPath, name)
	if create {
		err := syscall.Mkdirat(root, name, 0o700)
		if err == nil {
			err = syscall.Fchmodat(root, name, 0o700, 0)
		}
		if err != nil && err != syscall.EEXIST {
			return -1, fmt.Errorf("make exit-status directory %s: %w", path, err)
		}
	}
	fd, err := syscall.Openat(root, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case err == syscall.ENOENT:
		return -1, &missingError{"exit-status directory " + path + " does not exist"}
	case err == syscall.ENOTDIR || err == syscall.ELOOP:
		return -1, refusef("exit-status directory %s is a symbolic link or not a directory, so dibs did not make it: remove it (rm %s) so dibs can make it again", path, path)
	case err != nil:
		return -1, fmt.Errorf("open exit-status directory %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", path, err)
	}
	if create && euid == 0 && u.UID != 0 && st.Uid == 0 {
		if err := syscall.Fchownat(root, name, u.UID, u.GID, atSymlinkNofollow); err != nil {
			syscall.Close(fd)
			return -1, fmt.Errorf("give exit-status directory %s to %s: %w", path, u.Name, err)
		}
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return -1, fmt.Errorf("stat %s: %w", path, err)
		}
	}
	if int(st.Uid) != u.UID {
		syscall.Close(fd)
		return -1, refusef("exit-status directory %s belongs to uid %d, not %s (uid %d), so dibs did not make it: remove it (rm -r %s) so dibs can make it again", path, st.Uid, u.Name, u.UID, path)
	}
	if st.Mode&0o022 != 0 {
		syscall.Close(fd)
		return -1, refusef("exit-status directory %s is writable by group or others, who could plant status files in it: chmod 700 %s", path, path)
	}
	return fd, nil
}

// readStatusFile reads name in u's checked directory dir. It first looks at
// the entry itself through an O_PATH handle, which opens nothing, so a link,
// FIFO or device is refused without being opened; then it opens the file
// non-blocking and without following links, checks that this is the same
// regular file owned by u and small, and reads at most maxStatusSize+1 bytes.
// path is for messages only.
func readStatusFile(dir int, name, path string, u User) ([]byte, error) {
	pfd, err := syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err == syscall.ENOENT {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var first syscall.Stat_t
	err = syscall.Fstat(pfd, &first)
	syscall.Close(pfd)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := checkStatusFile(&first, path, u); err != nil {
		return nil, err
	}
	fd, err := syscall.Openat(dir, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	switch {
	case err == syscall.ENOENT:
		return nil, fs.ErrNotExist
	case err == syscall.ELOOP:
		return nil, refusef("%s is a symbolic link, not a status the job wrote: refused", path)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := checkStatusFile(&st, path, u); err != nil {
		return nil, err
	}
	if st.Dev != first.Dev || st.Ino != first.Ino {
		return nil, refusef("%s was replaced while dibs read it: refused", path)
	}
	buf := make([]byte, maxStatusSize+1)
	n, err := procfs.ReadFD(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if n > maxStatusSize {
		return nil, refusef("%s holds more than an exit status: refused", path)
	}
	return buf[:n], nil
}

// checkStatusFile is the rule for a status file: a regular file of u's, no
// bigger than an exit status.
func checkStatusFile(st *syscall.Stat_t, path string, u User) error {
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFLNK:
		return refusef("%s is a symbolic link, not a status the job wrote: refused", path)
	default:
		return refusef("%s is not a regular file (a FIFO, device, socket or directory): refused", path)
	}
	if int(st.Uid) != u.UID {
		return refusef("%s belongs to uid %d, not %s (uid %d): refused", path, st.Uid, u.Name, u.UID)
	}
	if st.Size > maxStatusSize {
		return refusef("%s holds %d bytes, more than an exit status: refused", path, st.Size)
	}
	return nil
}

// unlinkAt removes the entry name in dir, never what a link points to.
func unlinkAt(dir int, name string) error { return syscall.Unlinkat(dir, name) }

// writeStartFile writes script, a tmux command list holding a session's
// environment, to a new file in the status directory (root's, mode 0711,
// checked from / by openStatusRoot, so nobody else can create, swap or list
// its entries), under a random name, made with O_CREAT|O_EXCL|O_NOFOLLOW,
// mode 0600 and given to u: only u, whose tmux reads it, and root can read
// it. It returns the file's path and what removes it, to call once tmux
// has answered.
func (l *Launcher) writeStartFile(u User, script string) (string, func(), error) {
	if strings.ContainsAny(l.statusDir, "*?[\\") {
		// tmux's source-file globs its path.
		return "", nil, refusef("exit-status directory %s holds a glob character (*?[\\): move it to a plain path such as /run/dibs/exit", l.statusDir)
	}
	root, err := openStatusRoot(l.statusDir, l.euid, true)
	if err != nil {
		return "", nil, err
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	name := ".start-" + hex.EncodeToString(rnd[:])
	fd, err := syscall.Openat(root, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		syscall.Close(root)
		return "", nil, fmt.Errorf("create %s: %w", filepath.Join(l.statusDir, name), err)
	}
	done := func() {
		syscall.Unlinkat(root, name)
		syscall.Close(root)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(l.statusDir, name))
	if l.euid == 0 && u.UID != 0 {
		err = f.Chown(u.UID, u.GID)
	}
	if err == nil {
		_, err = f.WriteString(script)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		done()
		return "", nil, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return f.Name(), done, nil
}
