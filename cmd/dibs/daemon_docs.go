//go:build gendocs

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
	"github.com/dibs-gpu/dibs/tui"
)

// daemonCmds, in the build that writes the packages' man pages and
// completions, are dibsd's own commands, so `man dibs-agent` documents every
// flag and completion offers them. The binary people install hands them to
// dibsd instead (daemon_shim.go) and links none of it.
func (c *cli) daemonCmds() []*cobra.Command {
	return daemoncmd.Commands(c.stdout, c.stderr)
}

// runBoard, in the docs build (which links dibsd's commands anyway), opens
// the board in this process; the installed client hands it to dibsd.
func runBoard(cl *api.Client) error {
	return tui.RunLocal(cl, os.Getenv("NO_COLOR") != "")
}
