package sockapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/sockapi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestMain doubles as a tiny client for the tests that need one running as
// another user: with DIBS_TEST_STATUS set it asks that socket for the
// agent's status and prints the node's name.
func TestMain(m *testing.M) {
	if sock := os.Getenv("DIBS_TEST_STATUS"); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := api.NewClient(sock).Status(ctx)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("node", s.Node)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func limitedAgent(t *testing.T, l sockapi.Limits) *agenttest.Node {
	return agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true, Limits: l})
}

// closedByServer reports whether the server closes c within d (whatever it
// writes first).
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil || !os.IsTimeout(err)
}

// publicCopy copies this test binary where another user can run it.
func publicCopy(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst := agenttest.PublicDir(t) + "/sockapi.test"
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// One user holding many idle connections cannot take the socket from the
// others: connections over the per-uid cap are closed at once, and another
// user's request still goes through.
func TestPerUserConnectionCap(t *testing.T) {
	t.Parallel()
	other := launchtest.User(t)
	n := limitedAgent(t, sockapi.Limits{PerUID: 4})
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range 4 {
		c, err := net.Dial("unix", n.Socket)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("unix", n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedByServer(extra, 2*time.Second) {
		t.Error("a fifth connection from the same uid stayed open over the cap of 4")
	}
	if closedByServer(held[0], 100*time.Millisecond) {
		t.Error("a connection within the cap was closed")
	}
	// (A -race client would wait a second at exit for late race reports.)
	out, err := launchtest.Run(t, other, []string{"DIBS_TEST_STATUS=" + n.Socket, "GORACE=atexit_sleep_ms=0"}, publicCopy(t), "-test.run=^$")
	if err != nil || !strings.Contains(out, "node node01") {
		t.Errorf("another user's request while the first holds its cap: %v: %s", err, out)
	}
	// Closing one frees its place.
	held[0].Close()
	held = held[1:]
	agenttest.Eventually(t, 2*time.Second, "a new connection to be accepted once one closed", func() bool {
		_, err := n.Client.Status(context.Background())
		return err == nil
	})
}

// A request whose body comes a byte a second is cut off at the read
// timeout, and an idle keep-alive connection is closed at the idle timeout.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	n := limitedAgent(t, sockapi.Limits{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	slow, err := net.Dial("unix", n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /v1/claim HTTP/1.1\r\nHost: dibs\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"co")
	// (The server answers the broken request, then must hang up.)
	start := time.Now()
	if !closedByServer(slow, 3*time.Second) {
		t.Fatal("a request with a body that never completes kept its connection past the read timeout")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the slow request was cut off after %s, want about the 300ms read timeout", d)
	}

	idle, err := net.Dial("unix", n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /v1/status HTTP/1.1\r\nHost: dibs\r\n\r\n")
	r := bufio.NewReader(idle)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status over a raw connection: %q %v", line, err)
	}
	// Drain the reply, then stay idle.
	idle.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	io.Copy(io.Discard, r)
	idle.SetReadDeadline(time.Time{})
	if !closedByServer(idle, 3*time.Second) {
		t.Error("an idle keep-alive connection stayed open past the idle timeout")
	}
}
