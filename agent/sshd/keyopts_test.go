package sshd_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/sshd"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// syncBuf is a process's output, written by exec while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// boardDoor starts an agent (2 simulated GPUs) and, in front of it, a
// front door built here so that the test reads its log lines; deps, when
// set, changes its dependencies (a fake clock, a test hook) before it
// starts.
func boardDoor(t *testing.T, s sshd.Settings, deps func(*sshd.Deps)) (*sshd.Server, *lineCounter) {
	t.Helper()
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	s.Listen = "127.0.0.1:0"
	s.HostKeyPath = filepath.Join(t.TempDir(), "host_key")
	lines := &lineCounter{}
	d := sshd.Deps{Service: n.Agent.Service(), Accounts: account.NewDirectory("node01", account.System{}, "", time.Now),
		Node: "node01", Terminal: n.Sessions.TerminalCommand, ReadUserFile: n.Sessions.ReadUserFile, Log: slog.New(lines)}
	if deps != nil {
		deps(&d)
	}
	srv, err := sshd.Listen(s, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, lines
}

// opensshKey makes an ed25519 key pair with ssh-keygen: the private key's
// path and the public key's line.
func opensshKey(t *testing.T) (priv, pub string) {
	t.Helper()
	prereq.Command(t, "ssh", "apt-get install openssh-client")
	priv = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", priv).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	b, err := os.ReadFile(priv + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return priv, strings.TrimSpace(string(b))
}

// sshBoard runs the OpenSSH client against the front door, asking for a
// terminal, as a person opening the board does. It returns what the
// client printed and whether the board appeared (then the client is
// ended) or the client exited.
func sshBoard(t *testing.T, addr, src, user, priv string) (out string, board bool) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command("ssh", "-F", "/dev/null", "-tt", "-i", priv, "-p", port, "-b", src,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey", "-o", "ConnectTimeout=10",
		user+"@"+host)
	var buf syncBuf
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return buf.String(), false
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			t.Fatalf("ssh neither showed the board nor exited in 20 s: %q", buf.String())
		case <-tick.C:
			if strings.Contains(buf.String(), "2 GPUs") {
				// Quit the board as a person does (a killed client races
				// the PTY's close against the board's reader, in the
				// libraries, under -race).
				for range 20 {
					stdin.Write([]byte("q"))
					select {
					case <-exited:
						return buf.String(), true
					case <-time.After(time.Second):
					}
				}
				cmd.Process.Kill()
				<-exited
				return buf.String(), true
			}
		}
	}
}

// writeAuthorizedKeys writes the user's own authorized_keys, theirs.
func writeAuthorizedKeys(t *testing.T, u launch.User, content string) {
	t.Helper()
	dir := filepath.Join(u.Home, ".ssh")
	os.MkdirAll(dir, 0o700)
	os.Chown(dir, u.UID, u.GID)
	p := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, u.UID, u.GID)
}

// keyOptionCases are authorized_keys options and what the board does with
// a key carrying them, used from SRC (a loopback address of its own, so
// that each refusal is logged): "board" (it opens),
// "denied" (the key is refused: the log says why), or "no terminal" (the
// key is accepted and the session refused with a line that says why).
var keyOptionCases = []struct {
	opts string
	want string
	why  string // in the log line (denied) or the client's output (no terminal)
}{
	{``, "board", ""},
	{`from="10.9.9.9"`, "denied", "not permitted from SRC"},
	{`from="SRC"`, "board", ""},
	{`from="127.0.0.0/8"`, "board", ""},
	{`from="10.*,127.0.?.??"`, "board", ""},
	{`from="*,!SRC"`, "denied", "not permitted from SRC"},
	{`from="!127.0.0.0/8,*"`, "denied", "not permitted from SRC"},
	{`from="127.0.0.1/8"`, "denied", "invalid from="},
	{`expiry-time="20200101"`, "denied", "key expired"},
	{`expiry-time="20991231"`, "board", ""},
	{`cert-authority`, "denied", "cert-authority"},
	{`principals="nobody"`, "denied", "principals="},
	{`cert-authority,principals="nobody"`, "denied", "cert-authority"},
	{`command="/bin/true"`, "denied", "command="},
	{`frobnicate`, "denied", "unknown option"},
	{`no-pty`, "no terminal", "marked no-pty"},
	{`restrict`, "no terminal", "marked restrict"},
	{`restrict,pty`, "board", ""},
	{`no-port-forwarding,no-agent-forwarding,no-X11-forwarding`, "board", ""},
}

