//go:build linux

package launch

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// Listening are the TCP sockets listening on port in the caller's network
// namespace, IPv4 and IPv6, asked of the kernel over NETLINK_SOCK_DIAG:
// it walks only its table of listeners, where reading /proc/net/tcp walks
// every connection's bucket (tens of milliseconds on a big, busy
// machine). Where sock_diag is missing it reads /proc/self/net instead.
func Listening(port int) []Socket {
	out, err := listeningDiag(port)
	if err != nil {
		return ListeningSocketsIn("/proc/self/net", port)
	}
	return out
}

// The sizes of the kernel's structures (linux/inet_diag.h).
const (
	nlmsgHdrLen    = 16
	diagReqV2Len   = 56 // inet_diag_req_v2
	diagMsgLen     = 72 // inet_diag_msg
	tcpListenState = 10 // TCP_LISTEN
)

func listeningDiag(port int) ([]Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	var out []Socket
	buf := make([]byte, 32<<10)
	for seq, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := make([]byte, nlmsgHdrLen+diagReqV2Len)
		ne := binary.NativeEndian
		ne.PutUint32(req[0:], uint32(len(req)))
		ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
		ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		ne.PutUint32(req[8:], uint32(seq+1))
		req[16], req[17] = family, unix.IPPROTO_TCP
		ne.PutUint32(req[20:], 1<<tcpListenState)
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
	read:
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				return nil, fmt.Errorf("sock_diag: %w", err)
			}
			for off := 0; off+nlmsgHdrLen <= n; {
				l := int(ne.Uint32(buf[off:]))
				typ := ne.Uint16(buf[off+4:])
				if l < nlmsgHdrLen || off+l > n {
					return nil, fmt.Errorf("sock_diag: a message of %d bytes", l)
				}
				switch typ {
				case unix.NLMSG_DONE:
					break read
				case unix.NLMSG_ERROR:
					return nil, fmt.Errorf("sock_diag: the kernel refused the request")
				case unix.SOCK_DIAG_BY_FAMILY:
					if s, ok := diagSocket(buf[off+nlmsgHdrLen:off+l], port); ok {
						out = append(out, s)
					}
				}
				off += (l + 3) &^ 3
			}
		}
	}
	return out, nil
}

// diagSocket reads an inet_diag_msg: the socket when it listens on port.
func diagSocket(m []byte, port int) (Socket, bool) {
	if len(m) < diagMsgLen || m[1] != tcpListenState {
		return Socket{}, false
	}
	sport := binary.BigEndian.Uint16(m[4:])
	if int(sport) != port {
		return Socket{}, false
	}
	var addr netip.Addr
	switch m[0] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(m[8:12]))
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(m[8:24]))
	default:
		return Socket{}, false
	}
	inode := binary.NativeEndian.Uint32(m[68:])
	return Socket{Inode: strconv.FormatUint(uint64(inode), 10), Addr: netip.AddrPortFrom(addr, sport)}, true
}
