package launch

import (
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket is one listening TCP socket: its inode, which names it for as
// long as it lives (another bind of the port is another inode), and its
// local address. The services proxy dials a replica's own socket by it
// and checks again after dialing that the same socket still listens.
type Socket struct {
	Inode string
	Addr  netip.AddrPort
}

// SocketsOf are the sockets process pid, running as uid, holds (its file
// descriptors) that listen on TCP port, read in pid's own network
// namespace; none when pid is gone, runs as another user (its number
// reused) or holds none. With ListenerOf's PID it names the socket a
// replica listens on.
func SocketsOf(pid, uid, port int) []Socket {
	if st, ok := readStatus("/proc", pid); !ok || st.realUID != uid {
		return nil
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	listening := ListeningSocketsIn(filepath.Join(proc, "net"), port)
	if len(listening) == 0 {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return nil
	}
	var out []Socket
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(proc, "fd", e.Name()))
		if err != nil {
			continue
		}
		ino, ok := strings.CutPrefix(target, "socket:[")
		if !ok {
			continue
		}
		ino = strings.TrimSuffix(ino, "]")
		for _, s := range listening {
			if s.Inode == ino {
				out = append(out, s)
			}
		}
	}
	return out
}

// ListeningSocketsIn reads the tcp and tcp6 tables of a /proc net
// directory (/proc/self/net: the caller's network namespace) and returns
// the sockets listening on port.
func ListeningSocketsIn(netDir string, port int) []Socket {
	var out []Socket
	for _, f := range []string{"tcp", "tcp6"} {
		if data, err := os.ReadFile(filepath.Join(netDir, f)); err == nil {
			out = append(out, ListeningSockets(string(data), port)...)
		}
	}
	return out
}

// ListeningSockets reads a /proc/net/tcp (or tcp6) table and returns the
// sockets listening (state 0A) on port, on any address.
func ListeningSockets(table string, port int) []Socket {
	var out []Socket
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 || f[3] != "0A" {
			continue
		}
		hexAddr, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		out = append(out, Socket{Inode: f[9], Addr: netip.AddrPortFrom(procAddr(hexAddr), uint16(p))})
	}
	return out
}

// procAddr decodes an address of /proc/net/tcp{,6}: the kernel prints
// each 32-bit word of it in the host's byte order (little-endian on every
// machine dibs runs on). A malformed one is the zero Addr.
func procAddr(h string) netip.Addr {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.Addr{}
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
