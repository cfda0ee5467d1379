package agenttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreePort is a loopback port free now for both TCP and UDP (memberlist
// binds both), chosen below the kernel's ephemeral range. A port the
// kernel hands out for ":0" lies in that range, so between the pick and
// the bind any outgoing connection (the agents' own gossip among them) may
// take it as its local port; a port below the range is taken only by a
// listener that names it. A test that restarts an agent binds its port
// again, so this matters after the first start too.
func FreePort(tb testing.TB) int {
	tb.Helper()
	lo := ephemeralLow()
	const floor = 10000
	for range 500 {
		port := floor + rand.IntN(lo-floor)
		if portFree(port) {
			return port
		}
	}
	tb.Fatalf("no port free for both TCP and UDP in %d-%d", floor, lo-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when the range cannot be read or leaves too little below).
func ephemeralLow() int {
	lo, hi := 32768, 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo, &hi)
	}
	if lo < 20000 {
		lo = 32768
	}
	return lo
}

// portFree says whether port can be bound on loopback for TCP and UDP.
func portFree(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
