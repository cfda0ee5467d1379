// Package sshd is the SSH front door: the board served over SSH (wish), to
// a person whose public key is in their own authorized_keys on this node (or
// in the configured users file). The identity is fixed when the key is
// accepted and carried in the connection's permissions, checked again for
// every session; the board's backend is the service bound to that person.
package sshd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/ssh"
	"charm.land/wish/v2"
	"charm.land/wish/v2/activeterm"
	bm "charm.land/wish/v2/bubbletea"
	gossh "golang.org/x/crypto/ssh"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/lograte"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/tui"
)

// Settings configure the SSH front door.
type Settings struct {
	// Listen is HOST:PORT, e.g. ":2222".
	Listen string
	// HostKeyPath is generated on first start.
	HostKeyPath string
	// UsersFile, when set, lists "USER KEYTYPE KEY [comment]" lines and
	// replaces each user's own ~/.ssh/authorized_keys.
	UsersFile string
	// IdleTimeout ends a session with no keystroke for this long (default 30m).
	IdleTimeout time.Duration
	// MaxSessions caps open sessions in total (default 64).
	MaxSessions int
	// MaxPerSource caps the connections from one IP address that have
	// not authenticated yet (default 32). A new connection past it closes
	// one of that address's unauthenticated ones instead of being refused
	// (the one that has sent the fewest bytes, the oldest of those), so a
	// flood from one host bounds what it holds without locking out a
	// person behind the same address who is already logging in.
	MaxPerSource int
	// MaxPreAuth caps the connections, from all sources together, that
	// have not authenticated yet (default 128): past it a new connection
	// closes one of the address that holds the most (the one that has
	// sent the fewest bytes, then the oldest), so strangers from fewer
	// than MaxPreAuth addresses cannot keep a newcomer from another
	// address out, and the agent's file descriptors stay bounded. A
	// connection stops counting once its key is proven (signed), never
	// before.
	MaxPreAuth int
	// MaxPerUser caps the sessions one person may hold open (default 8);
	// twice as many authenticated connections are allowed per person.
	MaxPerUser int
	// SessionDeadline closes a connection that has authenticated but holds
	// no session for this long (default 10 s).
	SessionDeadline time.Duration
	// PreAuthDeadline closes a connection that has not authenticated
	// this long after it was accepted (default 10 s).
	PreAuthDeadline time.Duration
}

func (s Settings) withDefaults() Settings {
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = 30 * time.Minute
	}
	if s.MaxSessions <= 0 {
		s.MaxSessions = 64
	}
	if s.MaxPerSource <= 0 {
		s.MaxPerSource = 32
	}
	if s.MaxPreAuth <= 0 {
		s.MaxPreAuth = 128
	}
	if s.MaxPerUser <= 0 {
		s.MaxPerUser = 8
	}
	if s.SessionDeadline <= 0 {
		s.SessionDeadline = 10 * time.Second
	}
	if s.PreAuthDeadline <= 0 {
		s.PreAuthDeadline = 10 * time.Second
	}
	return s
}

// Deps are what the front door serves and reads.
type Deps struct {
	Service  *core.Service
	Accounts *account.Directory
	Clock    clock.Clock
	// Node names this node in messages.
	Node string
	// Terminal makes the command that attaches as a user on a PTY
	// (launch.Launcher.TerminalCommand).
	Terminal func(u launch.User, term string, argv []string) (*exec.Cmd, error)
	// ReadUserFile reads a user's authorized_keys as them
	// (launch.Launcher.ReadUserFile).
	ReadUserFile func(ctx context.Context, u launch.User, rel string, max int64) ([]byte, error)
	Log          *slog.Logger

	// hook, when set (by tests, through export_test.go), is called at the
	// start of each callback of the front door with its name: a panic
	// there stands for a bug in that callback.
	hook func(where string)
}

