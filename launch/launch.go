// Package launch starts and watches the processes that hold GPUs: detached tmux
// sessions that run as the claiming user, in that user's own tmux server, with a
// clean environment plus CUDA_VISIBLE_DEVICES and the DIBS_* variables. It also
// signals them for cooperative preemption, records how their command ended
// (ExitStatus), and tells callers how to attach, or attaches a terminal the
// agent holds (AttachTerminal).
//
// The agent runs as root so it can serve everyone; each tmux client it runs is
// started with the user's uid, gid and supplementary groups, so the server it
// talks to (or starts) is the one the user's own `tmux ls` sees. Run without
// root, a Launcher serves only its own uid.
//
// Every file the root agent touches for a user goes through here and is
// opened so the user cannot swap it for a link, a FIFO or a device: exit
// statuses are read relative to directories checked fd by fd (each user's
// a small tmpfs of its own, so no user can fill the agent's /run), and a
// job's working directory is checked by the kernel as the user, never
// stat'ed as root.
//
// Every tmux client run as a user is bounded in time (Options.CallTimeout):
// the server is the user's, and they can make it never answer.
//
// launch imports only the standard library, x/sys and nodeprobe's CPU
// lists: it is I/O, no rules. What a session
// means for a lease is the agent's business.
package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Errors callers act on. Every error that reaches them from this package is
// wrapped with the operation, the session and the user; test with errors.Is.
var (
	// ErrTmuxNotFound means there is no tmux binary to run; its text tells the
	// operator what to install.
	ErrTmuxNotFound = errors.New("tmux not found in PATH: install tmux (apt-get install tmux) to use dibs run")
	// ErrSessionExists means the user's tmux server already has a session with
	// that name; the agent treats it as "already started" on re-adoption.
	ErrSessionExists = errors.New("session already exists")
	// ErrNoSession means the session (or the user's whole tmux server) is gone,
	// which for the agent means the job ended.
	ErrNoSession = errors.New("no such session")
	// ErrWorkDir means Spec.Dir is not a directory the user can enter (or
	// not an absolute path): the caller's mistake, which the agent answers
	// as such. Its text does not say which, so it leaks nothing about
	// places the user cannot see.
	ErrWorkDir = errors.New("unusable working directory")
	// ErrNoAnswer means the user's tmux server (or the directory check run
	// as the user) did not answer within Options.CallTimeout: the session's
	// fate is unknown, so callers keep what they hold and ask again later.
	ErrNoAnswer = errors.New("the user's tmux server did not answer in time")
)

// errNoStartFile: this platform has no checked place for a start's command
// file (status_other.go), so Start passes the list on tmux's argv.
var errNoStartFile = errors.New("no command file for tmux on this platform")

