package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/tui"
)

// SSHSettings configure the SSH front door that serves the board.
type SSHSettings struct {
	// Listen is HOST:PORT, e.g. ":2222".
	Listen string
	// HostKeyPath is generated on first start; default DataDir/ssh_host_ed25519_key.
	HostKeyPath string
	// UsersFile, when set, lists "USER KEYTYPE KEY [comment]" lines and
	// replaces each user's own ~/.ssh/authorized_keys.
	UsersFile string
	// IdleTimeout ends a session with no keystroke for this long (default 30m).
	IdleTimeout time.Duration
	// MaxSessions caps open sessions in total (default 64).
	MaxSessions int
	// MaxPerSource caps connections from one IP address (default 8).
	MaxPerSource int
}

// Permission extensions that carry the identity fixed at key acceptance.
const (
	extUser = "dibs-user"
	extKey  = "dibs-key"
)

type sshServer struct {
	srv      *ssh.Server
	ln       net.Listener
	sessions atomic.Int64
	mu       sync.Mutex
	perIP    map[string]int
}

func (s *sshServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}

// Addr is where the SSH front door listens, empty when it is off.
func (a *Agent) SSHAddr() string {
	if a.ssh == nil {
		return ""
	}
	return a.ssh.ln.Addr().String()
}

func (a *Agent) startSSH(cfg SSHSettings) error {
	if cfg.HostKeyPath == "" {
		cfg.HostKeyPath = filepath.Join(a.cfg.DataDir, "ssh_host_ed25519_key")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 64
	}
	if cfg.MaxPerSource <= 0 {
		cfg.MaxPerSource = 8
	}
	if cfg.UsersFile != "" {
		if _, err := readUsersFile(cfg.UsersFile); err != nil {
			return err
		}
	}
	s := &sshServer{perIP: make(map[string]int)}
	srv, err := wish.NewServer(
		wish.WithAddress(cfg.Listen),
		wish.WithHostKeyPath(cfg.HostKeyPath),
		wish.WithPublicKeyAuth(func(ctx ssh.Context, key ssh.PublicKey) bool {
			return a.sshAuth(cfg, ctx, key)
		}),
		ssh.AllocatePty(),
		func(srv *ssh.Server) error {
			srv.HandshakeTimeout = 10 * time.Second
			srv.ConnCallback = func(ctx ssh.Context, c net.Conn) net.Conn {
				return s.admit(a, cfg, c)
			}
			return nil
		},
		wish.WithMiddleware(
			bm.MiddlewareWithProgramHandler(func(sess ssh.Session) *tea.Program {
				return a.sshProgram(cfg, sess)
			}),
			activeterm.Middleware(),
			a.sshIdentity(s, cfg),
		),
	)
	if err != nil {
		return fmt.Errorf("ssh front door: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("ssh front door: listen on %s: %w", cfg.Listen, err)
	}
	s.srv, s.ln = srv, ln
	a.ssh = s
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, ssh.ErrServerClosed) {
			a.logf("ssh front door: %v", err)
		}
	}()
	a.logf("ssh front door on %s (host key %s)", ln.Addr(), cfg.HostKeyPath)
	return nil
}

// admit caps connections per source address; a refused connection is closed
// before the handshake.
func (s *sshServer) admit(a *Agent, cfg SSHSettings, c net.Conn) net.Conn {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	s.mu.Lock()
	if s.perIP[host] >= cfg.MaxPerSource {
		s.mu.Unlock()
		a.logf("ssh: refused connection from %s: %d connections already open from there", host, cfg.MaxPerSource)
		c.Close()
		return nil
	}
	s.perIP[host]++
	s.mu.Unlock()
	return &countedConn{Conn: c, done: func() {
		s.mu.Lock()
		s.perIP[host]--
		if s.perIP[host] <= 0 {
			delete(s.perIP, host)
		}
		s.mu.Unlock()
	}}
}