// Permission extensions that carry the identity fixed at key acceptance.
const (
	extUser = "dibs-user"
	extKey  = "dibs-key"
	// extNoTerminal carries why the accepted key may have no terminal
	// (no-pty, restrict): every session it opens is refused with it.
	extNoTerminal = "dibs-no-terminal"
	// extNoTouch is the extension x/crypto/ssh reads to waive a security
	// key's user-presence check (the key's no-touch-required option).
	extNoTouch = "no-touch-required"
)

// maxKeysFile bounds an authorized_keys or users file.
const maxKeysFile = 1 << 20

// Server is a running SSH front door.
type Server struct {
	cfg  Settings
	deps Deps
	log  *slog.Logger
	srv  *ssh.Server
	ln   net.Listener
	done chan struct{}

	// refusals keeps refusal lines to one per kind and source every few
	// seconds, with a count of those held back.
	refusals *lograte.Limiter

	sessions atomic.Int64
	mu       sync.Mutex
	// pending holds each source's unauthenticated connections, oldest
	// first; preAuth counts them all.
	pending map[string][]*trackedConn
	preAuth int
	perUser map[string]int
	// authed counts each person's authenticated connections.
	authed map[string]int
	conns  map[string]*trackedConn
	seq    uint64
}

// Listen starts the front door.
func Listen(cfg Settings, deps Deps) (*Server, error) {
	cfg = cfg.withDefaults()
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.UsersFile != "" {
		if _, err := readUsersFile(cfg.UsersFile); err != nil {
			return nil, err
		}
	}
	if deps.Clock == nil {
		deps.Clock = clock.Real()
	}
	if deps.ReadUserFile == nil {
		deps.ReadUserFile = launch.New(launch.Options{}).ReadUserFile
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Log, done: make(chan struct{}),
		refusals: lograte.New(0, 0, deps.Clock.Now),
		pending:  map[string][]*trackedConn{}, perUser: map[string]int{}, authed: map[string]int{}, conns: map[string]*trackedConn{}}
	srv, err := wish.NewServer(
		wish.WithAddress(cfg.Listen),
		wish.WithHostKeyPath(cfg.HostKeyPath),
		wish.WithPublicKeyAuth(s.auth),
		ssh.AllocatePty(),
		func(srv *ssh.Server) error {
			srv.HandshakeTimeout = cfg.PreAuthDeadline
			srv.ConnCallback = func(ctx ssh.Context, c net.Conn) (kept net.Conn) {
				defer s.recoverPanic("accepting a connection", c, func() {
					kept = nil
					s.mu.Lock()
					tc := s.conns[c.RemoteAddr().String()]
					s.mu.Unlock()
					if tc != nil {
						tc.Close()
					}
				})
				return s.admit(c)
			}
			srv.ServerConfigCallback = func(ssh.Context) *gossh.ServerConfig {
				return &gossh.ServerConfig{AuthLogCallback: s.authenticated}
			}
			return nil
		},
		wish.WithMiddleware(
			bm.MiddlewareWithProgramHandler(s.program),
			activeterm.Middleware(),
			s.identity(),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("ssh front door: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("ssh front door: listen on %s: %w", cfg.Listen, err)
	}
	s.srv, s.ln = srv, ln
	go func() {
		defer close(s.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, ssh.ErrServerClosed) {
			s.log.Error("ssh front door stopped", "err", err)
		}
	}()
	s.log.Info("ssh front door listening", "addr", ln.Addr().String(), "host_key", cfg.HostKeyPath)
	return s, nil
}

// Addr is where the front door listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the front door and ends its sessions.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	s.srv.Close()
	<-s.done
}

// trackedConn is one TCP connection: counted against its source while it
// has not authenticated, against its person once it has, and closed if it
// holds no session past its deadline.
type trackedConn struct {
	net.Conn
	host     string
	seq      uint64
	once     sync.Once
	done     func()
	mu       sync.Mutex
	sessions int
	timer    *time.Timer
	// recvd counts the bytes the server has read from the peer: with
	// those still in the socket, how far it has gone in the protocol.
	// Eviction takes the connection that has gone least far.
	recvd atomic.Int64
	// raw reaches the socket, to see bytes the server has not read yet.
	raw syscall.RawConn
	// preAuth: the connection is in the Server's pending list; user: the
	// person it authenticated as (both guarded by the Server's mu).
	preAuth bool
	user    string
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.recvd.Add(int64(n))
	return n, err
}

// progress is how many bytes the peer has sent: read by the server, or
// waiting in the socket (the server's goroutine may not have run yet,
// while a flood of new connections is being admitted). A client logging
// in has sent its version line and key exchange (a kilobyte or more)
// within a round trip; a connection held open to take a slot has sent
// nothing, or a line.
func (c *trackedConn) progress() int64 {
	n := c.recvd.Load()
	if c.raw != nil {
		c.raw.Control(func(fd uintptr) { n += int64(pendingBytes(fd)) })
	}
	return n
}

func (c *trackedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// admit keeps every new connection, arms its pre-auth deadline and, when
// its source (MaxPerSource) or everyone together (MaxPreAuth) already
// holds as many unauthenticated connections as allowed, closes one of
// those instead: of its source's, or of those of the source holding the
// most, the one that has sent the fewest bytes (the oldest of those).
// No proof comes before authentication, so this is fairness, not
// exclusion: a stranger holding connections cannot refuse a newcomer, only
// make older unauthenticated ones give way. Evictions are logged at most
// once per source every few seconds.
func (s *Server) admit(c net.Conn) net.Conn {
	s.hook("admit")
	host := sourceOf(c.RemoteAddr().String())
	key := c.RemoteAddr().String()
	tc := &trackedConn{Conn: c, host: host, preAuth: true}
	if sc, ok := c.(syscall.Conn); ok {
		tc.raw, _ = sc.SyscallConn()
	}
	tc.done = func() { s.forget(tc, key) }
	var victim *trackedConn
	var why string
	var max int
	func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if list := s.pending[host]; len(list) >= s.cfg.MaxPerSource {
			victim, _ = evictionPick(list)
			why, max = "too many open from there", s.cfg.MaxPerSource
		} else if s.preAuth >= s.cfg.MaxPreAuth {
			victim, why, max = s.heaviestPick(), "too many connections waiting to authenticate", s.cfg.MaxPreAuth
		}
		if victim != nil {
			s.unpendLocked(victim)
		}
		s.seq++
		tc.seq = s.seq
		s.pending[host] = append(s.pending[host], tc)
		s.preAuth++
		s.conns[key] = tc
	}()
	if victim != nil {
		s.refusals.Log(s.log, slog.LevelWarn, victim.host, "ssh: closed an unauthenticated connection to make room: "+why,
			"from", victim.RemoteAddr().String(), "for", key, "max", max)
		victim.Close()
	}
	s.arm(tc, s.cfg.HandshakeAndSession())
	return tc
}

// evictionPick is the connection of list (oldest first) to close: the
// one that has sent the fewest bytes, the oldest of those; and that count.
func evictionPick(list []*trackedConn) (*trackedConn, int64) {
	var best *trackedConn
	var least int64
	for _, c := range list {
		if p := c.progress(); best == nil || p < least {
			best, least = c, p
		}
	}
	return best, least
}

// heaviestPick is the unauthenticated connection to close when all the
// pre-auth slots are taken: from the source holding the most, the one
// evictionPick takes; between sources holding as many, the one that has
// sent the fewest bytes, then the oldest. s.mu is held.
func (s *Server) heaviestPick() *trackedConn {
	var best *trackedConn
	var bestN int
	var bestP int64
	for _, list := range s.pending {
		if len(list) == 0 {
			continue
		}
		c, p := evictionPick(list)
		switch {
		case best == nil, len(list) > bestN:
		case len(list) < bestN:
			continue
		case p < bestP:
		case p == bestP && c.seq < best.seq:
		default:
			continue
		}
		best, bestN, bestP = c, len(list), p
	}
	return best
}

// unpendLocked takes c off its source's pending list; s.mu is held.
func (s *Server) unpendLocked(c *trackedConn) {
	if !c.preAuth {
		return
	}
	c.preAuth = false
	s.preAuth--
	list := s.pending[c.host]
	for i, o := range list {
		if o == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.pending, c.host)
	} else {
		s.pending[c.host] = list
	}
}