// DefaultPath is the PATH a session's tmux client starts with: the usual system
// directories and nothing inherited from the agent.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configures a Launcher. The zero value is ready for production use.
type Options struct {
	// TmuxPath is the tmux binary, a name looked up in PATH or a path.
	// Default "tmux".
	TmuxPath string
	// TmuxTmpDir, when set, is exported as TMUX_TMPDIR to every tmux client,
	// so servers live in TmuxTmpDir/tmux-UID/default instead of
	// /tmp/tmux-UID/default. It must be world-writable and sticky (like /tmp)
	// when sessions run as several users. Tests use it to keep away from the
	// developer's own tmux; production normally leaves it empty so that a
	// user's plain `tmux ls` finds their sessions.
	TmuxTmpDir string
	// MessageTime is how long Message keeps its text in an attached client's
	// status line. Default 10s: long enough to read a "lease ends in 10
	// minutes" warning, short enough not to hide the status line for good.
	MessageTime time.Duration
	// Logf receives the few things worth telling an operator that are not
	// errors returned to a caller (a Watch poll that failed). Default: drop.
	Logf func(format string, args ...any)
	// StatusDir is where sessions started with Spec.RecordExit leave their
	// command's exit status, for ExitStatus to read: an absolute path such as
	// /run/dibs/exit, owned by this process's uid and writable by nobody
	// else, under directories that only root (or this uid) can change. Its
	// last element is made (mode 0711) when missing. Each user gets a
	// subdirectory named by uid, mode 0700, owned by that user, so a job
	// writes only its own user's statuses and the agent never reads a file
	// another user could have planted; run as root, that subdirectory is a
	// tmpfs of StatusQuota bytes of its own. Empty: RecordExit is refused.
	StatusDir string
	// PipeLog is the argv (without its last two arguments, the file and
	// the cap in bytes) that keeps a session's output for Spec.KeepLog:
	// the dibs binary's hidden `_pipe-log`, which keeps the newest output
	// in two files of at most LogMax each. Empty: a shell pipeline that
	// keeps the first LogMax bytes.
	PipeLog []string
	// LogMax caps a kept log (default 8 MiB).
	LogMax int64
	// StatusQuota caps each user's exit-status directory (default
	// DefaultStatusQuota; negative: no cap). A root Launcher mounts a tmpfs
	// of this size, owned by the user, on it: a job writes its status as
	// its user, so the user could write anything there, and on its own
	// tmpfs that fills only their own space — never the filesystem
	// StatusDir lives on (/run) nor another user's.
	StatusQuota int64
	// CallTimeout bounds every tmux client run as a user (default
	// DefaultCallTimeout). The server it talks to is the user's: they can
	// swap its socket for a listener that never answers, and nothing the
	// root agent does may wait on that for long. A call that runs out is an
	// error wrapping ErrNoAnswer, never "no such session".
	CallTimeout time.Duration
	// CPUHelper is the argv (without the CPU list and the command) that
	// runs a session's command bound to Spec.CPUs: the dibs binary's
	// hidden `_cpus` (CPUMain). Empty: sessions start unbound.
	CPUHelper []string
}

// DefaultStatusQuota is each user's exit-status space: 64 pending statuses
// (a tmpfs keeps each small file in one 4 KiB page).
const DefaultStatusQuota = 256 << 10

// DefaultCallTimeout is how long one tmux client may take. A healthy server
// answers in milliseconds; starting one (new-session on a loaded node) takes
// well under a second.
const DefaultCallTimeout = 10 * time.Second

// Launcher runs tmux on behalf of users, and reads what they keep in their
// homes for the agent. It holds no mutable state after New (but a once-only
// warning and the slots of its directory checks and file reads), so every
// method is safe to call from any goroutine at once; tmux serialises the
// commands inside each user's server.
type Launcher struct {
	tmux        string // resolved absolute path, "" when tmuxErr is set
	tmuxErr     error
	attachTmux  string // argv[0] for AttachCommand
	tmpDir      string
	messageTime time.Duration
	logf        func(string, ...any)
	euid        int    // who this process is, fixed at New
	statusDir   string // Options.StatusDir, cleaned; "" when unset
	pipeLog     []string
	logMax      int64
	callTimeout time.Duration
	statusQuota int64
	cpuHelper   []string
	noCapOnce   sync.Once // says once that status directories cannot be capped
	// dirThreads holds a slot for each working-directory check on a
	// thread of the agent's (checkDir) until its system call returns: a
	// file system that never answers keeps its thread, which cannot be
	// killed, so at most cap(dirThreads) can be stuck; past that, checks
	// go to a child process, which can.
	dirThreads chan struct{}
	// reads holds the reads of users' files still on their threads
	// (readAsUser).
	reads userReads
}

// maxDirThreads bounds the agent threads a file system that never answers
// can hold in working-directory checks (Launcher.dirThreads).
const maxDirThreads = 4

