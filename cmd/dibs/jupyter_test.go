package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// viaSocket is an HTTP client that reaches the server the way `ssh -L
// PORT:SOCKET host` does: every request goes to the unix socket, with the
// Host the laptop's browser sends.
func viaSocket(sock string) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// viaSocketGet is one GET through the socket, returning the status.
func viaSocketGet(t *testing.T, sock, path string) (int, string) {
	t.Helper()
	resp, err := viaSocket(sock).Get("http://127.0.0.1:8888" + path)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, sock, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// requireNotebook skips unless Debian's jupyter-notebook is installed.
func requireNotebook(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/jupyter-notebook"); err != nil {
		prereq.Missing(t, "needs Debian's jupyter-notebook (apt-get install jupyter-notebook)")
	}
}

// TestCLIJupyterWithRealNotebook runs `dibs jupyter` with Debian's
// jupyter-notebook 6.4.12 as a test user (it refuses root): the tunnel
// line leads to a socket of the user's, the URL answers 200 with the
// token and refuses without it, the token shows nowhere public (the
// session's name, the process list), and the server and the lease end
// together, either way round.
func TestCLIJupyterWithRealNotebook(t *testing.T) {
	agenttest.RequireTmux(t)
	requireNotebook(t)
	u := launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})

	_, errOut, code := dibsAs(t, u, "/nonexistent", n.Socket, "jupyter", "-g", "1")
	if code == 0 || !strings.Contains(errOut, "jupyter is not installed") || !strings.Contains(errOut, "pip install") {
		t.Errorf("without jupyter: exit %d %q, want a clear refusal", code, errOut)
	}

	out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", n.Socket, "jupyter", "-g", "1", "--for", "2h", "--json")
	var j jupyterResult
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("dibs jupyter: exit %d %q %q", code, out, errOut)
	}
	if want := filepath.Join(u.Home, ".local/state/dibs/jupyter", j.Session+".sock"); j.Socket != want {
		t.Errorf("socket %q, want %q", j.Socket, want)
	}
	if want := fmt.Sprintf("ssh -N -L 8888:%s node01", j.Socket); j.SSH != want {
		t.Errorf("tunnel line %q, want %q", j.SSH, want)
	}
	if want := "http://127.0.0.1:8888/tree?token=" + j.Token; j.URL != want || len(j.Token) < 32 {
		t.Errorf("URL %q, want %q with a long token", j.URL, want)
	}
	if strings.Contains(j.Token, strings.TrimPrefix(j.Session, "jupyter-")) {
		t.Errorf("the session name %s (public: the board, dibs events) is part of the token", j.Session)
	}
	get := func(path string) (int, string) { return viaSocketGet(t, j.Socket, path) }
	if code, _ := get("/tree?token=" + j.Token); code != http.StatusOK {
		t.Errorf("the printed URL answered %d, want 200", code)
	}
	if code, loc := get("/tree"); code != http.StatusFound || !strings.Contains(loc, "/login") {
		t.Errorf("without the token: %d to %q, want a redirect to the login page", code, loc)
	}
	if code, _ := get("/api/status"); code != http.StatusForbidden {
		t.Errorf("the API without the token answered %d, want 403", code)
	}
	if code, _ := get("/api/status?token=wrong" + j.Token[5:]); code != http.StatusForbidden {
		t.Errorf("the API with a wrong token answered %d, want 403", code)
	}
	if ps, _ := exec.Command("ps", "-eo", "args").Output(); strings.Contains(string(ps), j.Token) {
		t.Errorf("the token shows in the process list")
	}

	// The lease ends when the server does.
	pid, err := n.Tmux(u.UID, "list-panes", "-t", "="+j.Session+":", "-F", "#{pane_pid}")
	if err != nil {
		t.Fatalf("find the server: %v %s", err, pid)
	}
	var p int
	fmt.Sscan(pid, &p)
	syscall.Kill(p, syscall.SIGTERM)
	agenttest.Eventually(t, 15*time.Second, "the lease to end with the server", func() bool { return !leaseLive(n.Board(), j.Lease) })

	// And the server ends when the lease does.
	out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", n.Socket, "jupyter", "--port", "9999")
	if code != 0 || !strings.Contains(out, "open the tunnel") || !strings.Contains(out, "ssh -N -L 9999:"+u.Home) || !strings.Contains(out, "http://127.0.0.1:9999/tree?token=") {
		t.Fatalf("dibs jupyter: exit %d\n%s\n%s", code, out, errOut)
	}
	id := strings.TrimSuffix(strings.Fields(out[strings.Index(out, "(lease ")+len("(lease "):])[0], ":")
	sock := strings.Fields(out[strings.Index(out, "-L 9999:")+len("-L 9999:"):])[0]
	if code, _ := viaSocketGet(t, sock, "/api/status"); code != http.StatusForbidden {
		t.Errorf("the second server's API without the token answered %d, want 403", code)
	}
	if _, errOut, code := dibsAs(t, u, "/usr/bin:/bin", n.Socket, "release", id); code != 0 {
		t.Fatalf("release %s: %s", id, errOut)
	}
	agenttest.Eventually(t, 15*time.Second, "the server to stop with its lease", func() bool {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
}

// TestCLIJupyterCannotBeHijacked: another user on the node who binds the
// port first (dibs once picked a port, started the server on it and
// printed the URL with the token as soon as anything listened there, so a
// watcher of /proc got the token) gains nothing: the server is reached
// through a socket in the holder's private directory, which the other
// user can neither connect to nor replace, and dibs checks the server it
// found answers with the token before it prints the URL.
func TestCLIJupyterCannotBeHijacked(t *testing.T) {
	agenttest.RequireTmux(t)
	requireNotebook(t)
	u, thief := launchtest.User(t), launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Quiet: true})

	// The thief listens on 127.0.0.1:PORT, logging every request it gets.
	port := 20000 + os.Getpid()%20000
	logf := filepath.Join(thief.Home, "stolen")
	steal := exec.Command("/usr/bin/python3", "-c", `
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(sys.argv[2], "a").write(self.path + "\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`, fmt.Sprint(port), logf)
	cred, err := launch.Credential(thief)
	if err != nil {
		t.Fatal(err)
	}
	steal.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	steal.Dir = thief.Home
	if err := steal.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { steal.Process.Kill(); steal.Wait() })
	agenttest.Eventually(t, 10*time.Second, "the thief's listener", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", n.Socket, "jupyter", "--port", fmt.Sprint(port), "--json")
	var j jupyterResult
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("dibs jupyter: exit %d %q %q", code, out, errOut)
	}
	// The tunnel leads to the holder's socket, not to whatever listens on
	// the node's port.
	if want := fmt.Sprintf("ssh -N -L %d:%s node01", port, filepath.Join(u.Home, ".local/state/dibs/jupyter", j.Session+".sock")); j.SSH != want {
		t.Errorf("tunnel %q, want %q", j.SSH, want)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(j.Socket, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || int(st.Uid) != u.UID || st.Mode&0o077 != 0 {
		t.Errorf("the server's socket: %v, mode %o, uid %d; want a socket of uid %d, mode 0600", err, st.Mode, st.Uid, u.UID)
	}
	if err := syscall.Lstat(filepath.Dir(j.Socket), &st); err != nil || int(st.Uid) != u.UID || st.Mode&0o777 != 0o700 {
		t.Errorf("the socket's directory: %v, mode %o, uid %d; want uid %d, mode 0700", err, st.Mode, st.Uid, u.UID)
	}
	// The thief can neither reach the server nor put a socket in its place.
	probe := `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("connected")
except OSError as e:
    print("refused", e.errno)
try:
    socket.socket(socket.AF_UNIX).bind(sys.argv[1] + ".x"); print("bound")
except OSError as e:
    print("cannot bind", e.errno)
`
	got, _ := launchtest.Run(t, thief, nil, "/usr/bin/python3", "-c", probe, j.Socket)
	if !strings.Contains(got, "refused 13") || !strings.Contains(got, "cannot bind 13") {
		t.Errorf("the other user, at the server's socket: %q; want permission denied both ways", got)
	}
	stolen, _ := os.ReadFile(logf)
	if strings.Contains(string(stolen), j.Token) {
		t.Errorf("the other user's listener got the token: %q", stolen)
	}
	if code, _ := func() (int, string) {
		resp, err := viaSocket(j.Socket).Get(j.URL)
		if err != nil {
			t.Fatalf("GET the URL through the socket: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode, ""
	}(); code != http.StatusOK {
		t.Errorf("the holder's URL through the tunnel answered %d, want 200", code)
	}
}
