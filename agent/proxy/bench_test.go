package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/service"
)

// BenchmarkForwardedRoundTrip is the proxy's overhead on a request: one
// line sent and its answer read, straight to the replica (direct), through
// the proxy to a replica of its own node (local), and through the proxy
// and the replica's node's backend (remote); on a connection kept open
// (keepalive) and on a new connection per request (connect), which adds
// the dials, the preface and its answer. The owner check is the test's
// stand-in here: the agent's adds two reads of /proc/self/net/tcp{,6} per
// connection (BenchmarkListeningSocketsIn in launch).
//
//	go test -run XXX -bench ForwardedRoundTrip -benchtime 3000x ./agent/proxy
func BenchmarkForwardedRoundTrip(b *testing.B) {
	replica := answerer(b, "a")
	fronts := map[string]string{"direct": replica}
	for _, where := range []string{"local", "remote"} {
		ports := freeRange(b, 3, "127.0.0.1", "127.0.0.2")
		port := ports.First + 1
		id := map[string]string{"local": "node01-1", "remote": "node02-1"}[where]
		w := newWorld(ports, svcLease(id, "alice", "llm", port, service.Healthy))
		w.addrOf[id] = replica
		twoProxies(b, w, ports, Config{})
		front := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		poll.Until(b, 10*time.Second, "the proxy answers", func() bool { return ask(b, front, "hi") == "a hi" })
		fronts[where] = front
	}
	for _, where := range []string{"direct", "local", "remote"} {
		front := fronts[where]
		b.Run(where+"/keepalive", func(b *testing.B) {
			c, err := net.Dial("tcp", front)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			b.ResetTimer()
			for range b.N {
				fmt.Fprintf(c, "x\n")
				if _, err := r.ReadString('\n'); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(where+"/connect", func(b *testing.B) {
			for range b.N {
				if got := ask(b, front, "x"); got != "a x" {
					b.Fatalf("answer %q", got)
				}
			}
		})
	}
}
