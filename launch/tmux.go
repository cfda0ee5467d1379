package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// run executes one tmux client as u and returns its stdout. Errors from tmux
// itself are *tmuxError, carrying the first line of its stderr.
func (l *Launcher) run(ctx context.Context, u User, args ...string) ([]byte, error) {
	return l.runWith(ctx, u, nil, args...)
}

// runWith is run with the client's LANG and PATH taken from session, a
// session's variables (Start passes its Spec's): a server the client starts
// then renders UTF-8 the way the job expects, and tmux gives a new pane the
// PATH of the client that made it, not the session's.
func (l *Launcher) runWith(ctx context.Context, u User, session map[string]string, args ...string) ([]byte, error) {
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
	cmd.Env = clientEnv(u, session, l.tmpDir)
	cmd.Dir = "/" // the server inherits it; never pin the agent's directory
	// Credential only, and deliberately no Pdeathsig: the server this client
	// may fork must outlive the agent, or an agent restart would end every job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("tmux %s: %w", args[0], ctx.Err())
	}
	if callCtx.Err() != nil {
		return nil, fmt.Errorf("tmux %s as %s: no answer within %v: %w", args[0], u.Name, l.callTimeout, ErrNoAnswer)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, newTmuxError(args[0], stderr.String())
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrTmuxNotFound
	}
	return nil, fmt.Errorf("run tmux %s as %s: %w", args[0], u.Name, err)
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
