package api

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerUID is the uid the kernel recorded for the process at the other end of
// c (SO_PEERCRED: for a client, the server as it was when it called listen).
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("read the agent's credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, fmt.Errorf("read the agent's credentials: %w", err)
	}
	if cerr != nil {
		return -1, fmt.Errorf("read the agent's credentials (SO_PEERCRED): %w", cerr)
	}
	return int(cred.Uid), nil
}
