package launch

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// tmpfsMagic is statfs's f_type of a tmpfs.
const tmpfsMagic = 0x01021994

// capUserDir makes u's status directory (name in the checked root, open as
// fd) a place of the agent's own with a size of its own: a tmpfs mounted
// there, owned by u, of at most l.statusQuota bytes and statusInodes files.
// A job writes its status as its user, so a user can write anything there;
// on their own small tmpfs that fills only their own space, never the
// filesystem the status directory lives on (/run, whose fill fails root's
// writes) and never another user's. It returns the directory to use: the
// mount (reopened) or, when one is there already, fd itself. Only root
// mounts; a process that cannot (not root, no CAP_SYS_ADMIN in a container)
// keeps the plain directory and says so once.
func (l *Launcher) capUserDir(root int, name string, fd int, u User) (int, error) {
	if l.euid != 0 || l.statusQuota <= 0 {
		return fd, nil
	}
	var sfs syscall.Statfs_t
	if err := syscall.Fstatfs(fd, &sfs); err != nil {
		return fd, fmt.Errorf("statfs exit-status directory of %s: %w", u.Name, err)
	}
	var rst, st syscall.Stat_t
	if err := syscall.Fstat(root, &rst); err != nil {
		return fd, fmt.Errorf("stat exit-status directory: %w", err)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		return fd, fmt.Errorf("stat exit-status directory of %s: %w", u.Name, err)
	}
	if st.Dev != rst.Dev {
		if sfs.Type != tmpfsMagic {
			return fd, refusef("exit-status directory %s is a mount point that dibs did not make (not a tmpfs): unmount it", filepath.Join(l.statusDir, name))
		}
		return fd, nil // mounted by an earlier call (or an earlier agent)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", l.statusQuota, statusInodes, u.UID, u.GID)
	target := "/proc/self/fd/" + strconv.Itoa(fd) // the checked directory itself, not a path a user could change
	if err := syscall.Mount("dibs-exit", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			l.noCapOnce.Do(func() {
				l.logf("cannot mount a size-capped tmpfs for exit statuses (%v): each user's status directory is a plain directory under %s, which a user could fill", err, l.statusDir)
			})
			return fd, nil
		}
		return fd, fmt.Errorf("mount a tmpfs of %d bytes for the exit statuses of %s: %w", l.statusQuota, u.Name, err)
	}
	nfd, err := syscall.Openat(root, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fd, fmt.Errorf("open exit-status directory of %s: %w", u.Name, err)
	}
	syscall.Close(fd)
	return nfd, nil
}

// statusInodes bounds the files in one user's status tmpfs.
const statusInodes = 256

// ReleaseStatusDir unmounts the per-user tmpfs mounts a Launcher made
// under dir (Options.StatusDir): for uninstalling dibs, and for tests that
// remove their status directory. Files in them are lost. It is not needed
// across agent restarts, which use the mounts they find.
func ReleaseStatusDir(dir string) error {
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	defer f.Close()
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if filepath.Dir(mp) == dir {
			targets = append(targets, mp)
		}
	}
	var errs []error
	for _, t := range targets {
		if err := syscall.Unmount(t, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