type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// sshAuth accepts a key only if it is in the SSH user's own authorized_keys
// (or the users file), and fixes the identity in the connection's
// permissions at that moment.
func (a *Agent) sshAuth(cfg SSHSettings, ctx ssh.Context, key ssh.PublicKey) bool {
	name := ctx.User()
	from := ctx.RemoteAddr().String()
	fp := gossh.FingerprintSHA256(key)
	ok, why := a.keyAllowed(cfg, name, key)
	if !ok {
		a.logf("ssh: refused key %s for %q from %s: %s", fp, name, from, why)
		return false
	}
	perms := ctx.Permissions()
	if perms.Extensions == nil {
		perms.Extensions = map[string]string{}
	}
	perms.Extensions[extUser] = name
	perms.Extensions[extKey] = fp
	return true
}

func (a *Agent) keyAllowed(cfg SSHSettings, name string, key ssh.PublicKey) (bool, string) {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return false, "bad user name"
	}
	var keys []gossh.PublicKey
	if cfg.UsersFile != "" {
		users, err := readUsersFile(cfg.UsersFile)
		if err != nil {
			return false, err.Error()
		}
		keys = users[name]
	} else {
		u, err := a.deps.Users.LookupUser(name)
		if err != nil {
			return false, "no such user"
		}
		keys, err = readAuthorizedKeys(filepath.Join(u.Home, ".ssh", "authorized_keys"))
		if err != nil {
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

// sshIdentity re-checks, for every session, that the key the session was
// authenticated with is the one whose acceptance fixed its identity, and
// caps the sessions in total. It runs first (it is listed last).
func (a *Agent) sshIdentity(s *sshServer, cfg SSHSettings) wish.Middleware {
	return func(next ssh.Handler) ssh.Handler {
		return func(sess ssh.Session) {
			from := sess.RemoteAddr().String()
			ext := sess.Permissions().Extensions
			key := sess.PublicKey()
			if key == nil || ext[extUser] == "" || ext[extUser] != sess.User() || ext[extKey] != gossh.FingerprintSHA256(key) {
				a.logf("ssh: refused session for %q from %s: identity does not match the accepted key", sess.User(), from)
				wish.Fatalln(sess, "dibs: authentication mismatch")
				return
			}
			if n := s.sessions.Add(1); n > int64(cfg.MaxSessions) {
				s.sessions.Add(-1)
				a.logf("ssh: refused session for %s from %s: %d sessions open", sess.User(), from, cfg.MaxSessions)
				wish.Fatalln(sess, "dibs: too many sessions open; try again later")
				return
			}
			defer s.sessions.Add(-1)
			a.logf("ssh: %s logged in from %s with key %s", sess.User(), from, ext[extKey])
			next(sess)
			a.logf("ssh: %s from %s logged out", sess.User(), from)
		}
	}
}

// sshProgram builds the board for one SSH session, as the key's user.
func (a *Agent) sshProgram(cfg SSHSettings, sess ssh.Session) *tea.Program {
	name := sess.Permissions().Extensions[extUser]
	u, err := a.deps.Users.LookupUser(name)
	var c lease.Caller
	if err != nil {
		if cfg.UsersFile == "" {
			wish.Fatalln(sess, "dibs: no account "+name+" on this node")
			return nil
		}
		// A users-file identity without a local account can look but not run.
		c = lease.Caller{UID: -1, User: name}
	} else {
		c = a.CallerFor(u.UID)
	}
	ctx := sess.Context()
	noColor := false
	for _, kv := range sess.Environ() {
		if strings.HasPrefix(kv, "NO_COLOR=") && kv != "NO_COLOR=" {
			noColor = true
		}
	}
	pty, _, _ := sess.Pty()
	var lastInput atomic.Int64
	lastInput.Store(time.Now().UnixNano())
	m := tui.New(tui.Options{
		Backend: &callerBackend{a: a, c: c},
		NoColor: noColor,
		Context: ctx,
		Attach: func(argv []string) tea.Cmd {
			if err != nil {
				return nil
			}
			return tea.Exec(&ptyExec{pty: pty, user: u, argv: argv, term: pty.Term}, func(err error) tea.Msg {
				return nil
			})
		},
	})
	opts := append(bm.MakeOptions(sess), tea.WithFilter(func(_ tea.Model, msg tea.Msg) tea.Msg {
		switch msg.(type) {
		case tea.SuspendMsg:
			return tea.ResumeMsg{}
		case tea.KeyPressMsg, tea.MouseClickMsg:
			lastInput.Store(time.Now().UnixNano())
		}
		return msg
	}))
	p := tea.NewProgram(m, opts...)
	go func() {
		t := time.NewTicker(cfg.IdleTimeout / 10)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, lastInput.Load())) > cfg.IdleTimeout {
					a.logf("ssh: %s idle for %s; closing the session", name, cfg.IdleTimeout)
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
	pty  ssh.Pty
	user launch.User
	argv []string
	term string
}

func (p *ptyExec) SetStdin(io.Reader)  {}
func (p *ptyExec) SetStdout(io.Writer) {}
func (p *ptyExec) SetStderr(io.Writer) {}

func (p *ptyExec) Run() error {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = []string{"HOME=" + p.user.Home, "USER=" + p.user.Name, "LOGNAME=" + p.user.Name, "PATH=" + launch.DefaultPath, "TERM=" + p.term, "LANG=C.UTF-8"}
	if tmp := os.Getenv("TMUX_TMPDIR"); tmp != "" {
		cmd.Env = append(cmd.Env, "TMUX_TMPDIR="+tmp)
	}
	cmd.Dir = p.user.Home
	if os.Geteuid() == 0 && p.user.UID != 0 {
		groups := make([]uint32, len(p.user.Groups))
		for i, g := range p.user.Groups {
			groups[i] = uint32(g)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.user.UID), Gid: uint32(p.user.GID), Groups: groups}}
	}
	if err := p.pty.Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// readAuthorizedKeys parses an authorized_keys file; options are ignored
// except that a key restricted with a command= is not accepted, since the
// board would bypass that command.
func readAuthorizedKeys(path string) ([]gossh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no readable %s", path)
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

// readUsersFile reads "USER KEYTYPE KEY [comment]" lines.
func readUsersFile(path string) (map[string][]gossh.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ssh users file: %w", err)
	}
	defer f.Close()
	users := make(map[string][]gossh.PublicKey)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, key, ok := strings.Cut(line, " ")
		if !ok {
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

// callerBackend is the board's backend inside the agent: the same operations
// as the socket, with the identity the SSH key fixed.
type callerBackend struct {
	a *Agent
	c lease.Caller
}

var _ tui.Backend = (*callerBackend)(nil)

func (b *callerBackend) Board(context.Context) (api.Board, error) { return b.a.Board(b.c), nil }

func (b *callerBackend) Watch(ctx context.Context) (<-chan api.Board, func() error) {
	ch := make(chan api.Board, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for {
			changed := b.a.changes()
			board := b.a.Board(b.c)
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- board:
			case <-ctx.Done():
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-b.a.ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return ch, func() error { <-done; return nil }
}

func (b *callerBackend) write() error {
	if b.c.UID < 0 {
		return &lease.Error{Code: lease.CodeForbidden, Msg: fmt.Sprintf("%s has no account on %s, so can look but not claim", b.c.User, b.a.cfg.NodeName)}
	}
	return b.a.mayWrite(b.c)
}

func (b *callerBackend) Claim(ctx context.Context, req api.ClaimRequest) (api.ClaimResponse, error) {
	if err := b.write(); err != nil {
		return api.ClaimResponse{}, err
	}
	return b.a.Claim(ctx, b.c, req)
}

func (b *callerBackend) Release(ctx context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	if err := b.write(); err != nil {
		return api.ReleaseResponse{}, err
	}
	return b.a.Release(ctx, b.c, req)
}

func (b *callerBackend) Extend(ctx context.Context, req api.ExtendRequest) (api.ClaimResponse, error) {
	if err := b.write(); err != nil {
		return api.ClaimResponse{}, err
	}
	return b.a.Extend(ctx, b.c, req)
}

// Attach attaches here only to sessions on this node; for a session on
// another node it says how to get there, since this SSH session cannot carry
// the person's own ssh keys onward.
func (b *callerBackend) Attach(ctx context.Context, id string) (api.AttachResponse, error) {
	r, err := b.a.Attach(ctx, b.c, id)
	if err != nil || r.Local {
		return r, err
	}
	port := "2222"
	if _, p, err := net.SplitHostPort(b.a.SSHAddr()); err == nil {
		port = p
	}
	return r, lease.Invalidf("%s runs on %s: open that node's board (ssh -p %s %s) or run: %s",
		r.Lease.Session, r.Lease.Node, port, r.Lease.Node, strings.Join(r.Command, " "))
}