// New makes a Launcher. It does not fail: a missing tmux is reported, with what
// to install, by each call that needs it, so an agent without tmux can still
// serve the board.
func New(opts Options) *Launcher {
	l := &Launcher{
		tmpDir:      opts.TmuxTmpDir,
		messageTime: opts.MessageTime,
		logf:        opts.Logf,
		euid:        os.Geteuid(),
		attachTmux:  "tmux",
		dirThreads:  make(chan struct{}, maxDirThreads),
	}
	if opts.StatusDir != "" {
		l.statusDir = filepath.Clean(opts.StatusDir)
	}
	l.pipeLog, l.logMax = opts.PipeLog, opts.LogMax
	l.cpuHelper = slices.Clone(opts.CPUHelper)
	if l.logMax <= 0 {
		l.logMax = DefaultLogMax
	}
	name := opts.TmuxPath
	if name == "" {
		name = "tmux"
	} else {
		l.attachTmux = name
	}
	if p, err := exec.LookPath(name); err != nil {
		l.tmuxErr = ErrTmuxNotFound
	} else if l.tmux, err = filepath.Abs(p); err != nil {
		l.tmuxErr = fmt.Errorf("resolve tmux path %s: %w", p, err)
	}
	if l.messageTime <= 0 {
		l.messageTime = 10 * time.Second
	}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	l.statusQuota = opts.StatusQuota
	if l.statusQuota == 0 {
		l.statusQuota = DefaultStatusQuota
	}
	l.callTimeout = opts.CallTimeout
	if l.callTimeout <= 0 {
		l.callTimeout = DefaultCallTimeout
	}
	return l
}

// Spec describes one session to start.
type Spec struct {
	// Name is the tmux session name, e.g. "dibs-node01-42". See CheckName.
	Name string
	// User is who the session runs as.
	User User
	// Env is added to the session's environment (and to windows created in it
	// later): CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, DIBS_*, MASTER_ADDR...
	// Keys must be shell identifiers. With a StatusDir, no value appears on
	// any process's command line (prepareStart).
	Env map[string]string
	// Command is what the session runs; the session ends when it exits. Empty
	// means the user's default tmux shell, as a login shell. With exactly one
	// element it is a shell command line run with `$SHELL -c` (so
	// "python train.py | tee log" works); with more it is an argv executed
	// directly, as tmux does.
	Command []string
	// Dir is the working directory; Start checks, with the user's own
	// credentials, that the user can enter it. Default: the user's home, or /
	// when the user cannot enter it (service accounts such as nobody).
	Dir string
	// RecordExit asks Start to run Command under a small /bin/sh wrapper
	// that writes its exit status (128+n when a signal killed it) to the
	// user's directory under Options.StatusDir, for ExitStatus to read once
	// the session is gone; the agent uses it to tell a queued run that failed
	// from one that finished. A session killed as a whole (Kill, SIGKILL to
	// the wrapper) and an empty Command record nothing.
	RecordExit bool
	// KeepLog keeps the session's output (what its pane shows, every
	// byte) in a file the user owns, LogPath, capped at Options.LogMax,
	// after the session ends: a job's output outlives its session.
	KeepLog bool
	// LogName names the kept log (LogPath(User, LogName)); empty means
	// Name. The agent gives every run its own (lease.Lease.LogName), so two
	// runs that share a session name never write one file.
	LogName string
	// CPUs, when set, is the Linux CPU list ("0-15,32-47") the session's
	// command runs bound to: the cores local to its GPUs. It is applied by
	// the command itself, under Options.CPUHelper, since the user's tmux
	// server forks the pane; an empty Command then runs the login shell
	// under it.
	CPUs string
}

// Session is a started session.
type Session struct {
	Name string
	User User
	// PanePID is the process tmux started for Command. The agent uses it to
	// tie GPU processes (found by pid in nodeprobe) back to a lease; for
	// signalling use Signal, which also reaches later windows and panes.
	PanePID int
}

