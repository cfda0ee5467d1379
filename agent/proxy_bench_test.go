package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/service"
)

// lineServer is a service that answers every line with "a LINE": small
// enough that the proxy's share of a round trip shows.
const lineServer = `import socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(b"a " + line)
            self.wfile.flush()
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// BenchmarkProxyRoundTripRealAgents is a request's round trip through
// real agents' proxies, with the real owner check, against the same
// request straight to the service: on node01's proxy (the replica's own
// node) and node02's (through node01's backend), on a connection kept
// open and on a new connection per request.
//
//	go test -run XXX -bench ProxyRoundTripRealAgents -benchtime 1000x ./agent
func BenchmarkProxyRoundTripRealAgents(b *testing.B) {
	agenttest.RequireTmux(b)
	if _, err := os.Stat(python); err != nil {
		b.Skip("needs /usr/bin/python3 as the service")
	}
	u := launchtest.User(b)
	ports := proxyRange(b, 3)
	nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, ServiceRules: fastRules(),
		Proxy: &agent.ProxySettings{Ports: ports}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	me := nodes[0].Agent.For(u.UID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := me.Claim(ctx, api.ClaimRequest{Node: "node01", Run: &api.RunSpec{Command: []string{python, "-c", lineServer, strconv.Itoa(port)}, Dir: u.Home},
		Service: &service.Spec{Name: "line", Port: port}}); err != nil {
		b.Fatal(err)
	}
	roundTrip := func(c net.Conn, r *bufio.Reader) error {
		fmt.Fprintf(c, "x\n")
		got, err := r.ReadString('\n')
		if err == nil && got != "a x\n" {
			err = fmt.Errorf("answer %q", got)
		}
		return err
	}
	once := func(addr string) error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return roundTrip(c, bufio.NewReader(c))
	}
	proxy := strconv.Itoa(ports.First + 1)
	addrs := []struct{ name, addr string }{
		{"direct", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		{"node01-proxy", net.JoinHostPort("127.0.0.1", proxy)},
		{"node02-proxy", net.JoinHostPort("127.0.0.2", proxy)},
	}
	for _, a := range addrs {
		agenttest.Eventually(b, 60*time.Second, "the service answering at "+a.addr, func() bool { return once(a.addr) == nil })
	}
	for _, a := range addrs {
		b.Run(a.name+"/keepalive", func(b *testing.B) {
			c, err := net.Dial("tcp", a.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			b.ResetTimer()
			for range b.N {
				if err := roundTrip(c, r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(a.name+"/connect", func(b *testing.B) {
			for range b.N {
				if err := once(a.addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
