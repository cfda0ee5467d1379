package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// freeRange finds a range of n ports free on every host given.
func freeRange(t testing.TB, n int, hosts ...string) service.PortRange {
	t.Helper()
	for range 50 {
		first := 20000 + rand.IntN(30000)
		ok := true
		for p := first; p < first+n && ok; p++ {
			for _, h := range hosts {
				ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
				if err != nil {
					ok = false
					break
				}
				ln.Close()
			}
		}
		if ok {
			return service.PortRange{First: first, Last: first + n - 1}
		}
	}
	t.Fatal("no free range of ports")
	return service.PortRange{}
}

// answerer is a replica stand-in: a TCP server that answers every line
// with its name and the line, until the client closes.
func answerer(t testing.TB, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s %s\n", name, sc.Text())
				}
				// The client half-closed: a last word after its EOF.
				fmt.Fprintf(c, "%s bye\n", name)
			}()
		}
	}()
	return ln.Addr().String()
}

// world is a fake cluster for proxies: the leases every node holds, and
// each node's replicas' addresses.
type world struct {
	mu     sync.Mutex
	nodes  []queue.NodeView
	addrOf map[string]string // lease id → replica address
}

func (w *world) view(self string) queue.ClusterView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := queue.ClusterView{Self: self, Now: time.Now()}
	for _, n := range w.nodes {
		n.Self = n.Name == self
		v.Nodes = append(v.Nodes, n)
	}
	return v
}

