package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// run executes one tmux client as u and returns its stdout. Errors from tmux
// itself are *tmuxError, carrying the first line of its stderr.
func (l *Launcher) run(ctx context.Context, u User, args ...string) ([]byte, error) {
	if l.tmuxErr != nil {
		return nil, l.tmuxErr
	}
	cred, err := credentialFor(l.euid, u)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	cmd := exec.CommandContext(callCtx, l.tmux, args...)
	l.asClient(cmd, cred, u, nil)
	stdout, stderr := headBuffer{max: maxClientOutput}, headBuffer{max: maxClientErrors}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err == nil && stdout.over {
		return nil, fmt.Errorf("tmux %s as %s printed more than %d bytes: not read", args[0], u.Name, maxClientOutput)
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	return nil, l.clientError(ctx, callCtx.Err() != nil, u, args[0], err, stderr.String())
}

// Bounds on what the agent keeps of a tmux client's output: the user's
// server, or whatever answers on their socket, decides what it prints.
const (
	maxClientOutput = 1 << 20 // every session of a user, a name of up to 128 bytes each, many times over
	maxClientErrors = 4 << 10 // of which the first line is read
)

// headBuffer keeps the first max bytes written to it and drops the rest,
// noting that it did, so a client's output cannot fill the agent's memory.
// The buffer is a field, not embedded: an embedded bytes.Buffer would give
// it ReadFrom, which io.Copy (and so os/exec) calls instead of Write.
type headBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	room := max(b.max-b.buf.Len(), 0)
	if len(p) > room {
		b.over = true
	}
	b.buf.Write(p[:min(len(p), room)])
	return len(p), nil
}

// Bytes is what was kept.
func (b *headBuffer) Bytes() []byte { return b.buf.Bytes() }

// String is what was kept, as text.
func (b *headBuffer) String() string { return b.buf.String() }

// maxAnswer bounds what answerOf reads before its answer: a pane's pid,
// after whatever a hook of the user's tmux.conf prints.
const maxAnswer = 4 << 10

// answerOf runs the tmux client for args, whose last command prints a number
// (a pane's pid), and returns that line as soon as tmux writes it; lines
// before it (a hook of the user's tmux.conf may print) are skipped. tmux
// writes a client's output only after it has run the client's whole command
// list, and runs none of a list's commands after one fails, so the number is
// the answer that every command ran. The client's own exit is no part of
// that answer: it is reaped in the background (killed at the call timeout),
// so the caller waits for what the user waits for and not for the client's
// teardown. Until the line, the client is the caller's: ctx's end or the
// call timeout kills it, and with no line its failure is returned as run
// returns it. The client's LANG and PATH come from session, a session's
// variables (Start passes its Spec's): a server the client starts then
// renders UTF-8 the way the job expects, and tmux gives a new pane the PATH
// of the client that made it.
func (l *Launcher) answerOf(ctx context.Context, u User, session map[string]string, args ...string) ([]byte, error) {
	if l.tmuxErr != nil {
		return nil, l.tmuxErr
	}
	cred, err := credentialFor(l.euid, u)
	if err != nil {
		return nil, err
	}
	name := args[0]
	if name == "start-server" {
		// A start's list from its command file (prepareStart): its
		// errors are new-session's, and are told as such.
		name = "new-session"
	}
	cmd := exec.Command(l.tmux, args...)
	l.asClient(cmd, cred, u, session)
	stderr := headBuffer{max: maxClientErrors}
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("run tmux %s as %s: %w", name, u.Name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, l.clientError(ctx, false, u, name, err, "")
	}
	// kill ends the client and stops the read of its output, which a child
	// of its own (a wrapper's) may hold open.
	kill := func() {
		cmd.Process.Kill()
		stdout.Close()
	}
	var answered, timedOut atomic.Bool
	timeout := time.AfterFunc(l.callTimeout, func() {
		timedOut.Store(true)
		kill()
	})
	stop := context.AfterFunc(ctx, func() {
		if !answered.Load() {
			kill()
		}
	})
	out := bufio.NewReader(io.LimitReader(stdout, maxAnswer))
	var line []byte
	for {
		line, err = out.ReadBytes('\n')
		if err != nil || isNumber(bytes.TrimSpace(line)) {
			break
		}
	}
	if err == nil {
		answered.Store(true)
		stop()
		go func() {
			io.Copy(io.Discard, stdout)
			err := cmd.Wait()
			timeout.Stop()
			if err != nil {
				l.logf("tmux %s as %s answered, then: %v", name, u.Name, l.clientError(context.Background(), timedOut.Load(), u, name, err, stderr.String()))
			}
		}()
		return line, nil
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	timeout.Stop()
	stop()
	if err == nil {
		return line, nil
	}
	return nil, l.clientError(ctx, timedOut.Load(), u, name, err, stderr.String())
}

// asClient makes cmd a tmux client as u: the environment clientEnv builds
// from session, the credential cred, started in /.
func (l *Launcher) asClient(cmd *exec.Cmd, cred *syscall.Credential, u User, session map[string]string) {
	cmd.Env = clientEnv(u, session, l.tmpDir)
	cmd.Dir = "/" // the server inherits it; never pin the agent's directory
	// Credential only, and deliberately no Pdeathsig: the server this client
	// may fork must outlive the agent, or an agent restart would end every job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.WaitDelay = time.Second
}

// clientError is what a tmux client's failure err means to its caller:
// ctx's end, no answer within the call timeout (ErrNoAnswer), tmux's own
// words (*tmuxError, from stderr), or no tmux at all (ErrTmuxNotFound).
func (l *Launcher) clientError(ctx context.Context, timedOut bool, u User, cmd string, err error, stderr string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("tmux %s: %w", cmd, ctx.Err())
	}
	if timedOut {
		return fmt.Errorf("tmux %s as %s: no answer within %v: %w", cmd, u.Name, l.callTimeout, ErrNoAnswer)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return newTmuxError(cmd, stderr)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return ErrTmuxNotFound
	}
	return fmt.Errorf("run tmux %s as %s: %w", cmd, u.Name, err)
}

