//go:build !gendocs

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
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
// not for every `dibs ls` (internal/daemoncmd/board.go says why).
func runBoard(cl *api.Client) error {
	return execDaemon("the board runs in dibsd", []string{"tui", "--socket", cl.Socket()})
}

// execDaemon replaces this process with dibsd and args, so the daemon keeps
// this process's id, signals (systemd's, a test's SIGTERM) and terminal.
// dibsd is looked for beside this binary first (the package installs both
// in /usr/bin; a build puts them in one directory), then on PATH.
// why leads the one line said when there is no dibsd.
func execDaemon(why string, args []string) error {
	path, err := findDaemon(why)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("run %s: %w", path, err)
}

// findDaemon names the dibsd to run, or says how to get one, after why.
func findDaemon(why string) (string, error) {
	var beside string
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), "dibsd")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("dibsd"); err == nil {
		return p, nil
	} else if errors.Is(err, exec.ErrDot) {
		return "", fmt.Errorf("dibsd is only in the current directory, which PATH names relatively: run it as ./dibsd, or put it beside %s", beside)
	}
	return "", fmt.Errorf("%s, and dibsd is neither beside this dibs (%s) nor on PATH: install the dibs package, or build it with `go build -o %s ./cmd/dibsd`", why, beside, filepath.Dir(beside))
}