// validName admits exactly the names tmux keeps as given: tmux turns '.' and
// ':' into '_' and escapes non-printable bytes, and a leading '-' reads like a
// flag to anyone typing the attach command.
// (A loop, not a regexp: compiling one at package init costs every dibs
// command half a millisecond.)
func validName(name string) bool {
	if name == "" || len(name) > 128 || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckName reports whether tmux would keep name as given. A mangled name
// would break every later lookup by name, so the agent checks the names it
// derives (e.g. from a host name with dots) before starting anything.
func CheckName(name string) error {
	if !validName(name) {
		return fmt.Errorf("invalid session name %q: use 1-128 letters, digits, '_' and '-', not starting with '-' (tmux rewrites '.' and ':')", name)
	}
	return nil
}

// validEnvKey admits shell identifiers.
func validEnvKey(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Start creates the detached session s in its user's tmux server (starting the
// server if needed) in one tmux invocation, and returns as soon as tmux says
// it ran the whole command list (answerOf): the session is made, its window
// set to end with the command, and its output piped to the log. A name
// already in use is an error wrapping ErrSessionExists. If ctx ends during
// the call the session may or may not exist; Exists or List tells. Safe for
// concurrent use.
func (l *Launcher) Start(ctx context.Context, s Spec) (Session, error) {
	args, done, err := l.prepareStart(ctx, s)
	if err != nil {
		return Session{}, fmt.Errorf("start session %s as %s: %w", s.Name, s.User.Name, err)
	}
	defer done()
	out, err := l.answerOf(ctx, s.User, s.Env, args...)
	if errors.Is(err, ErrNoSession) {
		// new-session can only "miss" by reaching a server that was exiting
		// as its last session ended; the next client starts a fresh one.
		out, err = l.answerOf(ctx, s.User, s.Env, args...)
	}
	if err != nil {
		return Session{}, fmt.Errorf("start session %s as %s: %w", s.Name, s.User.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		// The session runs; a missing pid is not worth failing the job for.
		l.logf("start session %s as %s: no pane pid in tmux output %q", s.Name, s.User.Name, out)
	}
	return Session{Name: s.Name, User: s.User, PanePID: pid}, nil
}

// prepareStart checks s, then does what Start needs before tmux: the
// working directory checked as the user, the exit-status file made ready
// when s asks for one, and the command list written where only the user
// can read it. It returns the tmux arguments and what to call once tmux
// has answered (it removes that file).
//
// The list holds the session's environment (DIBS_LEASE_TOKEN, a gang's
// MASTER_PORT, the caller's carried variables) and the job's command line.
// On tmux's own argv every user on the node could read them while the
// client runs (ps, /proc/PID/cmdline): another user could bind a rank's
// rendezvous port before the job did (issue 31). So, with a StatusDir, the
// list goes in a command file of the user's, mode 0600, that tmux reads
// (`source-file`), and the argv names only that file; the same single
// round trip, and tmux sets the variables exactly as -e on its argv did
// (later windows of the session get them too).
func (l *Launcher) prepareStart(ctx context.Context, s Spec) ([]string, func(), error) {
	nothing := func() {}
	if _, err := l.startCommands(s, ""); err != nil {
		return nil, nothing, err
	}
	if l.tmuxErr != nil {
		return nil, nothing, l.tmuxErr
	}
	if _, err := credentialFor(l.euid, s.User); err != nil {
		return nil, nothing, err
	}
	if s.Dir != "" {
		if err := l.checkDir(ctx, s.User, s.Dir); err != nil {
			return nil, nothing, err
		}
	} else if s.User.Home != "" && filepath.IsAbs(s.User.Home) && l.checkDir(ctx, s.User, s.User.Home) == nil {
		s.Dir = s.User.Home
	}
	exitFile := ""
	if s.RecordExit && len(s.Command) > 0 {
		f, err := l.prepareExitFile(s.User, s.Name)
		if err != nil {
			return nil, nothing, fmt.Errorf("record exit status: %w", err)
		}
		exitFile = f
	}
	if l.statusDir == "" {
		args, err := l.startArgs(s, exitFile)
		return args, nothing, err
	}
	cmds, err := l.startCommands(s, exitFile)
	if err != nil {
		return nil, nothing, err
	}
	path, done, err := l.writeStartFile(s.User, startScript(cmds))
	if errors.Is(err, errNoStartFile) {
		args, err := l.startArgs(s, exitFile)
		return args, nothing, err
	}
	if err != nil {
		return nil, nothing, fmt.Errorf("pass the session's environment: %w", err)
	}
	// source-file starts no server; start-server does, and is a no-op
	// for a running one.
	return []string{"start-server", ";", "source-file", path}, done, nil
}

// startCommands builds the single tmux command list for Start: new-session
// with every variable as -e (a running server ignores the client's
// environment), then remain-on-exit off on the job's window so the session
// (and the lease) ends when the command does, whatever the user's
// tmux.conf says, then pipe-pane to the log, and last the pane's pid,
// printed: tmux runs none of a list's commands after one fails, so the pid
// is the answer that all ran. tmux runs the whole list before it handles
// any child exit, so even `true` cannot race it. With exitFile set the
// command runs under exitWrapper. It touches no file: the working directory
// is checkDir's business, done as the user. Each element is one command's
// words, unescaped: startArgs writes them for tmux's argv, startScript for
// a command file.
func (l *Launcher) startCommands(s Spec, exitFile string) ([][]string, error) {
	if err := CheckName(s.Name); err != nil {
		return nil, err
	}
	if s.User.Name == "" || s.User.UID < 0 {
		return nil, fmt.Errorf("user %q (uid %d) is not resolved: use LookupUser or LookupUID", s.User.Name, s.User.UID)
	}
	dir := s.Dir
	if dir == "" {
		dir = "/" // prepareStart has put the home here if the user can enter it
	} else if !filepath.IsAbs(dir) {
		return nil, &kindError{msg: fmt.Sprintf("working directory %s is not absolute: give the full path", dir), kind: ErrWorkDir}
	} else if strings.IndexByte(dir, 0) >= 0 {
		return nil, &kindError{msg: "working directory contains a NUL byte", kind: ErrWorkDir}
	}
	newSession := []string{
		"new-session", "-d",
		"-s", s.Name,
		"-c", escapeFormat(dir), // -c is format-expanded
	}
	keys := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		if !validEnvKey(k) {
			return nil, fmt.Errorf("invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		newSession = append(newSession, "-e", k+"="+s.Env[k])
	}
	if s.CPUs != "" {
		if _, err := nodeprobe.ParseCPUList(s.CPUs); err != nil {
			return nil, err
		}
	}
	if len(s.Command) > 0 {
		if s.Command[0] == "" {
			return nil, errors.New("command is empty")
		}
		for _, a := range s.Command {
			if strings.IndexByte(a, 0) >= 0 {
				return nil, fmt.Errorf("command argument %q contains a NUL byte", a)
			}
		}
		cmd := s.Command
		if exitFile != "" {
			cmd = exitWrapper(exitFile, cmd)
		}
		newSession = append(newSession, "--")
		newSession = append(newSession, l.cpuCommand(s.CPUs, cmd)...)
	} else if cmd := l.cpuCommand(s.CPUs, nil); len(cmd) > 0 {
		newSession = append(newSession, "--")
		newSession = append(newSession, cmd...)
	}
	cmds := [][]string{newSession, {"set-option", "-w", "-t", "=" + s.Name + ":", "remain-on-exit", "off"}}
	if s.KeepLog && len(s.Command) > 0 && s.User.Home != "" && filepath.IsAbs(s.User.Home) {
		logName := s.LogName
		if logName == "" {
			logName = s.Name
		}
		if err := CheckName(logName); err != nil {
			return nil, fmt.Errorf("log name: %w", err)
		}
		cmds = append(cmds, []string{"pipe-pane", "-t", "=" + s.Name + ":", escapeFormat(l.pipeCommand(s.User, logName))})
	}
	cmds = append(cmds, []string{"display-message", "-p", "-t", "=" + s.Name + ":", "#{pane_pid}"})
	return cmds, nil
}

// startArgs is Start's command list as tmux's own argv: commands joined by
// ";", and a word that ends in ';' escaped so tmux does not split it. Every
// user on the node can read a process's argv (ps, /proc/PID/cmdline), so
// Start passes this only from a Launcher with no StatusDir (tests, a
// personal agent without a socket); the agent's own start passes the list
// in a command file instead (startScript, writeStartFile).
func (l *Launcher) startArgs(s Spec, exitFile string) ([]string, error) {
	cmds, err := l.startCommands(s, exitFile)
	if err != nil {
		return nil, err
	}
	var args []string
	for i, c := range cmds {
		if i > 0 {
			args = append(args, ";")
		}
		for _, a := range c {
			args = append(args, escapeSemicolon(a))
		}
	}
	return args, nil
}

// startScript writes a command list as one line of a tmux command file,
// for `source-file`: every word quoted (configQuote), commands joined by
// " ; ". One line, so tmux runs it as one list: none of its commands after
// one that fails.
func startScript(cmds [][]string) string {
	var b strings.Builder
	for i, c := range cmds {
		if i > 0 {
			b.WriteString(" ; ")
		}
		for j, a := range c {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(configQuote(a))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// configQuote quotes s as one word of tmux's command language: single
// quotes, inside which tmux expands nothing ($HOME, ~, #, ;, braces and
// backslashes stay as they are), around printable ASCII and whole UTF-8
// characters; every other byte (a single quote, a newline or another
// control character, a byte that is not part of valid UTF-8, on which
// tmux's parser fails) is written between double quotes as an octal
// escape ("\047"), and the parts make one word, as in sh.
func configQuote(s string) string {
	var b strings.Builder
	open := false
	quote := func(want bool) {
		if open != want {
			b.WriteByte('\'')
			open = want
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '\'' {
			quote(true)
			b.WriteByte(c)
			i++
			continue
		}
		if r, n := utf8.DecodeRuneInString(s[i:]); c >= 0x80 && r != utf8.RuneError && unicode.IsPrint(r) {
			quote(true)
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		quote(false)
		fmt.Fprintf(&b, `"\%03o"`, c)
		i++
	}
	if b.Len() == 0 {
		return "''"
	}
	quote(false)
	return b.String()
}

// Exists reports whether the user's tmux server has the session. A missing
// server is (false, nil); only a failure to ask is an error. Safe for
// concurrent use.
func (l *Launcher) Exists(ctx context.Context, u User, name string) (bool, error) {
	_, err := l.run(ctx, u, "has-session", "-t", exact(name))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNoSession):
		return false, nil
	default:
		return false, fmt.Errorf("check session %s of %s: %w", name, u.Name, err)
	}
}

// Kill ends the session, which SIGHUPs its processes. A session that is already
// gone is an error wrapping ErrNoSession, so callers that only want it gone can
// ignore that case. Safe for concurrent use.
func (l *Launcher) Kill(ctx context.Context, u User, name string) error {
	_, err := l.run(ctx, u, "kill-session", "-t", exact(name))
	return wrapf(err, "kill session %s of %s", name, u.Name)
}

// List returns the names of all sessions in the user's tmux server, dibs's and
// the user's own, so the agent can re-adopt its sessions after a restart. No
// server means no sessions. Safe for concurrent use.
func (l *Launcher) List(ctx context.Context, u User) ([]string, error) {
	out, err := l.run(ctx, u, "list-sessions", "-F", "#{session_name}")
	if errors.Is(err, ErrNoSession) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions of %s: %w", u.Name, err)
	}
	return strings.Fields(string(out)), nil
}

// Message shows text in the status line of every client attached to the
// session, for warnings such as "lease ends in 10 minutes". With no client
// attached it does nothing and succeeds; a missing session is ErrNoSession.
// Safe for concurrent use.
func (l *Launcher) Message(ctx context.Context, u User, name, text string) error {
	out, err := l.run(ctx, u, "list-clients", "-t", exact(name), "-F", "#{client_name}")
	if err != nil {
		return fmt.Errorf("message session %s of %s: %w", name, u.Name, err)
	}
	clients := strings.Fields(string(out))
	if len(clients) == 0 {
		return nil
	}
	text = messageText(text)
	delay := strconv.FormatInt(l.messageTime.Milliseconds(), 10)
	var args []string
	for i, c := range clients {
		if i > 0 {
			args = append(args, ";")
		}
		args = append(args, "display-message", "-c", escapeSemicolon(c), "-d", delay, text)
	}
	_, err = l.run(ctx, u, args...)
	if err != nil && strings.Contains(err.Error(), "can't find client") {
		return nil // detached meanwhile: nobody left to tell
	}
	return wrapf(err, "message session %s of %s", name, u.Name)
}

// Watch returns a channel that is closed once the session is gone, by
// polling `tmux has-session` as the user every interval (default 1s), the
// first time one interval after the call. The channel is also closed when
// ctx is done: check ctx.Err() to tell the two apart. A poll that fails (as
// opposed to "no such session") is logged and retried, never taken as the
// end of the job. Each call owns one goroutine, which ends with the channel.
func (l *Launcher) Watch(ctx context.Context, u User, name string, interval time.Duration) <-chan struct{} {
	if interval <= 0 {
		interval = time.Second
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		t := time.NewTicker(interval)
		defer t.Stop()
		var lastErr string
		for {
			// The first look waits one interval too: the caller has just
			// made the session or found it listed, and a tmux client now
			// would only take CPU from what comes next (the run's answer).
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := l.Exists(ctx, u, name)
			if ctx.Err() != nil {
				return
			}
			if err == nil && !ok {
				return
			}
			if err != nil && err.Error() != lastErr {
				lastErr = err.Error()
				l.logf("watch session %s of %s: %v (retrying every %v)", name, u.Name, err, interval)
			}
		}
	}()
	return gone
}

// AttachCommand returns the argv a process running as u execs to attach to the
// session, locally or as the remote command of ssh. It names the socket only
// when the Launcher uses a non-default TMUX_TMPDIR.
func (l *Launcher) AttachCommand(u User, name string) []string {
	argv := []string{l.attachTmux}
	if l.tmpDir != "" {
		argv = append(argv, "-S", SocketPath(l.tmpDir, u.UID))
	}
	return append(argv, "attach-session", "-t", exact(name))
}

// SocketPath is where tmux puts uid's default server under tmpDir (TMUX_TMPDIR;
// empty means /tmp), for callers that must name the socket explicitly.
func SocketPath(tmpDir string, uid int) string {
	if tmpDir == "" {
		tmpDir = "/tmp"
	}
	return filepath.Join(tmpDir, "tmux-"+strconv.Itoa(uid), "default")
}

// exact makes a target match the session name exactly; a bare name would also
// match by prefix ("dibs-1" finding "dibs-12").
func exact(name string) string { return "=" + name }

// escapeFormat protects '#' in arguments tmux expands as formats.
func escapeFormat(s string) string { return strings.ReplaceAll(s, "#", "##") }

// messageText makes text fit to show in a tmux status line: control
// characters (C0, DEL and C1, which would reach the attached terminal),
// bidi controls, zero-width and other invisible formatting characters and
// line separators become spaces; '#' is doubled so tmux does not expand
// formats (#(cmd) would run a command); a trailing ';' is escaped.
func messageText(text string) string {
	return escapeSemicolon(escapeFormat(cleanText(text)))
}

// cleanText turns every character that could reach or mislead a terminal
// (controls, bidi and invisible formatting, line separators) into a space.
func cleanText(text string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return ' '
		}
		return r
	}, text)
}

// escapeSemicolon protects an argument ending in ';', which tmux would take as
// a command separator; tmux turns a trailing `\;` back into `;`.
func escapeSemicolon(s string) string {
	if strings.HasSuffix(s, ";") {
		return s[:len(s)-1] + `\;`
	}
	return s
}

// wrapf wraps a non-nil err with the operation; nil stays nil.
func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