// Broken 3 of the fourth round: the board ignored authorized_keys
// options other than command=: a key marked from="10.9.9.9" (used from
// 127.0.0.1), an expired expiry-time, cert-authority, restrict, no-pty or
// principals="nobody" logged in and could claim. Each is honoured as sshd
// honours it, in the user's own authorized_keys and in the users file,
// tried with the OpenSSH client.
func TestKeyOptionsAreHonoured(t *testing.T) {
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	u := launchtest.User(t)
	priv, pub := opensshKey(t)
	usersFile := filepath.Join(t.TempDir(), "users")
	os.WriteFile(usersFile, []byte(u.Name+" "+pub+"\n"), 0o644)
	// The doors' clock moves past the refusal log's interval before each
	// try, so that every refusal is logged.
	clk := clock.NewFake(time.Now())
	withClock := func(d *sshd.Deps) { d.Clock = clk }
	own, ownLog := boardDoor(t, sshd.Settings{}, withClock)
	file, fileLog := boardDoor(t, sshd.Settings{UsersFile: usersFile}, withClock)
	for _, where := range []struct {
		name  string
		srv   *sshd.Server
		lines *lineCounter
		write func(opts string)
	}{
		{"authorized_keys", own, ownLog, func(opts string) { writeAuthorizedKeys(t, u, strings.TrimSpace(opts+" "+pub)+"\n") }},
		{"users file", file, fileLog, func(opts string) {
			os.WriteFile(usersFile, []byte(u.Name+" "+strings.TrimSpace(opts+" "+pub)+"\n"), 0o644)
		}},
	} {
		for i, c := range keyOptionCases {
			if where.name == "users file" && c.opts == "frobnicate" {
				continue // a malformed users file is refused whole: TestUsersFileOptionErrors
			}
			src := fmt.Sprintf("127.0.%d.%d", 1+len(where.name)%2, 10+i)
			opts, why := strings.ReplaceAll(c.opts, "SRC", src), strings.ReplaceAll(c.why, "SRC", src)
			t.Run(where.name+"/"+c.opts, func(t *testing.T) {
				where.write(opts)
				clk.Advance(time.Minute)
				before, _ := where.lines.matching(why)
				out, board := sshBoard(t, where.srv.Addr(), src, u.Name, priv)
				switch c.want {
				case "board":
					if !board {
						_, all := where.lines.matching("refused")
						t.Fatalf("a key with %q did not get the board: %q; log: %q", opts, out, all)
					}
				case "denied":
					if board || !strings.Contains(out, "Permission denied") {
						t.Fatalf("a key with %q: board=%v, ssh said %q; want Permission denied", opts, board, out)
					}
					if n, all := where.lines.matching(why); n <= before {
						t.Fatalf("no log line says %q; the log: %q", why, all)
					}
				case "no terminal":
					if board || !strings.Contains(out, c.why) || !strings.Contains(out, "allows no terminal") {
						t.Fatalf("a key with %q: board=%v, ssh said %q; want a line saying it is %s", c.opts, board, out, c.why)
					}
					if n, _ := where.lines.matching("the key allows no terminal"); n == 0 {
						t.Fatal("the refused session was not logged")
					}
				}
			})
		}
	}
}

// A users file with a malformed option is refused at start, with a line
// naming the file, the line and the option.
func TestUsersFileOptionErrors(t *testing.T) {
	t.Parallel()
	_, pub := opensshKey(t)
	for _, c := range []struct{ opts, want string }{
		{`frobnicate`, `unknown option "frobnicate"`},
		{`from="10.0.0.1/8"`, `invalid from="10.0.0.1/8"`},
		{`expiry-time="2020"`, `invalid expiry-time="2020"`},
		{`from=10.0.0.1`, `option from: value not in double quotes`},
	} {
		dir := t.TempDir()
		users := filepath.Join(dir, "users")
		os.WriteFile(users, []byte("# team\nalice "+c.opts+" "+pub+"\n"), 0o644)
		_, err := sshd.Listen(sshd.Settings{Listen: "127.0.0.1:0", UsersFile: users, HostKeyPath: filepath.Join(dir, "hk")}, sshd.Deps{})
		if err == nil || !strings.Contains(err.Error(), users+":2: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("users file with %s: %v; want %s:2: ... %s", c.opts, err, users, c.want)
		}
	}
}