func (w *world) dialLocal(self string) func(ctx context.Context, id string) (net.Conn, error) {
	return func(ctx context.Context, id string) (net.Conn, error) {
		w.mu.Lock()
		addr, ok := w.addrOf[id]
		w.mu.Unlock()
		if node, _ := lease.NodeOfID(id); !ok || node != self {
			return nil, errors.New("no such replica here")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func svcLease(id, user, name string, proxyPort int, st service.State) lease.Lease {
	node, _ := lease.NodeOfID(id)
	return lease.Lease{ID: id, Node: node, User: user, Kind: lease.KindService,
		Service: &service.Service{Spec: service.Spec{Name: name, Port: 8000, ProxyPort: proxyPort}, Status: service.Status{State: st}}}
}

// twoProxies starts node01's proxy on 127.0.0.1 and node02's on
// 127.0.0.2 over w, with cfg's bounds.
func twoProxies(t testing.TB, w *world, ports service.PortRange, cfg Config) (*Proxy, *Proxy) {
	t.Helper()
	var ps []*Proxy
	for i, name := range []string{"node01", "node02"} {
		c := cfg
		c.Node, c.Ports, c.Host = name, ports, fmt.Sprintf("127.0.0.%d", i+1)
		c.Log = slog.New(slog.DiscardHandler)
		p, err := New(c, Deps{View: func() queue.ClusterView { return w.view(name) }, DialLocal: w.dialLocal(name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		p.Run()
		ps = append(ps, p)
	}
	return ps[0], ps[1]
}

func newWorld(ports service.PortRange, leases ...lease.Lease) *world {
	w := &world{addrOf: map[string]string{}}
	for i, name := range []string{"node01", "node02"} {
		n := queue.NodeView{Name: name, State: queue.NodeAlive, HasState: true,
			Addr: fmt.Sprintf("127.0.0.%d:7946", i+1)}
		for _, l := range leases {
			if l.Node == name {
				n.Leases = append(n.Leases, l)
			}
		}
		w.nodes = append(w.nodes, n)
	}
	return w
}

// ask sends one line through addr and returns the first line answered
// ("" when the connection was closed unanswered).
func ask(t testing.TB, addr, line string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s\n", line)
	got, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(got)
}

// TestProxyForwardsRoundRobinOnEveryNode: a service's port on either
// node's proxy answers, and its connections go to each healthy replica in
// turn — the remote one through its node's backend.
func TestProxyForwardsRoundRobinOnEveryNode(t *testing.T) {
	ports := freeRange(t, 4, "127.0.0.1", "127.0.0.2")
	port := ports.First + 1
	w := newWorld(ports,
		svcLease("node01-1", "alice", "llm", port, service.Healthy),
		svcLease("node02-1", "alice", "llm", port, service.Healthy),
		svcLease("node02-2", "alice", "llm", port, service.Unhealthy))
	w.addrOf["node01-1"] = answerer(t, "a")
	w.addrOf["node02-1"] = answerer(t, "b")
	w.addrOf["node02-2"] = answerer(t, "sick")
	p1, p2 := twoProxies(t, w, ports, Config{})
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		poll.Until(t, 10*time.Second, "the proxy listens on "+addr, func() bool { return ask(t, addr, "hi") != "" })
		seen := map[string]int{}
		for range 6 {
			seen[ask(t, addr, "hi")]++
		}
		if seen["a hi"] != 3 || seen["b hi"] != 3 {
			t.Fatalf("through %s: %v; want 3 answers from each healthy replica, none from the unhealthy one", addr, seen)
		}
	}
	for _, p := range []*Proxy{p1, p2} {
		if got := p.Ports(); len(got) != 1 || got[0] != port {
			t.Errorf("%s listens on %v, want [%d]", p.cfg.Node, got, port)
		}
		c := p.Counts()
		if len(c) != 1 || c[0].Forwarded < 6 || c[0].Refused != 0 || c[0].Key != (Key{"alice", "llm"}) {
			t.Errorf("%s counts %+v", p.cfg.Node, c)
		}
	}
}

// TestProxyBoundsRefuse: beyond proxy_max_per_service a connection is
// closed at once and counted refused, and one is served again once the
// first ends.
func TestProxyBoundsRefuse(t *testing.T) {
	ports := freeRange(t, 3, "127.0.0.1", "127.0.0.2")
	port := ports.First + 1
	w := newWorld(ports, svcLease("node01-1", "alice", "llm", port, service.Healthy))
	w.addrOf["node01-1"] = answerer(t, "a")
	p1, _ := twoProxies(t, w, ports, Config{MaxPerService: 1})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	poll.Until(t, 10*time.Second, "the proxy answers", func() bool { return ask(t, addr, "hi") == "a hi" })
	poll.Until(t, 10*time.Second, "the first connections end", func() bool { return p1.active.Load() == 0 })
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(held, "hold\n")
	held.SetDeadline(time.Now().Add(5 * time.Second))
	if got, _ := bufio.NewReader(held).ReadString('\n'); got != "a hold\n" {
		t.Fatalf("held connection read %q", got)
	}
	if got := ask(t, addr, "more"); got != "" {
		t.Fatalf("a second connection beyond the bound of 1 was answered %q", got)
	}
	if c := p1.Counts(); len(c) != 1 || c[0].Refused != 1 {
		t.Fatalf("counts %+v, want one refused", c)
	}
	held.Close()
	poll.Until(t, 10*time.Second, "a connection is served once the held one ended", func() bool { return ask(t, addr, "again") == "a again" })
}

// TestProxyHalfCloseAndIdle: a client that shuts its write side still
// reads the whole answer; a connection silent both ways past the idle
// bound is closed.
func TestProxyHalfCloseAndIdle(t *testing.T) {
	ports := freeRange(t, 3, "127.0.0.1", "127.0.0.2")
	port := ports.First + 1
	w := newWorld(ports, svcLease("node02-1", "alice", "llm", port, service.Healthy))
	w.addrOf["node02-1"] = answerer(t, "b")
	twoProxies(t, w, ports, Config{IdleTimeout: 300 * time.Millisecond})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	poll.Until(t, 10*time.Second, "the proxy answers", func() bool { return ask(t, addr, "hi") == "b hi" })

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "one\ntwo\n")
	c.(*net.TCPConn).CloseWrite()
	all, err := io.ReadAll(c)
	if err != nil || string(all) != "b one\nb two\nb bye\n" {
		t.Fatalf("after a half-close the client read %q (%v), want every line and the last word", all, err)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	n, err := idle.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 8*time.Second {
		t.Fatalf("an idle connection read %d bytes, %v after %v: want it closed after the 300ms bound", n, err, time.Since(start))
	}
}

// TestBackendReachesOnlyRegisteredServices: the backend port answers "no"
// to a preface naming anything but a service of its node with a proxy
// port, and forwards nothing.
func TestBackendReachesOnlyRegisteredServices(t *testing.T) {
	ports := freeRange(t, 3, "127.0.0.1", "127.0.0.2")
	plain := svcLease("node02-2", "bob", "tb", 0, service.Healthy)
	run := lease.Lease{ID: "node02-3", Node: "node02", User: "bob"}
	w := newWorld(ports, svcLease("node02-1", "alice", "llm", ports.First+1, service.Healthy), plain, run)
	for _, id := range []string{"node02-1", "node02-2", "node02-3"} {
		w.addrOf[id] = answerer(t, id)
	}
	_, p2 := twoProxies(t, w, ports, Config{})
	try := func(id string) (string, error) {
		c, err := net.Dial("tcp", p2.BackendAddr())
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		pre, _ := EncodePreface(id)
		c.Write(pre)
		if err := readAnswer(byteReader{c}); err != nil {
			return "", err
		}
		fmt.Fprintf(c, "hi\n")
		got, _ := bufio.NewReader(c).ReadString('\n')
		return got, nil
	}
	if got, err := try("node02-1"); err != nil || got != "node02-1 hi\n" {
		t.Fatalf("the registered service: %q, %v", got, err)
	}
	for _, id := range []string{"node02-2", "node02-3", "node02-9", "node01-1"} {
		if got, err := try(id); err == nil || !strings.Contains(err.Error(), "no service of node02 with a proxy port holds lease "+id) {
			t.Errorf("lease %s through the backend: %q, %v; want refused", id, got, err)
		}
	}
	// Garbage gets a close, not an answer.
	c, err := net.Dial("tcp", p2.BackendAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("the backend answered %q to an HTTP request", b)
	}
}

// TestProxyHoldsTheWholeRange: every service port of the range is held
// open from the start, assigned or not, so no other program can bind one
// before (or after) a service is given it and receive its clients; a
// connection to a port no service has is closed at once, and a service
// gone leaves its port held and serving no one.
func TestProxyHoldsTheWholeRange(t *testing.T) {
	ports := freeRange(t, 4, "127.0.0.1", "127.0.0.2")
	port := ports.First + 1
	w := newWorld(ports, svcLease("node01-1", "alice", "llm", port, service.Starting))
	p1, _ := twoProxies(t, w, ports, Config{})
	if got := p1.Held(); got != 3 {
		t.Fatalf("the proxy holds %d ports of %s, want its 3 service ports", got, ports)
	}
	taken := func(what string) {
		t.Helper()
		for p := ports.First + 1; p <= ports.Last; p++ {
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				ln.Close()
				t.Fatalf("%s: another program bound port %d of the range", what, p)
			}
		}
	}
	closedAtOnce := func(what string, p int) {
		t.Helper()
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), time.Second)
		if err != nil {
			t.Fatalf("%s: port %d does not accept: %v", what, p, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
			t.Fatalf("%s: port %d gave %q, %v; want closed at once", what, p, b, err)
		}
	}
	taken("at start")
	closedAtOnce("a port no service has", ports.Last)
	poll.Until(t, 10*time.Second, "the starting service's port is served", func() bool { return slices.Equal(p1.Ports(), []int{port}) })
	w.mu.Lock()
	w.nodes[0].Leases = nil
	w.mu.Unlock()
	poll.Until(t, 10*time.Second, "the port of the service gone is no longer served", func() bool { return len(p1.Ports()) == 0 })
	taken("after the service is gone")
	closedAtOnce("the port of a service gone", port)
}

// TestProxyOpensAPortOfAnotherRangeOnlyWhileUsed: a service given a port
// outside this node's range (by a node with another one) is still served
// here, and its port is let go once the service is gone.
func TestProxyOpensAPortOfAnotherRangeOnlyWhileUsed(t *testing.T) {
	ports := freeRange(t, 3, "127.0.0.1", "127.0.0.2")
	other := freeRange(t, 1, "127.0.0.1", "127.0.0.2").First
	for other >= ports.First && other <= ports.Last {
		other = freeRange(t, 1, "127.0.0.1", "127.0.0.2").First
	}
	w := newWorld(ports, svcLease("node01-1", "alice", "llm", other, service.Starting))
	p1, _ := twoProxies(t, w, ports, Config{})
	poll.Until(t, 10*time.Second, "the port of another range is served", func() bool { return slices.Equal(p1.Ports(), []int{other}) })
	if got := p1.Held(); got != 2 {
		t.Errorf("the proxy holds %d ports of its range, want 2", got)
	}
	w.mu.Lock()
	w.nodes[0].Leases = nil
	w.mu.Unlock()
	poll.Until(t, 10*time.Second, "the port of another range is let go", func() bool {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(other)))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	})
}

func TestPortList(t *testing.T) {
	for _, c := range []struct {
		ports []int
		want  string
	}{{[]int{30001}, "30001"}, {[]int{30001, 30002, 30003, 30007, 30009, 30010}, "30001-30003,30007,30009-30010"}} {
		if got := portList(c.ports); got != c.want {
			t.Errorf("portList(%v) = %q, want %q", c.ports, got, c.want)
		}
	}
}

// TestProxyPortCarriedTwiceGoesToOne: two services carrying one port (two
// sides of a partition each admitted one) do not share it: the first by
// owner and name gets every connection.
func TestProxyPortCarriedTwiceGoesToOne(t *testing.T) {
	ports := freeRange(t, 3, "127.0.0.1", "127.0.0.2")
	port := ports.First + 1
	w := newWorld(ports,
		svcLease("node01-1", "bob", "llm", port, service.Healthy),
		svcLease("node02-1", "alice", "web", port, service.Healthy))
	w.addrOf["node01-1"] = answerer(t, "bob")
	w.addrOf["node02-1"] = answerer(t, "alice")
	twoProxies(t, w, ports, Config{})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	poll.Until(t, 10*time.Second, "the proxy answers", func() bool { return ask(t, addr, "hi") != "" })
	for range 4 {
		if got := ask(t, addr, "hi"); got != "alice hi" {
			t.Fatalf("got %q, want alice's service only (alice/web sorts before bob/llm)", got)
		}
	}
}