// tmuxError is a tmux command that ran and failed.
type tmuxError struct {
	cmd  string // the tmux command, e.g. "new-session"
	msg  string // tmux's stderr, one line
	kind error  // ErrSessionExists, ErrNoSession or nil
}

func newTmuxError(cmd, stderr string) *tmuxError {
	msg := strings.TrimSpace(stderr)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = "failed with no message"
	}
	e := &tmuxError{cmd: cmd, msg: msg}
	switch {
	case strings.HasPrefix(msg, "duplicate session"):
		e.kind = ErrSessionExists
	case strings.HasPrefix(msg, "can't find session"),
		strings.HasPrefix(msg, "no server running"),
		// The socket's directory is missing: no server ever ran there.
		strings.HasPrefix(msg, "error connecting to") && strings.HasSuffix(msg, "(No such file or directory)"),
		// The client reached a server that was exiting (its last session
		// just ended) or crashed: either way its sessions are gone.
		strings.HasPrefix(msg, "server exited unexpectedly"),
		// A server left with no session at all (it is about to exit)
		// cannot resolve any target.
		msg == "no current target":
		e.kind = ErrNoSession
	}
	return e
}

func (e *tmuxError) Error() string { return "tmux " + e.cmd + ": " + e.msg }
func (e *tmuxError) Unwrap() error { return e.kind }

// clientEnv is the whole environment of a tmux client, built from scratch so
// nothing of the agent's (root's) environment reaches the user. A server the
// client starts takes it as its global environment; a running server ignores
// it, which is why Start passes the session's variables with -e. LANG and
// PATH come from session when it has them (the caller's PATH travels with a
// run: the client runs as u, and tmux itself is the agent's absolute path).
func clientEnv(u User, session map[string]string, tmpDir string) []string {
	lang, path := session["LANG"], session["PATH"]
	if lang == "" {
		lang = "C.UTF-8"
	}
	if path == "" {
		path = DefaultPath
	}
	shell := u.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	env := []string{
		"HOME=" + u.Home,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
		"SHELL=" + shell,
		"PATH=" + path,
		"LANG=" + lang,
		"TERM=xterm-256color",
	}
	if tmpDir != "" {
		env = append(env, "TMUX_TMPDIR="+tmpDir)
	}
	return env
}

// credentialFor decides who the tmux client for u runs as when this process
// runs as euid: nil means "as this process". Root switches to the user's uid,
// gid and supplementary groups; anyone else may act only for itself.
func credentialFor(euid int, u User) (*syscall.Credential, error) {
	if u.UID < 0 || u.GID < 0 {
		return nil, fmt.Errorf("user %q has no valid uid/gid (%d/%d): use LookupUser or LookupUID", u.Name, u.UID, u.GID)
	}
	if euid == u.UID {
		return nil, nil
	}
	if euid != 0 {
		return nil, otherUserError{euid: euid}
	}
	groups := make([]uint32, 0, len(u.Groups))
	for _, g := range u.Groups {
		groups = append(groups, uint32(g))
	}
	return &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: groups}, nil
}

// otherUserError is a non-root agent asked to act for someone else.
type otherUserError struct{ euid int }

func (e otherUserError) Error() string {
	return fmt.Sprintf("the agent runs as uid %d and can start sessions only for that user; run the agent as root to serve other users", e.euid)
}

// Is makes errors.Is(err, fs.ErrPermission) true, the category it belongs to.
func (e otherUserError) Is(target error) bool { return target == fs.ErrPermission }

// Credential is what a child process started by this process needs to run as
// u: nil when this process already is u; u's uid, gid and supplementary
// groups when it is root; an error (fs.ErrPermission) otherwise. Every
// process dibs starts for a user goes through it, so none can run with
// root's groups by mistake.
func Credential(u User) (*syscall.Credential, error) {
	return credentialFor(os.Geteuid(), u)
}

// isNumber reports whether b is a non-empty run of decimal digits.
func isNumber(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
