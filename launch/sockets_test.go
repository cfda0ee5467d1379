package launch

import (
	"net"
	"slices"
	"testing"
)

// The proxy dials the address a replica's own socket listens on, so the
// address must read right: IPv4 loopback, any, and IPv6 loopback.
func TestListeningSocketsReadTheirAddress(t *testing.T) {
	v4 := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4343 1 0000000000000000 100 0 0 10 0
`
	v6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4545 1 0000000000000000 100 0 0 10 0
`
	var got []string
	for _, s := range append(ListeningSockets(v4, 8000), ListeningSockets(v6, 8000)...) {
		got = append(got, s.Inode+"@"+s.Addr.String())
	}
	want := []string{"4242@127.0.0.1:8000", "4343@0.0.0.0:8000", "4545@[::1]:8000"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// BenchmarkListeningSocketsIn is the proxy's owner check's cost per
// connection once a replica's socket is known: it reads the agent's
// socket tables twice (before dialing, and after).
func BenchmarkListeningSocketsIn(b *testing.B) {
	for range b.N {
		ListeningSocketsIn("/proc/self/net", 8000)
	}
}

// Listening (sock_diag) finds what /proc/self/net/tcp{,6} finds, faster.
func TestListeningMatchesProc(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", ":0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err)
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		diag, proc := Listening(port), ListeningSocketsIn("/proc/self/net", port)
		ln.Close()
		if len(diag) != 1 || !slices.Equal(diag, proc) {
			t.Fatalf("%s: sock_diag found %v, /proc %v; want the one listener in both", addr, diag, proc)
		}
	}
}

func BenchmarkListening(b *testing.B) {
	for range b.N {
		Listening(8000)
	}
}