// forget drops a closed connection from every count.
func (s *Server) forget(c *trackedConn, key string) {
	s.mu.Lock()
	s.unpendLocked(c)
	if c.user != "" {
		if s.authed[c.user]--; s.authed[c.user] <= 0 {
			delete(s.authed, c.user)
		}
		c.user = ""
	}
	if s.conns[key] == c {
		delete(s.conns, key)
	}
	s.mu.Unlock()
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
}

// authenticated is x/crypto/ssh's AuthLogCallback: called after each
// authentication attempt, with a nil error once a key is proven (a
// signature checked, not a mere query with a public key, which anyone
// may know). Only then does the connection leave the pre-auth slots,
// count against its person, and get SessionDeadline to open a session.
func (s *Server) authenticated(meta gossh.ConnMetadata, method string, err error) {
	from := meta.RemoteAddr().String()
	var tc *trackedConn
	defer s.recoverPanic("authenticating", nil, func() {
		if tc != nil {
			tc.Close()
		}
	})
	s.mu.Lock()
	tc = s.conns[from]
	s.mu.Unlock()
	if err != nil || tc == nil {
		return
	}
	s.hook("authenticated")
	user := meta.User()
	limit := 2 * s.cfg.MaxPerUser
	s.mu.Lock()
	over := s.authed[user] >= limit
	if !over && tc.user == "" {
		s.unpendLocked(tc)
		tc.user = user
		s.authed[user]++
	}
	s.mu.Unlock()
	if over {
		s.refusals.Log(s.log, slog.LevelWarn, user, "ssh: closed an authenticated connection: too many open for this user", "user", user, "from", from, "max", limit)
		tc.Close()
		return
	}
	s.arm(tc, s.cfg.SessionDeadline)
}

