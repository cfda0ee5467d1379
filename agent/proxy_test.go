package agent_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/service"
)

// The services proxy (issue 33) is tested with real agents gossiping on
// two loopback addresses (node01 on 127.0.0.1, node02 on 127.0.0.2: each
// its own proxy ports, as two machines), a real HTTP server as the
// service in real tmux as a throwaway user, and another real user as the
// stranger who binds the service's port while it is down.

// proxyRange is a range of n ports free on both nodes' addresses.
func proxyRange(t testing.TB, n int) service.PortRange {
	t.Helper()
	for range 50 {
		first := 20000 + rand.IntN(30000)
		free := true
		for p := first; p < first+n && free; p++ {
			for _, h := range []string{"127.0.0.1", "127.0.0.2"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return service.PortRange{First: first, Last: first + n - 1}
		}
	}
	t.Fatal("no free range of ports")
	return service.PortRange{}
}

// body is what GET url answers with 200, trimmed; "" for anything else.
func body(url string) string {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
	if r.StatusCode != 200 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeAs writes text to name in u's home as u.
func writeAs(t *testing.T, u launch.User, name, text string) {
	t.Helper()
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", fmt.Sprintf("echo %s > %s", text, filepath.Join(u.Home, name))); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestProxyAnswersOnEveryNodeFollowsARestartAndGivesAStrangerNoTraffic(t *testing.T) {
	agenttest.RequireTmux(t)
	needPython(t)
	u := launchtest.User(t)
	other := launchtest.User(t)
	ports := proxyRange(t, 4)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, ServiceRules: fastRules(),
		Proxy: &agent.ProxySettings{Ports: ports, MaxPerService: 3}, MetricsListen: "127.0.0.1:0"})
	port := agenttest.FreePort(t)
	writeAs(t, u, "who.txt", "service")
	hold := filepath.Join(u.Home, "hold")
	// The service waits while the hold file exists, so the stranger can
	// take its port between a kill and the restart. It listens on the
	// loopback only: the proxy reaches it through node01's agent.
	script := fmt.Sprintf("while [ -e %s ]; do sleep 0.1; done; exec %s -m http.server %d --bind 127.0.0.1", hold, python, port)
	me := nodes[0].Agent.For(u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Node: "node01", Run: &api.RunSpec{Command: []string{script}, Dir: u.Home},
		Service: &service.Spec{Name: "web", Port: port}}); err != nil {
		t.Fatal(err)
	}
	l := waitHealthy(t, me, "web", 30*time.Second)
	proxyPort := ports.First + 1
	if l.Service.ProxyPort != proxyPort {
		t.Fatalf("the service's proxy port is %d, want %d (the lowest of %s after the backend)", l.Service.ProxyPort, proxyPort, ports)
	}
	via := func(node int) string { return fmt.Sprintf("http://127.0.0.%d:%d/who.txt", node, proxyPort) }
	for _, node := range []int{1, 2} {
		agenttest.Eventually(t, 20*time.Second, "the service answering through node0"+strconv.Itoa(node)+"'s proxy", func() bool {
			return body(via(node)) == "service"
		})
	}
	for _, n := range nodes {
		if got := n.Agent.ProxyPorts(); !slices.Equal(got, []int{proxyPort}) {
			t.Fatalf("%s's proxy listens on %v, want [%d]", n.Agent.Node(), got, proxyPort)
		}
	}

	// Past proxy_max_per_service (3) a connection is closed unanswered.
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.2:%d", proxyPort))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	agenttest.Eventually(t, 10*time.Second, "a fourth connection refused while three are held", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.2:%d", proxyPort))
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(c, "GET /who.txt HTTP/1.0\r\n\r\n")
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
	})
	for _, c := range held {
		c.Close()
	}
	// node02's metrics count what its proxy forwarded and refused.
	for _, outcome := range []string{"forwarded", "refused"} {
		if v := proxyCount(t, nodes[1].Agent.MetricsAddr(), "web", outcome); v < 1 {
			t.Fatalf("node02's dibs_proxy_connections_total{service=web,outcome=%s} is %v, want at least 1", outcome, v)
		}
	}
	agenttest.Eventually(t, 10*time.Second, "served again once the held connections closed", func() bool { return body(via(2)) == "service" })

	// Sample through both proxies from the kill until the service is
	// back: never the stranger's answer.
	var mu sync.Mutex
	seen := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, node := range []int{1, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b := body(via(node))
				mu.Lock()
				seen[b]++
				mu.Unlock()
			}
		}()
	}
	if out, err := launchtest.Run(t, u, nil, "/bin/sh", "-c", "touch "+hold); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := syscall.Kill(listenerPID(t, nodes[0], u, l.Session, port), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stranger := exec.Command(python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1")
	cred, err := launch.Credential(other)
	if err != nil {
		t.Fatal(err)
	}
	writeAs(t, other, "who.txt", "stranger")
	stranger.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stranger.Dir = other.Home
	agenttest.Eventually(t, 10*time.Second, "the stranger's server on the service's port", func() bool {
		if stranger.Process == nil {
			if err := stranger.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
		}
		return body(fmt.Sprintf("http://127.0.0.1:%d/who.txt", port)) == "stranger"
	})
	// The owner check at forward time: node01's backend, asked straight
	// for the service's lease (as a proxy whose view still says healthy
	// would), refuses to connect to the stranger's listener.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports.First))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "dibs-proxy/1 %s\n", l.ID)
	answer, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	t.Logf("node01's backend, asked for the service while the stranger holds its port: %q", answer)
	if !strings.HasPrefix(answer, "no ") {
		t.Fatalf("node01's backend answered %q for the service's lease while a stranger holds its port: want a refusal", answer)
	}
	// An absence check: the samplers run through the stranger's whole
	// time on the port (the window is what is watched, not a delay).
	poll.Never(t, 2*time.Second, "the stranger's answer came through the proxy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["stranger"] > 0
	})
	stranger.Process.Kill()
	stranger.Wait()
	if out, err := launchtest.Run(t, u, nil, "/bin/rm", "-f", hold); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, node := range []int{1, 2} {
		agenttest.Eventually(t, 30*time.Second, "the restarted service answering through node0"+strconv.Itoa(node)+"'s proxy", func() bool {
			return body(via(node)) == "service"
		})
	}
	close(stop)
	wg.Wait()
	if seen["stranger"] > 0 || seen["service"] == 0 {
		t.Fatalf("through the proxies: %v; want the service's answers and never the stranger's", seen)
	}
	t.Logf("samples through the proxies across the kill, the stranger and the restart: %v", seen)
}

