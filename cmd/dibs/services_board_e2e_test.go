package main

import (
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestBoardServicesViewInTmux: a person serves a real HTTP server, opens
// the board in a real tmux pane, sees the service's GPU marked ⚙web on the
// grid, presses 6 and sees it healthy with its URL, then kills its process
// and watches the board count the restart, and stops it with x and y: the
// agent has no service left and its port no longer answers.
func TestBoardServicesViewInTmux(t *testing.T) {
	agenttest.RequireTmux(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	u := launchtest.User(t)
	tmuxDir := agenttest.TmuxDir(t)
	t.Setenv("TMUX_TMPDIR", tmuxDir)
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "2xL40S")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", p.socket, args...)
	}
	if out, errOut, code := dibs("serve", "web", "-g", "1", "--port", port, "--health", "/", "--", "python3", "-m", "http.server", port, "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}

	// The board as the service's owner, in a pane of its own.
	pane := newPane(t, 120, 30, []string{"TMUX_TMPDIR=" + tmuxDir},
		"runuser", "-u", u.Name, "--", "env", "HOME="+u.Home, "USER="+u.Name, "LANG=C.UTF-8", "TERM=xterm-256color", "PATH=/usr/bin:/bin",
		dibsBin, "--socket", p.socket)
	pane.waitFor(20*time.Second, "the grid to mark the service's GPU", func(s string) bool { return strings.Contains(s, "★⚙web") })
	pane.keys("6")
	row := func(s string) string {
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, "web") && strings.Contains(l, "http://node01:"+port) {
				return l
			}
		}
		return ""
	}
	s := pane.waitFor(30*time.Second, "the services view to show web healthy", func(s string) bool {
		return strings.Contains(row(s), "healthy")
	})
	// OWNER is 10 columns wide: a long user name is cut with "…".
	if r := row(s); !strings.Contains(r, "★web") || !strings.Contains(r, u.Name[:min(len(u.Name), 9)]) || !strings.Contains(r, "node01") {
		t.Fatalf("web's row %q does not name it as the caller's, its owner and node:\n%s", r, s)
	}

	// Its process killed: the supervisor restarts it, and the board shows
	// the restart without a key pressed.
	rows := servicesJSON(t, dibs)
	if len(rows) != 1 || rows[0].PID <= 0 {
		t.Fatalf("dibs services --json: %+v", rows)
	}
	if err := syscall.Kill(rows[0].PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 web's process %d: %v", rows[0].PID, err)
	}
	pane.waitFor(30*time.Second, "the board to count one restart and web healthy again", func(s string) bool {
		f := strings.Fields(row(s))
		// ★web OWNER node01 URL healthy UPTIME RESTARTS GPUS
		return len(f) == 8 && f[4] == "healthy" && f[6] == "1"
	})

	pane.keys("x")
	pane.waitFor(5*time.Second, "the question before stopping web", func(s string) bool { return strings.Contains(s, "stop service web?") })
	pane.keys("y")
	pane.waitFor(10*time.Second, "the board to say web stopped", func(s string) bool {
		return strings.Contains(s, "stopped service web") && row(s) == ""
	})
	if rows := servicesJSON(t, dibs); len(rows) != 0 {
		t.Fatalf("services after stopping from the board: %+v", rows)
	}
	agenttest.Eventually(t, 10*time.Second, "web's port to stop answering", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// servicesJSON is `dibs services --json` as the CLI's own rows.
func servicesJSON(t *testing.T, dibs func(args ...string) (string, string, int)) []serviceRow {
	t.Helper()
	out, errOut, code := dibs("services", "--json")
	var rows []serviceRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("dibs services --json: exit %d %q %q", code, out, errOut)
	}
	return rows
}
