package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// termName admits the terminal names terminfo uses,
// [A-Za-z0-9][A-Za-z0-9._+-]{0,63}; anything else from an SSH client falls
// back to defaultTerm. (Checked byte by byte: as a regexp the bounded
// repetition cost every dibs command 0.3 ms at start-up.)
func termName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i > 0 {
			ok = ok || strings.IndexByte("._+-", c) >= 0
		}
		if !ok {
			return false
		}
	}
	return true
}

const defaultTerm = "xterm-256color"

// AttachTerminal is AttachCommand's form for a terminal this process holds:
// an *exec.Cmd that, started on a PTY (Stdin, Stdout and Stderr the PTY's
// slave end, which is what charm.land/ssh's Pty.Start sets), attaches to the
// session as u. The SSH front door (agent/ssh.go) calls it when a person
// attaches from the board over `ssh -p 2222`: the agent holds the PTY as root,
// and the client must still run as the person, with their groups and none of
// the agent's environment. term is the client's TERM (from the SSH pty
// request); an empty or odd one becomes xterm-256color.
func (l *Launcher) AttachTerminal(u User, name, term string) (*exec.Cmd, error) {
	cmd, err := l.TerminalCommand(u, term, l.AttachCommand(u, name))
	if err != nil {
		return nil, fmt.Errorf("attach to session %s of %s: %w", name, u.Name, err)
	}
	return cmd, nil
}

// TerminalCommand is AttachTerminal for any argv the agent tells a person to
// run to attach (api.AttachResponse.Command): AttachCommand's argv, or the
// `ssh -t NODE tmux attach ...` form for a session on another node. It runs
// as u (uid, gid and supplementary groups, through the same rule as every
// tmux client), with the environment a tmux client of this Launcher gets
// (clientEnv) and TERM set to term, in /, in a new session with the PTY as its
// controlling terminal so that window resizes reach it as SIGWINCH. argv[0]
// is found in DefaultPath, never in the agent's own PATH; the Launcher's
// tmux is used for "tmux". The caller starts it on the PTY and waits for it.
func (l *Launcher) TerminalCommand(u User, term string, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command to run on the terminal")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("command argument %q contains a NUL byte", a)
		}
	}
	cred, err := credentialFor(l.euid, u)
	if err != nil {
		return nil, err
	}
	path := argv[0]
	switch {
	case path == l.attachTmux || path == l.tmux:
		if l.tmuxErr != nil {
			return nil, l.tmuxErr
		}
		path = l.tmux
	case !strings.Contains(path, "/"):
		if path, err = lookDefaultPath(path); err != nil {
			return nil, err
		}
	}
	if !termName(term) {
		term = defaultTerm
	}
	env := clientEnv(u, nil, l.tmpDir)
	for i, kv := range env {
		if strings.HasPrefix(kv, "TERM=") {
			env[i] = "TERM=" + term
		}
	}
	return &exec.Cmd{
		Path: path,
		Args: argv,
		Env:  env,
		Dir:  "/",
		// Setctty makes fd 0, the PTY, the controlling terminal of the
		// new session. Credential as in every tmux client; no Pdeathsig.
		SysProcAttr: &syscall.SysProcAttr{Credential: cred, Setsid: true, Setctty: true},
	}, nil
}

// lookDefaultPath finds an executable name in DefaultPath, the PATH every
// process dibs starts for a user gets.
func lookDefaultPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(DefaultPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s: install it", name, DefaultPath)
}
