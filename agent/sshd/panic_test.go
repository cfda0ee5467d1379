package sshd_test

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/sshd"
)

// Issue 30: a panic in the front door's identity or program set-up was a
// panic in the root agent. A panic in any of its callbacks (the
// connection's admission, the key check, the proof of the key, the
// session's identity, the board's set-up) is logged with its stack and
// refuses that one connection; the next connection gets the board.
func TestFrontDoorPanicsRefuseOneConnection(t *testing.T) {
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	me, _ := user.Current()
	priv, pub := opensshKey(t)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(me.Username+" "+pub+"\n"), 0o644)
	for _, where := range []string{"admit", "auth", "authenticated", "session", "program"} {
		t.Run(where, func(t *testing.T) {
			var armed atomic.Bool
			armed.Store(true)
			srv, lines := boardDoor(t, sshd.Settings{UsersFile: users}, func(d *sshd.Deps) {
				sshd.SetHook(d, func(at string) {
					if at == where && armed.CompareAndSwap(true, false) {
						panic("injected at " + at)
					}
				})
			})
			out, board := sshBoard(t, srv.Addr(), "127.0.0.1", me.Username, priv)
			if board {
				t.Fatalf("the connection whose %s panicked got the board", where)
			}
			if where == "session" || where == "program" {
				if !strings.Contains(out, "the board failed to start") {
					t.Errorf("the client was not told: %q", out)
				}
			}
			n, all := lines.matching("injected at " + where)
			if n != 1 || !strings.Contains(all[0], "ssh: panic") || !strings.Contains(all[0], "stack=goroutine") {
				t.Fatalf("the panic's log lines: %q", all)
			}
			if out, board := sshBoard(t, srv.Addr(), "127.0.0.1", me.Username, priv); !board {
				t.Fatalf("the next connection after a panic in %s: %q", where, out)
			}
		})
	}
}
