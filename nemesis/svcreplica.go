package nemesis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The nemesis's services are this file's tiny HTTP server, run by the test
// binary itself (ServiceMain): every answer says which copy answered — its
// node, its lease, its process and a token drawn at each start — so the
// observer tells two copies apart, and a restart in place from the same
// process.
//
// Every agent of a run shares one machine and so one loopback, where real
// nodes each have their own addresses. A copy therefore listens twice on
// its service's port: on its node's own address (nodeAddr: 127.0.1.N for
// node N, where the observer asks, one address per node as a node's IP
// is), and on 127.0.0.1 with SO_REUSEPORT, where its supervisor's health
// check asks (agent/node/supervise.go dials 127.0.0.1). Two copies on two
// nodes thus never fight over a port, as on separate machines; the one
// liberty taken is that a node's health check may be answered by another
// node's copy sharing 127.0.0.1 — the supervisor still requires its own
// replica's process to hold a listener on the port (launch.ListenerOf).

// soReusePort is SO_REUSEPORT on Linux (x86, arm), which package syscall
// does not name: every copy of a service binds the shared loopback's port.
const soReusePort = 0xf

// replicaArg is the first argument that makes a test binary a service
// replica rather than a test run.
const replicaArg = "nemesis-service-replica"

// ServiceMain makes the process one of the nemesis's service replicas when
// its arguments say so, and then never returns. A test binary whose tests
// call Run calls it first in its TestMain: the services Run starts are
// that same binary (os.Executable), run as `BINARY nemesis-service-replica
// PORT NODE=ADDR,...`.
func ServiceMain() {
	if len(os.Args) < 2 || os.Args[1] != replicaArg {
		return
	}
	if err := serveReplica(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "nemesis service replica:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// replicaCommand is the command of a service answering on port, for the
// nodes named (each node's copy listens on its own address).
func replicaCommand(exe string, port int, nodes []string) []string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n + "=" + nodeAddr(i)
	}
	return []string{exe, replicaArg, strconv.Itoa(port), strings.Join(addrs, ",")}
}

// nodeAddr is the loopback address that stands for the i-th node's own
// (127.0.1.1 for the first).
func nodeAddr(i int) string { return fmt.Sprintf("127.0.1.%d", i+1) }

// replicaAnswer is what a copy answers on every path.
type replicaAnswer struct {
	Node, Lease string
	PID         int
	Token       string
}

func (a replicaAnswer) String() string {
	return fmt.Sprintf("nemesis-replica node=%s lease=%s pid=%d token=%s\n", a.Node, a.Lease, a.PID, a.Token)
}

// parseAnswer reads a copy's answer ("" fields are missing).
func parseAnswer(body string) (replicaAnswer, bool) {
	f := strings.Fields(body)
	if len(f) != 5 || f[0] != "nemesis-replica" {
		return replicaAnswer{}, false
	}
	var a replicaAnswer
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "node":
			a.Node = v
		case "lease":
			a.Lease = v
		case "pid":
			a.PID, _ = strconv.Atoi(v)
		case "token":
			a.Token = v
		}
	}
	return a, a.Node != "" && a.Token != ""
}

// serveReplica is a replica's life: listen on its node's address and on
// the shared loopback, answer until SIGTERM or SIGHUP (the fence's
// watchdog, a stop's tmux kill-session).
func serveReplica(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("want PORT NODE=ADDR,...; got %q", args)
	}
	port, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("port %q: %w", args[0], err)
	}
	node := os.Getenv("DIBS_NODE")
	addr := ""
	for _, kv := range strings.Split(args[1], ",") {
		if n, a, ok := strings.Cut(kv, "="); ok && n == node {
			addr = a
		}
	}
	if addr == "" {
		return fmt.Errorf("no address for node %q (DIBS_NODE) in %s", node, args[1])
	}
	tok := make([]byte, 8)
	rand.Read(tok)
	ans := replicaAnswer{Node: node, Lease: os.Getenv("DIBS_LEASE_ID"), PID: os.Getpid(), Token: hex.EncodeToString(tok)}

	// A copy restarted in place may start while its predecessor has not
	// quite let go of the node's address: try for a few seconds.
	var own net.Listener
	for start := time.Now(); ; {
		own, err = net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Since(start) > 5*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("listen on the node's address: %w", err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		})
		return errors.Join(err, serr)
	}}
	shared, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listen on the shared loopback: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			fmt.Fprint(w, ans)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	fmt.Printf("nemesis service replica on %s: %s", addr, ans)
	go srv.Serve(own)
	go srv.Serve(shared)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	<-sig
	// Gone at once, as a server killed by its signal is: nothing of it
	// answers after.
	own.Close()
	shared.Close()
	return nil
}
