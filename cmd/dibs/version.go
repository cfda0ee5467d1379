package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/base/buildinfo"
)

// buildInfo is this binary's release, for `dibs version`, `dibs --version`
// and the man pages. The client reads no GPUs; `dibsd version` says how the
// daemon does.
func buildInfo() buildinfo.Build { return buildinfo.Read("dibs") }

func versionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release, commit and build of this dibs binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(c.stdout, buildInfo())
			return err
		},
	}
}
