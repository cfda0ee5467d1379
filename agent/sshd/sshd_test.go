package sshd_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/user"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// frontDoor starts an agent whose SSH front door knows one key, for the
// test's own user (through a users file) or, with home set, in that user's
// own authorized_keys.
func frontDoor(t *testing.T, s agent.SSHSettings) (addr string, signer gossh.Signer, name string) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := user.Current()
	dir := agenttest.PublicDir(t)
	if s.UsersFile == "" {
		s.UsersFile = filepath.Join(dir, "users")
		os.WriteFile(s.UsersFile, []byte(me.Username+" "+string(gossh.MarshalAuthorizedKey(signer.PublicKey()))), 0o644)
	}
	s.Listen = "127.0.0.1:0"
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true, SSH: &s})
	return n.Agent.SSHAddr(), signer, me.Username
}

func dial(t *testing.T, addr, name string, signer gossh.Signer) (*gossh.Client, error) {
	t.Helper()
	return gossh.Dial("tcp", addr, &gossh.ClientConfig{
		User: name, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second,
	})
}

// A connection that authenticated and then opens no session is closed at
// the session deadline, instead of holding its place for ever.
func TestAuthenticatedConnectionWithoutSessionIsClosed(t *testing.T) {
	t.Parallel()
	addr, signer, name := frontDoor(t, agent.SSHSettings{SessionDeadline: 300 * time.Millisecond})
	c, err := dial(t, addr, name, signer)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		c.Close()
		t.Fatal("an authenticated connection with no session stayed open")
	}
}

// A hostile authorized_keys (a link to /dev/zero, or to a file only root
// may read) costs the agent nothing: the login is refused and the agent
// keeps serving.
func TestHostileAuthorizedKeysIsRefusedAndTheAgentLives(t *testing.T) {
	t.Parallel()
	u := launchtest.User(t)
	ssh := filepath.Join(u.Home, ".ssh")
	os.MkdirAll(ssh, 0o700)
	os.Chown(ssh, u.UID, u.GID)
	if err := os.Symlink("/dev/zero", filepath.Join(ssh, "authorized_keys")); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	s := agent.SSHSettings{Listen: "127.0.0.1:0"}
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true, SSH: &s})
	for range 3 {
		if c, err := dial(t, n.Agent.SSHAddr(), u.Name, signer); err == nil {
			c.Close()
			t.Fatal("a login through a link to /dev/zero was accepted")
		}
	}
	if _, err := n.Client.Status(t.Context()); err != nil {
		t.Fatalf("the agent after the logins: %v", err)
	}
	// The same key written properly lets the user in.
	os.Remove(filepath.Join(ssh, "authorized_keys"))
	os.WriteFile(filepath.Join(ssh, "authorized_keys"), gossh.MarshalAuthorizedKey(signer.PublicKey()), 0o600)
	os.Chown(filepath.Join(ssh, "authorized_keys"), u.UID, u.GID)
	c, err := dial(t, n.Agent.SSHAddr(), u.Name, signer)
	if err != nil {
		t.Fatalf("a login with the key in a plain authorized_keys: %v", err)
	}
	c.Close()
}
