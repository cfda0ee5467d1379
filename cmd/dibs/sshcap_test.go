package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/dibs-gpu/dibs/agent/agenttest"
)

// lockedBuf is a session's output, written by the ssh client while the test
// reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSSHPerUserSessionCap: one person cannot open more boards than their
// cap (ssh.max_per_user), and the per-address cap does not lock others out:
// someone else behind the same address (a bastion) still gets in.
func TestSSHPerUserSessionCap(t *testing.T) {
	me, _ := user.Current()
	dir := agenttest.PublicDir(t)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users")
	os.WriteFile(users, []byte(me.Username+" "+string(gossh.MarshalAuthorizedKey(signer.PublicKey()))), 0o644)
	conf := filepath.Join(dir, "dibs.toml")
	port := agenttest.FreePort(t)
	os.WriteFile(conf, []byte(fmt.Sprintf("[ssh]\nlisten = \"127.0.0.1:%d\"\nusers_file = %q\nmax_per_user = 2\nmax_per_source = 4\n", port, users)), 0o644)
	startAgent(t, dir, "--sim", "2xL40S", "--config", conf)
	dial := func() *gossh.Client {
		c, err := gossh.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &gossh.ClientConfig{
			User: me.Username, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
			HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	board := func(c *gossh.Client) *lockedBuf {
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out := &lockedBuf{}
		s.Stdout, s.Stderr = out, out
		if err := s.RequestPty("xterm-256color", 30, 100, gossh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The agent answers on its socket before its SSH listener is up.
	agenttest.Eventually(t, 10*time.Second, "the SSH listener", func() bool {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	c := dial()
	a, b := board(c), board(c)
	agenttest.Eventually(t, 10*time.Second, "two boards drawn", func() bool {
		return strings.Contains(a.String(), "node01") && strings.Contains(b.String(), "node01")
	})
	third := board(c)
	agenttest.Eventually(t, 5*time.Second, "the third board to be refused", func() bool {
		return strings.Contains(third.String(), "you have 2 boards open already")
	})
	// Another connection from the same address still gets in (and its
	// board is refused only because it is the same person's third).
	board(dial())
}