// recoverPanic, deferred at the top of each of the front door's
// callbacks, turns a panic there into a log line with its stack and the
// end of that one connection (refuse runs, and closes c when set): the
// agent and every other connection keep going.
func (s *Server) recoverPanic(where string, c net.Conn, refuse func()) {
	r := recover()
	if r == nil {
		return
	}
	from := "unknown"
	if c != nil && c.RemoteAddr() != nil {
		from = c.RemoteAddr().String()
	}
	s.log.Error("ssh: panic "+where+"; that connection is refused", "from", from, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ssh: panic while refusing after a panic "+where, "from", from, "panic", fmt.Sprint(r))
		}
	}()
	if refuse != nil {
		refuse()
	}
	if c != nil {
		c.Close()
	}
}

// hook calls the test hook, if any.
func (s *Server) hook(where string) {
	if s.deps.hook != nil {
		s.deps.hook(where)
	}
}

// HandshakeAndSession is how long a new connection may take to
// authenticate and open its first session.
func (s Settings) HandshakeAndSession() time.Duration { return s.PreAuthDeadline + s.SessionDeadline }

// arm closes the connection after d unless a session is open by then.
func (s *Server) arm(c *trackedConn, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(d, func() {
		defer s.recoverPanic("closing a connection past its deadline", c, nil)
		c.mu.Lock()
		idle := c.sessions == 0
		c.mu.Unlock()
		if idle {
			s.refusals.Log(s.log, slog.LevelInfo, sourceOf(c.RemoteAddr().String()), "ssh: closing a connection that holds no session", "from", c.RemoteAddr().String())
			c.Close()
		}
	})
}

// sourceOf is the host of a remote address, which refusals are counted by.
func sourceOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// sessionStarted and sessionEnded count a connection's sessions; when the
// last ends, the deadline is armed again.
func (s *Server) sessionStarted(addr string) {
	s.mu.Lock()
	tc := s.conns[addr]
	s.mu.Unlock()
	if tc != nil {
		tc.mu.Lock()
		tc.sessions++
		tc.mu.Unlock()
	}
}

