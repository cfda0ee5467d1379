//go:build linux && (386 || arm)

package launch

import "syscall"

// The 32-bit-id system calls of asUserFS where the plain numbers take
// 16-bit ids.
const (
	sysSetfsuid  = syscall.SYS_SETFSUID32
	sysSetfsgid  = syscall.SYS_SETFSGID32
	sysGetgroups = syscall.SYS_GETGROUPS32
	sysSetgroups = syscall.SYS_SETGROUPS32
)
