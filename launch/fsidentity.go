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
// supplementary groups, and no capability in effect (the fsuid alone drops
// only root's powers over files; CAP_SYS_PTRACE, say, would still let a
// path through /proc/PID/cwd of a process u may not look into), so the
// kernel checks every open and every path lookup as it would for u. Only
// the file-system ids change, never the thread's real or effective uid, so
// u can neither signal nor trace the thread while it is u's. The thread is
// restored before it is given back; if it cannot be, it is thrown away
// with its goroutine.
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
		var own threadIdentity
		err := own.read()
		if err == nil {
			err = own.become(u)
			if err == nil {
				err = f()
			}
		}
		if own.restore() {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// threadIdentity is what asUserFS changes on its thread, as it was: the
// supplementary groups and the capability sets (the file-system ids were
// root's: this process's real ids).
type threadIdentity struct {
	groups []uint32
	caps   [2]capData
	// saved is set once both are read: become runs only then.
	saved bool
}

// read records the calling thread's groups and capabilities.
func (t *threadIdentity) read() error {
	var err error
	if t.groups, err = threadGroups(); err != nil {
		return err
	}
	if t.caps, err = threadCaps(); err != nil {
		return err
	}
	t.saved = true
	return nil
}

// become gives the calling thread u's groups, fsgid and fsuid, then takes
// every capability out of effect. The order matters: the groups and ids
// take CAP_SETGID and CAP_SETUID, which go last. Each id is checked, since
// setfsuid(2) fails without saying so.
func (t *threadIdentity) become(u User) error {
	if err := setThreadGroups(u.Groups); err != nil {
		return err
	}
	syscall.RawSyscall(sysSetfsgid, uintptr(u.GID), 0, 0)
	syscall.RawSyscall(sysSetfsuid, uintptr(u.UID), 0, 0)
	// Each returns the value before: set again to the same, it says
	// whether the first call took.
	if g, _, _ := syscall.RawSyscall(sysSetfsgid, uintptr(u.GID), 0, 0); int(g) != u.GID {
		return fmt.Errorf("set the file-system gid %d: not taken", u.GID)
	}
	if id, _, _ := syscall.RawSyscall(sysSetfsuid, uintptr(u.UID), 0, 0); int(id) != u.UID {
		return fmt.Errorf("set the file-system uid %d: not taken", u.UID)
	}
	none := t.caps
	for i := range none {
		none[i].effective = 0
	}
	return setThreadCaps(none)
}

// restore gives the calling thread back what read recorded, and reports
// whether it is as it was (else it must not run anything else). The ids
// first (this process's real ids, allowed without a capability), then the
// capabilities, then the groups, which take CAP_SETGID.
func (t *threadIdentity) restore() bool {
	syscall.RawSyscall(sysSetfsgid, 0, 0, 0)
	syscall.RawSyscall(sysSetfsuid, 0, 0, 0)
	g, _, _ := syscall.RawSyscall(sysSetfsgid, 0, 0, 0)
	id, _, _ := syscall.RawSyscall(sysSetfsuid, 0, 0, 0)
	if g != 0 || id != 0 {
		return false
	}
	if !t.saved {
		return true // read failed: become never ran, nothing changed
	}
	return setThreadCaps(t.caps) == nil && setThreadGroups(t.groups) == nil
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

// capData is one 32-bit half of a thread's capability sets, as capget(2)
// and capset(2) take them (version 3: two halves).
type capData struct{ effective, permitted, inheritable uint32 }

// capHeader names the version and the thread (0: the calling one).
type capHeader struct {
	version uint32
	pid     int32
}

const capVersion3 = 0x20080522

// threadCaps is the calling thread's capability sets.
func threadCaps() ([2]capData, error) {
	h := capHeader{version: capVersion3}
	var d [2]capData
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&d[0])), 0); errno != 0 {
		return d, fmt.Errorf("get capabilities: %w", errno)
	}
	return d, nil
}

// setThreadCaps sets the calling thread's capability sets; capabilities
// belong to each thread, so no other thread changes.
func setThreadCaps(d [2]capData) error {
	h := capHeader{version: capVersion3}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&d[0])), 0); errno != 0 {
		return fmt.Errorf("set capabilities: %w", errno)
	}
	return nil
}
