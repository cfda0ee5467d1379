//go:build linux && (amd64 || arm64)

package launch

import (
	"context"
	"errors"
	"syscall"
	"unsafe"
)

// sysFaccessat2 is faccessat2(2) (Linux 5.8), numbered alike on every
// architecture; atEAccess asks it to check as the thread's file-system
// identity rather than its real uid.
const (
	sysFaccessat2 = 439
	atEAccess     = 0x200
)

// enterOnThread asks the kernel whether u may enter dir without a child
// process: on a thread with u's file-system identity (asUserFS: u's fsuid,
// fsgid and groups, root's capabilities over files dropped by the kernel
// with the fsuid), faccessat2(dir + "/", X_OK, AT_EACCESS) walks the path
// as u, refuses what is not a directory (the trailing slash) and checks u's
// search right on it: what chdir checks. It saves the fork and exec of a
// child on every session start.
//
// asked is false where the kernel lacks faccessat2 (before 5.8) or a
// filter refuses it: the caller then asks a child process. A check still
// blocked when ctx ends (a hung network file system) is left to finish on
// its thread and answered with ctx's error; release runs when the call
// has returned, whenever that is.
func enterOnThread(ctx context.Context, u User, dir string, release func()) (err error, asked bool) {
	path, err := syscall.BytePtrFromString(dir + "/")
	if err != nil {
		release()
		return err, true
	}
	done := make(chan error, 1)
	go func() {
		err := asUserFS(u, func() error {
			cwd := atFDCWD
			_, _, errno := syscall.Syscall6(sysFaccessat2, uintptr(cwd), uintptr(unsafe.Pointer(path)), 1 /* X_OK */, atEAccess, 0, 0)
			if errno != 0 {
				return errno
			}
			return nil
		})
		// The slot goes back before the answer, so a check that has
		// returned holds none (a deferred release ran after the send,
		// and a caller could see its own slot still held).
		release()
		done <- err
	}()
	select {
	case err := <-done:
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
			return err, false
		}
		return err, true
	case <-ctx.Done():
		return ctx.Err(), true
	}
}

// atFDCWD is AT_FDCWD: a path relative to the working directory.
const atFDCWD = -100
