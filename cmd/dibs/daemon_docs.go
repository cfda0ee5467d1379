//go:build gendocs

package main

import (
	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/internal/daemoncmd"
)

// daemonCmds, in the build that writes the packages' man pages and
// completions, are dibsd's own commands, so `man dibs-agent` documents every
// flag and completion offers them. The binary people install hands them to
// dibsd instead (daemon_shim.go) and links none of it.
func (c *cli) daemonCmds() []*cobra.Command {
	return daemoncmd.Commands(c.stdout, c.stderr)
}