func (s *Server) sessionEnded(addr string) {
	s.mu.Lock()
	tc := s.conns[addr]
	s.mu.Unlock()
	if tc == nil {
		return
	}
	tc.mu.Lock()
	tc.sessions--
	rearm := tc.sessions == 0
	tc.mu.Unlock()
	if rearm {
		s.arm(tc, s.cfg.SessionDeadline)
	}
}

// auth accepts a key only if it is in the SSH user's own authorized_keys
// (or the users file) on a line whose options let it be used from here
// and now, and fixes the identity in the connection's permissions at that
// moment. It may be asked about a key the client has not proven yet (a
// query); the connection leaves the pre-auth slots only once it is proven
// (authenticated).
func (s *Server) auth(ctx ssh.Context, key ssh.PublicKey) (ok bool) {
	from := ctx.RemoteAddr().String()
	defer s.recoverPanic("checking a key", nil, func() {
		ok = false
		s.mu.Lock()
		tc := s.conns[from]
		s.mu.Unlock()
		if tc != nil {
			tc.Close()
		}
	})
	s.hook("auth")
	name := ctx.User()
	fp := gossh.FingerprintSHA256(key)
	ip := netip.Addr{}
	if ap, err := netip.ParseAddrPort(from); err == nil {
		ip = ap.Addr().Unmap()
	}
	line, why := s.keyAllowed(name, key, ip)
	if line == nil {
		s.refusals.Log(s.log, slog.LevelInfo, sourceOf(from), "ssh: refused a key", "key", fp, "user", name, "from", from, "why", why)
		return false
	}
	perms := ctx.Permissions()
	if perms.Extensions == nil {
		perms.Extensions = map[string]string{}
	}
	perms.Extensions[extUser] = name
	perms.Extensions[extKey] = fp
	if line.opts.noPTY {
		perms.Extensions[extNoTerminal] = line.opts.noPTYBy
	}
	if line.opts.noTouch {
		perms.Extensions[extNoTouch] = ""
	}
	return true
}

// keyAllowed finds the first line listing key for the user whose options
// permit it from ip now, as sshd does; without one, it says why the last
// listing refused it.
func (s *Server) keyAllowed(name string, key ssh.PublicKey, ip netip.Addr) (*authorizedKey, string) {
	if !words.ValidUserName(name) {
		return nil, "bad user name"
	}
	var keys []authorizedKey
	if s.cfg.UsersFile != "" {
		users, err := readUsersFile(s.cfg.UsersFile)
		if err != nil {
			return nil, err.Error()
		}
		keys = users[name]
	} else {
		u, err := s.deps.Accounts.ByName(name)
		if err != nil {
			return nil, "no such user"
		}
		if keys, err = s.readAuthorizedKeys(u); err != nil {
			return nil, err.Error()
		}
	}
	why := "key not authorized for this user"
	now := s.deps.Clock.Now()
	for i := range keys {
		if !ssh.KeysEqual(keys[i].key, key) {
			continue
		}
		if w := keys[i].opts.permits(ip, now); w != "" {
			why = w
			continue
		}
		return &keys[i], ""
	}
	return nil, why
}

