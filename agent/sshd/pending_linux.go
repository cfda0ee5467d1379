package sshd

import "golang.org/x/sys/unix"

// pendingBytes is how many bytes wait unread in a socket.
func pendingBytes(fd uintptr) int {
	n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	if err != nil {
		return 0
	}
	return n
}
