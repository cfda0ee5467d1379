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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/dibs-gpu/dibs/internal/lograte"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
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
	// MaxPerSource caps connections from one IP address that have not
	// opened a session yet (default 32): it bounds a flood from one host
	// without letting one user behind a bastion lock out the others.
	MaxPerSource int
	// MaxPreAuth caps connections, from all sources together, that have
	// not authenticated yet (default 128): a flood from many addresses
	// (32 from each of 640) is refused at accept, before any handshake
	// work, and cannot take the agent's file descriptors; a connection
	// stops counting once its key is accepted.
	MaxPreAuth int
	// MaxPerUser caps the sessions one person may hold open (default 8).
	MaxPerUser int
	// SessionDeadline closes a connection that has authenticated but holds
	// no session for this long (default 10 s).
	SessionDeadline time.Duration
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
}

// Permission extensions that carry the identity fixed at key acceptance.
const (
	extUser = "dibs-user"
	extKey  = "dibs-key"
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
	perIP    map[string]int
	preAuth  int
	perUser  map[string]int
	conns    map[string]*trackedConn
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
		perIP:    map[string]int{}, perUser: map[string]int{}, conns: map[string]*trackedConn{}}
	srv, err := wish.NewServer(
		wish.WithAddress(cfg.Listen),
		wish.WithHostKeyPath(cfg.HostKeyPath),
		wish.WithPublicKeyAuth(s.auth),
		ssh.AllocatePty(),
		func(srv *ssh.Server) error {
			srv.HandshakeTimeout = 10 * time.Second
			srv.ConnCallback = func(ctx ssh.Context, c net.Conn) net.Conn { return s.admit(c) }
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

// trackedConn is one TCP connection: counted against its source until it
// closes, and closed if it holds no session past the deadline.
type trackedConn struct {
	net.Conn
	once     sync.Once
	done     func()
	mu       sync.Mutex
	sessions int
	timer    *time.Timer
	// preAuth: the connection still counts against MaxPreAuth (guarded by
	// the Server's mu).
	preAuth bool
}

func (c *trackedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// admit caps connections per source address and, before authentication,
// in total, and arms the session deadline; a refused connection is closed
// before the handshake, and its log line is rate-limited per source.
func (s *Server) admit(c net.Conn) net.Conn {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	key := c.RemoteAddr().String()
	s.mu.Lock()
	if s.perIP[host] >= s.cfg.MaxPerSource {
		s.mu.Unlock()
		s.refusals.Log(s.log, slog.LevelWarn, host, "ssh: refused a connection: too many open from there", "from", host, "max", s.cfg.MaxPerSource)
		c.Close()
		return nil
	}
	if s.preAuth >= s.cfg.MaxPreAuth {
		s.mu.Unlock()
		s.refusals.Log(s.log, slog.LevelWarn, host, "ssh: refused a connection: too many connections waiting to authenticate", "from", host, "max", s.cfg.MaxPreAuth)
		c.Close()
		return nil
	}
	s.perIP[host]++
	s.preAuth++
	tc := &trackedConn{Conn: c, preAuth: true}
	s.conns[key] = tc
	s.mu.Unlock()
	tc.done = func() {
		s.mu.Lock()
		if s.perIP[host]--; s.perIP[host] <= 0 {
			delete(s.perIP, host)
		}
		if tc.preAuth {
			tc.preAuth = false
			s.preAuth--
		}
		delete(s.conns, key)
		s.mu.Unlock()
		tc.mu.Lock()
		if tc.timer != nil {
			tc.timer.Stop()
		}
		tc.mu.Unlock()
	}
	s.arm(tc, s.cfg.HandshakeAndSession())
	return tc
}

// HandshakeAndSession is how long a new connection may take to
// authenticate and open its first session.
func (s Settings) HandshakeAndSession() time.Duration { return 10*time.Second + s.SessionDeadline }

// arm closes the connection after d unless a session is open by then.
func (s *Server) arm(c *trackedConn, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(d, func() {
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
// (or the users file), and fixes the identity in the connection's
// permissions at that moment.
func (s *Server) auth(ctx ssh.Context, key ssh.PublicKey) bool {
	name := ctx.User()
	from := ctx.RemoteAddr().String()
	fp := gossh.FingerprintSHA256(key)
	ok, why := s.keyAllowed(name, key)
	if !ok {
		s.refusals.Log(s.log, slog.LevelInfo, sourceOf(from), "ssh: refused a key", "key", fp, "user", name, "from", from, "why", why)
		return false
	}
	perms := ctx.Permissions()
	if perms.Extensions == nil {
		perms.Extensions = map[string]string{}
	}
	perms.Extensions[extUser] = name
	perms.Extensions[extKey] = fp
	// From here the connection has SessionDeadline to open a session.
	s.mu.Lock()
	tc := s.conns[from]
	if tc != nil && tc.preAuth {
		tc.preAuth = false
		s.preAuth--
	}
	s.mu.Unlock()
	if tc != nil {
		s.arm(tc, s.cfg.SessionDeadline)
	}
	return true
}

func (s *Server) keyAllowed(name string, key ssh.PublicKey) (bool, string) {
	if !lease.ValidUserName(name) {
		return false, "bad user name"
	}
	var keys []gossh.PublicKey
	if s.cfg.UsersFile != "" {
		users, err := readUsersFile(s.cfg.UsersFile)
		if err != nil {
			return false, err.Error()
		}
		keys = users[name]
	} else {
		u, err := s.deps.Accounts.ByName(name)
		if err != nil {
			return false, "no such user"
		}
		if keys, err = s.readAuthorizedKeys(u); err != nil {
			return false, err.Error()
		}
	}
	for _, k := range keys {
		if ssh.KeysEqual(k, key) {
			return true, ""
		}
	}
	return false, "key not authorized for this user"
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
			if key == nil || user == "" || user != sess.User() || ext[extKey] != gossh.FingerprintSHA256(key) {
				s.refusals.Log(s.log, slog.LevelWarn, sourceOf(from), "ssh: refused a session: identity does not match the accepted key", "user", sess.User(), "from", from)
				wish.Fatalln(sess, "dibs: authentication mismatch")
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

// program builds the board for one SSH session, as the key's user.
func (s *Server) program(sess ssh.Session) *tea.Program {
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
// file system does not answer is given up on). Options are ignored, except
// that a key restricted with a command= is not accepted, since the board
// would bypass that command.
func (s *Server) readAuthorizedKeys(u launch.User) ([]gossh.PublicKey, error) {
	data, err := s.deps.ReadUserFile(context.Background(), u, ".ssh/authorized_keys", maxKeysFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no %s", filepath.Join(u.Home, ".ssh", "authorized_keys"))
		}
		return nil, err
	}
	var keys []gossh.PublicKey
	for len(data) > 0 {
		k, _, opts, rest, err := gossh.ParseAuthorizedKey(data)
		if err != nil {
			break
		}
		restricted := false
		for _, o := range opts {
			if strings.HasPrefix(o, "command=") {
				restricted = true
			}
		}
		if !restricted {
			keys = append(keys, k)
		}
		data = rest
	}
	return keys, nil
}

// readUsersFile reads "USER KEYTYPE KEY [comment]" lines from the file the
// operator configured (size-capped, no links).
func readUsersFile(path string) (map[string][]gossh.PublicKey, error) {
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
	users := make(map[string][]gossh.PublicKey)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, key, ok := strings.Cut(line, " ")
		if !ok || !lease.ValidUserName(name) {
			return nil, fmt.Errorf("%s:%d: want USER KEYTYPE KEY", path, n)
		}
		k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(strings.TrimSpace(key)))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		users[name] = append(users[name], k)
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
	return r, lease.Invalidf("%s runs on %s: open that node's board (ssh -p %s %s) or run: %s",
		r.Lease.Session, r.Lease.Node, port, r.Lease.Node, strings.Join(r.Command, " "))
}