// identity re-checks, for every session, that the key the session was
// authenticated with is the one whose acceptance fixed its identity, and
// caps sessions in total and per person. It runs first (it is listed last).
func (s *Server) identity() wish.Middleware {
	return func(next ssh.Handler) ssh.Handler {
		return func(sess ssh.Session) {
			from := sess.RemoteAddr().String()
			ext := sess.Permissions().Extensions
			key := sess.PublicKey()
			user := ext[extUser]
			defer s.recoverPanic("serving a session", nil, func() {
				wish.Fatalln(sess, "dibs: the board failed to start (an internal error, logged on the node); try again or tell the node's admin")
				sess.Close()
			})
			s.hook("session")
			if key == nil || user == "" || user != sess.User() || ext[extKey] != gossh.FingerprintSHA256(key) {
				s.refusals.Log(s.log, slog.LevelWarn, sourceOf(from), "ssh: refused a session: identity does not match the accepted key", "user", sess.User(), "from", from)
				wish.Fatalln(sess, "dibs: authentication mismatch")
				return
			}
			if by, ok := ext[extNoTerminal]; ok {
				s.refusals.Log(s.log, slog.LevelWarn, user, "ssh: refused a session: the key allows no terminal", "user", user, "from", from, "option", by, "key", ext[extKey])
				wish.Fatalln(sess, fmt.Sprintf("dibs: this key is marked %s in authorized_keys, which allows no terminal, and the board is one; use a key without it (or add pty after restrict)", by))
				return
			}
			s.sessionStarted(from)
			defer s.sessionEnded(from)
			if n := s.sessions.Add(1); n > int64(s.cfg.MaxSessions) {
				s.sessions.Add(-1)
				s.refusals.Log(s.log, slog.LevelWarn, user, "ssh: refused a session: too many open", "user", user, "from", from, "max", s.cfg.MaxSessions)
				wish.Fatalln(sess, "dibs: too many sessions open; try again later")
				return
			}
			defer s.sessions.Add(-1)
			s.mu.Lock()
			over := s.perUser[user] >= s.cfg.MaxPerUser
			if !over {
				s.perUser[user]++
			}
			s.mu.Unlock()
			if over {
				s.refusals.Log(s.log, slog.LevelWarn, user, "ssh: refused a session: too many open for this user", "user", user, "from", from, "max", s.cfg.MaxPerUser)
				wish.Fatalln(sess, fmt.Sprintf("dibs: you have %d boards open already; close one first", s.cfg.MaxPerUser))
				return
			}
			defer func() {
				s.mu.Lock()
				if s.perUser[user]--; s.perUser[user] <= 0 {
					delete(s.perUser, user)
				}
				s.mu.Unlock()
			}()
			s.log.Info("ssh: logged in", "user", user, "from", from, "key", ext[extKey])
			next(sess)
			s.log.Info("ssh: logged out", "user", user, "from", from)
		}
	}
}

// program builds the board for one SSH session, as the key's user. A
// panic here is recovered by identity, which wraps the whole chain.
func (s *Server) program(sess ssh.Session) *tea.Program {
	s.hook("program")
	name := sess.Permissions().Extensions[extUser]
	u, uerr := s.deps.Accounts.ByName(name)
	if uerr != nil && s.cfg.UsersFile == "" {
		wish.Fatalln(sess, "dibs: no account "+name+" on this node")
		return nil
	}
	b := s.deps.Service.ForUser(name)
	ctx := sess.Context()
	noColor := false
	for _, kv := range sess.Environ() {
		if strings.HasPrefix(kv, "NO_COLOR=") && kv != "NO_COLOR=" {
			noColor = true
		}
	}
	pty, _, _ := sess.Pty()
	var lastInput atomic.Int64
	lastInput.Store(s.deps.Clock.Now().UnixNano())
	m := tui.New(tui.Options{
		Backend: &backend{Bound: b, node: s.deps.Node, sshAddr: s.Addr()},
		NoColor: noColor,
		Context: ctx,
		Attach: func(argv []string) tea.Cmd {
			if uerr != nil {
				return nil
			}
			return tea.Exec(&ptyExec{pty: pty, user: u, argv: argv, terminal: s.deps.Terminal}, func(error) tea.Msg { return nil })
		},
	})
	opts := append(bm.MakeOptions(sess), tea.WithFilter(func(_ tea.Model, msg tea.Msg) tea.Msg {
		switch msg.(type) {
		case tea.SuspendMsg:
			return tea.ResumeMsg{}
		case tea.KeyPressMsg, tea.MouseClickMsg:
			lastInput.Store(s.deps.Clock.Now().UnixNano())
		}
		return msg
	}))
	p := tea.NewProgram(m, opts...)
	go func() {
		defer s.recoverPanic("watching a session's idle time", nil, func() { sess.Close() })
		t := s.deps.Clock.NewTicker(s.cfg.IdleTimeout / 10)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				if s.deps.Clock.Now().Sub(time.Unix(0, lastInput.Load())) > s.cfg.IdleTimeout {
					s.log.Info("ssh: closing an idle session", "user", name, "idle", s.cfg.IdleTimeout.String())
					p.Quit()
					sess.Close()
					return
				}
			}
		}
	}()
	return p
}

