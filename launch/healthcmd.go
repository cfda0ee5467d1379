package launch

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// RunCheck runs a service's health command (`dibs serve --health-cmd`) as
// u: `/bin/sh -c cmd` in dir (the user's home when empty), with a clean
// environment (HOME, USER, LOGNAME, the default PATH) plus env, its
// output discarded, killed with its whole process group when ctx ends.
// Nil means it exited 0. The working directory is entered after the
// switch to u's credentials, so it is only one u may enter.
func (l *Launcher) RunCheck(ctx context.Context, u User, dir string, env map[string]string, cmd string) error {
	cred, err := Credential(u)
	if err != nil {
		return fmt.Errorf("health check as %s: %w", u.Name, err)
	}
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	c.Env = []string{"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name, "PATH=" + DefaultPath}
	for k, v := range env {
		if validEnvKey(k) {
			c.Env = append(c.Env, k+"="+v)
		}
	}
	switch {
	case dir != "" && filepath.IsAbs(dir):
		c.Dir = dir
	case u.Home != "" && filepath.IsAbs(u.Home):
		c.Dir = u.Home
	default:
		c.Dir = "/"
	}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second
	if err := c.Run(); err != nil {
		return fmt.Errorf("health check as %s: %w", u.Name, err)
	}
	return nil
}
