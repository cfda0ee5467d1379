package launch

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// asUserFS runs f on a thread whose file-system identity is u's (when this
// process is root and u is someone else): u's fsuid, fsgid and
// supplementary groups, so the kernel checks every open and every path
// lookup as it would for u. Only the file-system ids change, never the
// thread's real or effective uid, so u can neither signal nor trace the
// thread while it is u's. The thread is restored before it is given back;
// if it cannot be, it is thrown away with its goroutine.
func asUserFS(u User, f func() error) error {
	if os.Geteuid() != 0 || u.UID == 0 {
		return f()
	}
	if u.UID < 0 || u.GID < 0 {
		return fmt.Errorf("user %q has no valid uid/gid", u.Name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := threadGroups()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		if err := setThreadGroups(u.Groups); err != nil {
			if setThreadGroups(own) == nil {
				runtime.UnlockOSThread()
			}
			errc <- err
			return
		}
		setfs := func(uid, gid int) {
			syscall.RawSyscall(sysSetfsgid, uintptr(gid), 0, 0)
			syscall.RawSyscall(sysSetfsuid, uintptr(uid), 0, 0)
		}
		setfs(u.UID, u.GID)
		err = f()
		setfs(0, 0)
		// setfsuid returns the previous value: asking again tells whether
		// the thread is root's once more.
		prev, _, _ := syscall.RawSyscall(sysSetfsuid, 0, 0, 0)
		if prev == 0 && setThreadGroups(own) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// threadGroups is the calling thread's supplementary groups.
func threadGroups() ([]uint32, error) {
	n, _, errno := syscall.RawSyscall(sysGetgroups, 0, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("get groups: %w", errno)
	}
	groups := make([]uint32, n+1)
	n, _, errno = syscall.RawSyscall(sysGetgroups, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
	if errno != 0 {
		return nil, fmt.Errorf("get groups: %w", errno)
	}
	return groups[:n], nil
}

// setThreadGroups sets the calling thread's supplementary groups with the
// raw system call, which changes that thread alone (Go's syscall.Setgroups
// and glibc's change every thread).
func setThreadGroups[T int | uint32](groups []T) error {
	list := make([]uint32, len(groups))
	for i, g := range groups {
		list[i] = uint32(g)
	}
	var p uintptr
	if len(list) > 0 {
		p = uintptr(unsafe.Pointer(&list[0]))
	}
	if _, _, errno := syscall.RawSyscall(sysSetgroups, uintptr(len(list)), p, 0); errno != 0 {
		return fmt.Errorf("set groups: %w", errno)
	}
	return nil
}
