package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// The test binary doubles as a fake agent or a client run as another user:
// tests copy it where that user can run it and start it with one of these.
const (
	envFake   = "DIBS_API_TEST_FAKE_AGENT" // serve a fake agent on this socket
	envClient = "DIBS_API_TEST_CLIENT"     // ask the agent on this socket for its status
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(envFake); sock != "" {
		os.Exit(runFakeAgent(sock))
	}
	if sock := os.Getenv(envClient); sock != "" {
		s, err := NewClient(sock).Status(context.Background())
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ok: node", s.Node)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// evilArgv is what an impostor would like the caller to run.
var evilArgv = []string{"sh", "-c", "echo pwned > /tmp/pwned"}

// fakeAgent is a plain HTTP server on a unix socket that records whether any
// byte reached it, answering as an agent would so that a client that does not
// check gets through.
type fakeAgent struct {
	srv    *http.Server
	mu     sync.Mutex
	conns  int
	bytes  int64
	closed func(n int64) // called as each connection closes
}

func newFakeAgent(attach []string) *fakeAgent {
	f := &fakeAgent{}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(Status{Node: "fake"})
	})
	mux.HandleFunc("/v1/attach", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(AttachResponse{Local: true, Command: attach})
	})
	mux.HandleFunc("/v1/watch", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(Board{})
	})
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return f
}

func (f *fakeAgent) serve(ln net.Listener) { f.srv.Serve(&countingListener{Listener: ln, f: f}) }

// received is how many connections and bytes reached the fake.
func (f *fakeAgent) received() (conns int, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.bytes
}

type countingListener struct {
	net.Listener
	f *fakeAgent
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.f.mu.Lock()
	l.f.conns++
	l.f.mu.Unlock()
	return &countingConn{Conn: c, f: l.f}, nil
}

type countingConn struct {
	net.Conn
	f    *fakeAgent
	n    int64
	once sync.Once
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.f.mu.Lock()
	c.f.bytes += int64(n)
	c.f.mu.Unlock()
	c.n += int64(n)
	return n, err
}

func (c *countingConn) Close() error {
	c.once.Do(func() {
		if c.f.closed != nil {
			c.f.closed(c.n)
		}
	})
	return c.Conn.Close()
}

// serveFakeAgent runs a fake agent in this process on sock.
func serveFakeAgent(t *testing.T, sock string, attach []string) *fakeAgent {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeAgent(attach)
	go f.serve(ln)
	t.Cleanup(func() { f.srv.Close() })
	return f
}

// runFakeAgent is the fake agent as a process of its own (run as another
// user): it says "listening", then "closed after N bytes" per connection.
func runFakeAgent(sock string) int {
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	os.Chmod(sock, 0o666)
	f := newFakeAgent(evilArgv)
	var mu sync.Mutex
	f.closed = func(n int64) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("closed after %d bytes\n", n)
	}
	fmt.Println("listening")
	f.serve(ln)
	return 0
}

// syncBuffer is a process's output that the test reads while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// publicDir is a root-owned directory every user may enter and none but root
// may write, like /run.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dibs-api-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testBinaryFor copies this test binary where u can run it.
func testBinaryFor(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(publicDir(t), "api.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startAs starts the test binary as u with env and returns its live output.
func startAs(t *testing.T, u launch.User, bin string, env ...string) *syncBuffer {
	t.Helper()
	cred, err := launch.Credential(u)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"HOME=" + u.Home, "PATH=" + launch.DefaultPath}, env...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return out
}

// runAs runs the test binary as u with env to completion.
func runAs(t *testing.T, u launch.User, bin string, env ...string) (string, error) {
	t.Helper()
	cred, err := launch.Credential(u)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"HOME=" + u.Home, "PATH=" + launch.DefaultPath}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// allCallsRefused makes every kind of connection a client opens: a request, an
// attach and the watch stream. Each must fail with a refusal containing want.
func allCallsRefused(t *testing.T, cl *Client, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	check := func(what string, err error) {
		t.Helper()
		var ue *UntrustedError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v\nwant a one-line refusal containing %q", what, err, want)
		}
	}
	_, err := cl.Status(ctx)
	check("status", err)
	r, err := cl.Attach(ctx, "")
	check("attach", err)
	if len(r.Command) != 0 {
		t.Errorf("attach returned %q alongside its refusal", r.Command)
	}
	ch, werr := cl.Watch(ctx)
	for range ch {
		t.Error("watch delivered a board from an untrusted socket")
	}
	check("watch", werr())
}

// The attack: with no system agent and no XDG_RUNTIME_DIR, the client used
// /tmp/dibs-UID/dibs.sock, which anyone may create first. A socket in a
// directory another user made is now refused before anything is dialled,
// however the path was chosen.
func TestRefusesSocketInAnotherUsersDirectory(t *testing.T) {
	mallory := launchtest.User(t)
	tmp := publicDir(t)
	os.Chmod(tmp, os.ModeSticky|0o777) // a /tmp of our own
	dir := filepath.Join(tmp, "dibs-0")
	if out, err := launchtest.Run(t, mallory, nil, "mkdir", "-m", "0755", dir); err != nil {
		t.Fatalf("mkdir as %s: %v: %s", mallory.Name, err, out)
	}
	sock := filepath.Join(dir, "dibs.sock")
	f := serveFakeAgent(t, sock, evilArgv)

	want := fmt.Sprintf("its directory %s belongs to uid %d (%s), not to root or you", dir, mallory.UID, mallory.Name)
	env := map[string]string{"DIBS_SOCKET": sock}
	allCallsRefused(t, NewClient(SocketPath("", func(k string) string { return env[k] })), want)
	allCallsRefused(t, NewClient(SocketPath(sock, os.Getenv)), want)
	if conns, n := f.received(); conns != 0 || n != 0 {
		t.Errorf("the fake agent got %d connections and %d bytes, want none", conns, n)
	}
	// The fake was listening and counting all along.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	defer c.Close()
	poll.Until(t, 10*time.Second, "the fake agent to count a direct write", func() bool { conns, n := f.received(); return conns == 1 && n == 1 })
}

