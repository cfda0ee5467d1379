package launch

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// checkDir reports whether u can enter dir, asking the kernel as u: the
// answer is the one a chdir of u's would get, asked on a thread with u's
// file-system identity (enterOnThread) and, where that cannot be had or
// it says no, by a child process running as u (enterInChild). A thread
// stuck in a file system that does not answer keeps its slot of
// l.dirThreads until the call returns. Root never stats the path
// itself, and a directory that is missing, is not a directory, or lies where
// u may not go gets the same one message, so the answer tells u nothing
// about places u cannot see.
func (l *Launcher) checkDir(ctx context.Context, u User, dir string) error {
	cred, err := credentialFor(l.euid, u)
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	var asked bool
	select {
	case l.dirThreads <- struct{}{}:
		err, asked = enterOnThread(callCtx, u, dir, func() { <-l.dirThreads })
	default:
		// Every slot is held by a check whose file system has not
		// answered: this one goes to a child, which a timeout can kill,
		// so a user cannot pile up the agent's threads.
	}
	if !asked || err != nil && callCtx.Err() == nil {
		// A refusal is asked again of a process that is u through and
		// through: a few file systems judge by the effective uid, which
		// the thread keeps (a FUSE mount of u's own, without allow_other,
		// lets in only its owner's processes). A refusal is rare; a fork
		// then costs nothing a person notices.
		err = l.enterInChild(callCtx, u, cred, dir)
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("check working directory %s: %w", dir, ctx.Err())
	}
	if callCtx.Err() != nil {
		return fmt.Errorf("check working directory %s as %s: no answer within %v: %w", dir, u.Name, l.callTimeout, ErrNoAnswer)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT, syscall.EACCES, syscall.EPERM, syscall.ENOTDIR, syscall.ELOOP, syscall.ENAMETOOLONG:
			return &kindError{msg: fmt.Sprintf("working directory %s does not exist or %s may not enter it: give a directory you can cd into", dir, u.Name), kind: ErrWorkDir}
		}
	}
	return fmt.Errorf("check working directory %s as %s: %w", dir, u.Name, err)
}

// enterInChild is checkDir's chdir made by a child process running as u:
// `tmux -V` (which only prints the version) with dir as its working
// directory, so the chdir before its exec is the user's own. It costs a
// fork and an exec, which enterOnThread saves where it can.
func (l *Launcher) enterInChild(ctx context.Context, u User, cred *syscall.Credential, dir string) error {
	if l.tmuxErr != nil {
		return l.tmuxErr
	}
	cmd := exec.CommandContext(ctx, l.tmux, "-V")
	cmd.Env = clientEnv(u, nil, l.tmpDir)
	cmd.Dir = dir
	// A non-nil SysProcAttr also keeps os.StartProcess from stat'ing Dir in
	// this process (as root) before the fork.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.WaitDelay = time.Second
	return cmd.Run()
}