// proxyCount is dibs_proxy_connections_total of service and outcome in
// the agent's /metrics at addr, -1 when absent.
func proxyCount(t *testing.T, addr, svc, outcome string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "dibs_proxy_connections_total{") && strings.Contains(line, `outcome="`+outcome+`"`) && strings.Contains(line, `service="`+svc+`"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestProxyPortsAreAssignedFromTheRangeAndOffOpensNone: services get the
// lowest free port of the range, a full range is a one-line refusal, a
// stopped service's port is given again; with the proxy off no service
// gets one and nothing listens on the range.
func TestProxyPortsAreAssignedFromTheRangeAndOffOpensNone(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	ports := proxyRange(t, 3)
	n := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "2xL40S", ServiceRules: fastRules(), Proxy: &agent.ProxySettings{Ports: ports}})
	me := n.Agent.For(u.UID)
	run := &api.RunSpec{Command: []string{"sleep", "600"}, Dir: u.Home}
	got := map[string]int{}
	for _, name := range []string{"a", "b"} {
		// A port asked for by the client is only a hint: it is replaced.
		if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: name, Port: agenttest.FreePort(t), ProxyPort: 22}}); err != nil {
			t.Fatal(err)
		}
		l, _ := serviceOf(t, me, name)
		got[name] = l.Service.ProxyPort
	}
	if got["a"] != ports.First+1 || got["b"] != ports.First+2 {
		t.Fatalf("proxy ports %v, want a=%d b=%d", got, ports.First+1, ports.First+2)
	}
	_, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: "c", Port: agenttest.FreePort(t)}})
	want := fmt.Sprintf("every port of the services proxy (services.proxy_ports %s) is taken by another service", ports)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a service past the range: %v, want one line saying %q", err, want)
	}
	// Without a port there is nothing to forward to: no proxy port.
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: "noport"}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := serviceOf(t, me, "noport"); l.Service.ProxyPort != 0 {
		t.Fatalf("a service without a port got proxy port %d", l.Service.ProxyPort)
	}
	agenttest.Eventually(t, 10*time.Second, "the proxy listening on both services' ports", func() bool {
		return slices.Equal(n.Agent.ProxyPorts(), []int{ports.First + 1, ports.First + 2})
	})
	a, _ := serviceOf(t, me, "a")
	if _, err := me.Release(ctx(t), api.ReleaseRequest{IDs: []string{a.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the stopped service's proxy port closed", func() bool {
		return slices.Equal(n.Agent.ProxyPorts(), []int{ports.First + 2})
	})
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: "d", Port: agenttest.FreePort(t)}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := serviceOf(t, me, "d"); l.Service.ProxyPort != ports.First+1 {
		t.Fatalf("a new service got proxy port %d, want the freed %d", l.Service.ProxyPort, ports.First+1)
	}
	n.Stop()

	// The proxy off (the default): no proxy port, nothing listening.
	off := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "2xL40S", ServiceRules: fastRules()})
	me = off.Agent.For(u.UID)
	if _, err := me.Claim(ctx(t), api.ClaimRequest{Run: run, Service: &service.Spec{Name: "e", Port: agenttest.FreePort(t), ProxyPort: ports.First + 1}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := serviceOf(t, me, "e"); l.Service.ProxyPort != 0 {
		t.Fatalf("with the proxy off a service got proxy port %d", l.Service.ProxyPort)
	}
	if p := off.Agent.ProxyPorts(); len(p) != 0 {
		t.Fatalf("with the proxy off the agent listens on %v", p)
	}
	for p := ports.First; p <= ports.Last; p++ {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
			c.Close()
			t.Fatalf("with the proxy off something listens on port %d of the range", p)
		}
	}
}