// A socket in a good directory served by a process of another uid (a stale
// socket left there, a directory handed over later) is refused on the
// server's peer credentials, after connecting and before sending a byte.
func TestRefusesAgentRunByAnotherUser(t *testing.T) {
	mallory := launchtest.User(t)
	bin := testBinaryFor(t)
	dir := filepath.Join(publicDir(t), "dibs")
	mkdir(t, dir, 0o755, mallory.UID)
	sock := filepath.Join(dir, "dibs.sock")
	out := startAs(t, mallory, bin, envFake+"="+sock)
	poll.Until(t, 10*time.Second, "the fake agent to listen", func() bool { return strings.Contains(out.String(), "listening") })
	// Now the directory is root's and private: only the server gives it away.
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSocket(sock); err != nil {
		t.Fatalf("the directory should now pass: %v", err)
	}

	allCallsRefused(t, NewClient(sock), fmt.Sprintf("it is served by uid %d (%s), not by root or you, so it could be posing as the dibs agent (nothing was sent)", mallory.UID, mallory.Name))
	poll.Until(t, 10*time.Second, "the fake agent to see the 3 connections close", func() bool {
		return strings.Count(out.String(), "closed after") >= 3
	})
	if got := regexp.MustCompile(`closed after [1-9]`).FindString(out.String()); got != "" {
		t.Errorf("the fake agent received bytes:\n%s", out)
	}
}

// A personal agent (the caller's own uid, in the caller's own directory)
// works for its user, and root does not trust it.
func TestPersonalAgentServesItsOwnUser(t *testing.T) {
	alice := launchtest.User(t)
	bin := testBinaryFor(t)
	dir := filepath.Join(alice.Home, "run")
	if out, err := launchtest.Run(t, alice, nil, "mkdir", "-m", "0700", dir); err != nil {
		t.Fatalf("mkdir as %s: %v: %s", alice.Name, err, out)
	}
	sock := filepath.Join(dir, "dibs.sock")
	fake := startAs(t, alice, bin, envFake+"="+sock)
	poll.Until(t, 10*time.Second, "alice's agent to listen", func() bool { return strings.Contains(fake.String(), "listening") })

	out, err := runAs(t, alice, bin, envClient+"="+sock)
	if err != nil || strings.TrimSpace(out) != "ok: node fake" {
		t.Errorf("alice asking her own agent: %v: %s", err, out)
	}
	allCallsRefused(t, NewClient(sock), fmt.Sprintf("its directory %s belongs to uid %d (%s)", dir, alice.UID, alice.Name))
}

// A user's client trusts the system agent: root serving a root-owned
// directory.
func TestUserTrustsRootAgent(t *testing.T) {
	alice := launchtest.User(t)
	bin := testBinaryFor(t)
	dir := publicDir(t)
	sock := filepath.Join(dir, "dibs.sock")
	serveFakeAgent(t, sock, nil)
	os.Chmod(sock, 0o666)
	out, err := runAs(t, alice, bin, envClient+"="+sock)
	if err != nil || strings.TrimSpace(out) != "ok: node fake" {
		t.Errorf("alice asking root's agent: %v: %s", err, out)
	}
}

// The real thing: an agent run by the caller (root here, or whoever runs the
// tests) in a private directory answers every call, the watch stream too.
func TestTrustedAgentWorks(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dibs.sock")
	attach := []string{"tmux", "attach-session", "-t", "=dibs-node01-1"}
	serveFakeAgent(t, sock, attach)
	cl := NewClient(sock)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if s, err := cl.Status(ctx); err != nil || s.Node != "fake" {
		t.Errorf("status = %+v, %v", s, err)
	}
	if r, err := cl.Attach(ctx, ""); err != nil || strings.Join(r.Command, " ") != strings.Join(attach, " ") {
		t.Errorf("attach = %q, %v", r.Command, err)
	}
	ch, werr := cl.Watch(ctx)
	if _, ok := <-ch; !ok {
		t.Errorf("watch delivered no board: %v", werr())
	}
	cancel()
	for range ch {
	}
}

// An agent's attach command that is not tmux attach (or ssh to it) never
// reaches the caller.
func TestAttachRefusesOtherCommands(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dibs.sock")
	serveFakeAgent(t, sock, evilArgv)
	r, err := NewClient(sock).Attach(t.Context(), "")
	if err == nil || !strings.Contains(err.Error(), "refusing to run the attach command the agent sent") ||
		!strings.Contains(err.Error(), `sh -c 'echo pwned > /tmp/pwned'`) || len(r.Command) != 0 {
		t.Errorf("attach = %q, %v; want a refusal quoting the command", r.Command, err)
	}
}

func TestDescribeUID(t *testing.T) {
	if got := describeUID(0); got != "uid 0 (root)" {
		t.Errorf("describeUID(0) = %q", got)
	}
	if got := describeUID(1 << 30); got != "uid "+strconv.Itoa(1<<30) {
		t.Errorf("describeUID(unknown) = %q", got)
	}
}
