package launch

import (
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
