//go:build linux && !(386 || arm)

package launch

import "syscall"

// The system calls asUserFS makes, taking and returning 32-bit ids (on
// 386 and arm the plain numbers are the old 16-bit ones:
// fsidentity_nr32.go, with the 32-bit calls).
const (
	sysSetfsuid  = syscall.SYS_SETFSUID
	sysSetfsgid  = syscall.SYS_SETFSGID
	sysGetgroups = syscall.SYS_GETGROUPS
	sysSetgroups = syscall.SYS_SETGROUPS
)
