//go:build !gendocs

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
)

// daemonVerbs lists the verbs the daemon's binary, dibsd, carries: they link
// memberlist, bbolt, Prometheus, the SSH server and NVML, which the client
// a person runs every minute must not load. `dibs agent …` keeps working
// (installed units, scripts, habits) by handing its whole command line to
// dibsd.
func daemonVerbs() []struct{ use, short string } {
	return []struct{ use, short string }{
		{"agent", "Run the node daemon that holds this node's GPU leases (runs dibsd agent)"},
		{"config", "Work with the agent's config file: dibs config check [FILE] (runs dibsd config)"},
		{"probe", "Show this node's GPUs and their processes, without an agent (runs dibsd probe)"},
		{"keygen", "Write a new cluster key for encrypting gossip: dibs keygen FILE (runs dibsd keygen)"},
		{"demo", "Run a simulated four-node cluster with teammates and open the board (runs dibsd demo)"},
	}
}

// daemonCmds are the hand-offs to dibsd. They parse nothing: flags, --help
// and errors are dibsd's.
func (c *cli) daemonCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, v := range daemonVerbs() {
		cmds = append(cmds, &cobra.Command{
			Use:                v.use,
			Short:              v.short,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return execDaemon("this verb is the daemon's", os.Args[1:])
			},
		})
	}
	return cmds
}

// runBoard opens the board on this terminal over cl's socket: dibsd runs
// it (`dibsd tui`), so the board's libraries load only when a board opens,
// not for every `dibs ls` (cmd/internal/daemoncmd/board.go says why).
func runBoard(cl *api.Client) error {
	return execDaemon("the board runs in dibsd", []string{"tui", "--socket", cl.Socket()})
}

// execDaemon replaces this process with dibsd and args, so the daemon keeps
// this process's id, signals (systemd's, a test's SIGTERM) and terminal.
// dibsd is looked for beside this binary first (the package installs both
// in /usr/bin; a build puts them in one directory), then on PATH.
// why leads the one line said when there is no dibsd.
//
// The path is run as findDaemon checked it, not through a descriptor
// opened at the check: Go has no execveat, and /proc/self/fd/N would need
// /proc. Nothing is lost by that: the check (launch.TrustedBinary) passes
// only a path that nobody but root and this user can change, so there is
// no one else to race it.
func execDaemon(why string, args []string) error {
	path, err := findDaemon(why)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("run %s: %w", path, err)
}

// findDaemon names the dibsd to run, or says how to get one, after why.
// A dibsd that someone other than root and this user owns, may write or
// may swap (it, a link or a directory on its way) is refused, not passed
// over: root running a dibs from a directory others can write (a build in
// /tmp) would otherwise run as root whatever dibsd another user planted
// beside it.
func findDaemon(why string) (string, error) {
	uid := os.Geteuid()
	var beside string
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), "dibsd")
		p, err := launch.TrustedBinary(beside, uid)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", untrustedDaemon(err)
		}
	}
	p, err := exec.LookPath("dibsd")
	if errors.Is(err, exec.ErrDot) {
		return "", fmt.Errorf("dibsd is only in the current directory, which PATH names relatively: run it as ./dibsd, or put it beside %s", beside)
	}
	if err == nil {
		if p, err = filepath.Abs(p); err == nil {
			if p, err = launch.TrustedBinary(p, uid); err == nil {
				return p, nil
			}
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", untrustedDaemon(err)
		}
	}
	return "", fmt.Errorf("%s, and dibsd is neither beside this dibs (%s) nor on PATH: install the dibs package, or build it with `go build -o %s ./cmd/dibsd`", why, beside, filepath.Dir(beside))
}

// untrustedDaemon is the one line that refuses a dibsd found where
// another user could have put it, saying what to do.
func untrustedDaemon(err error) error {
	return fmt.Errorf("not running dibsd: %v; a dibsd another user can replace would run as you: install dibs and dibsd where only root (or you) can write, such as /usr/local/bin, owned by root or you and mode 0755", err)
}