// ptyExec runs tmux attach as the user on the SSH session's PTY. bubbletea
// hands it its own stdio; the PTY is the terminal tmux needs instead.
type ptyExec struct {
	pty      ssh.Pty
	user     launch.User
	argv     []string
	terminal func(u launch.User, term string, argv []string) (*exec.Cmd, error)
}

func (p *ptyExec) SetStdin(io.Reader)  {}
func (p *ptyExec) SetStdout(io.Writer) {}
func (p *ptyExec) SetStderr(io.Writer) {}

func (p *ptyExec) Run() error {
	cmd, err := p.terminal(p.user, p.pty.Term, p.argv)
	if err != nil {
		return err
	}
	if err := p.pty.Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// readAuthorizedKeys parses a user's authorized_keys, read as launch reads
// every file a user controls (no links, theirs, size-capped; a home whose
// file system does not answer is given up on), with each line's options.
// A line whose options are malformed is kept but refuses its key, as sshd
// skips it.
func (s *Server) readAuthorizedKeys(u launch.User) ([]authorizedKey, error) {
	data, err := s.deps.ReadUserFile(context.Background(), u, ".ssh/authorized_keys", maxKeysFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no %s", filepath.Join(u.Home, ".ssh", "authorized_keys"))
		}
		return nil, err
	}
	var keys []authorizedKey
	for len(data) > 0 {
		k, _, raw, rest, err := gossh.ParseAuthorizedKey(data)
		if err != nil {
			break
		}
		opts, err := parseKeyOptions(raw, time.Local)
		if err != nil {
			opts.bad = fmt.Sprintf("%s: %v", filepath.Join(u.Home, ".ssh", "authorized_keys"), err)
		}
		keys = append(keys, authorizedKey{key: k, opts: opts})
		data = rest
	}
	return keys, nil
}

// readUsersFile reads "USER [OPTIONS] KEYTYPE KEY [comment]" lines from
// the file the operator configured (size-capped, no links); the options
// are authorized_keys's, and a malformed one is an error naming its line.
func readUsersFile(path string) (map[string][]authorizedKey, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("ssh users file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("ssh users file %s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFile+1))
	if err != nil {
		return nil, fmt.Errorf("ssh users file: %w", err)
	}
	if len(data) > maxKeysFile {
		return nil, fmt.Errorf("ssh users file %s is over %d bytes", path, maxKeysFile)
	}
	users := make(map[string][]authorizedKey)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, key, ok := strings.Cut(line, " ")
		if !ok || !words.ValidUserName(name) {
			return nil, fmt.Errorf("%s:%d: want USER [OPTIONS] KEYTYPE KEY", path, n)
		}
		k, _, raw, _, err := gossh.ParseAuthorizedKey([]byte(strings.TrimSpace(key)))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		opts, err := parseKeyOptions(raw, time.Local)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		users[name] = append(users[name], authorizedKey{key: k, opts: opts})
	}
	return users, sc.Err()
}

// backend is the board's backend over SSH: the service bound to the key's
// user; attach works here only for sessions on this node.
type backend struct {
	*core.Bound
	node    string
	sshAddr string
}

var _ tui.Backend = (*backend)(nil)

// Attach attaches here only to sessions on this node; for a session on
// another node it says how to get there, since this SSH session cannot
// carry the person's own ssh keys onward.
func (b *backend) Attach(ctx context.Context, id string) (api.AttachResponse, error) {
	r, err := b.Bound.Attach(ctx, id)
	if err != nil || r.Local {
		return r, err
	}
	port := "2222"
	if _, p, err := net.SplitHostPort(b.sshAddr); err == nil {
		port = p
	}
	return r, refusal.Invalidf("%s runs on %s: open that node's board (ssh -p %s %s) or run: %s",
		r.Lease.Session, r.Lease.Node, port, r.Lease.Node, strings.Join(r.Command, " "))
}
