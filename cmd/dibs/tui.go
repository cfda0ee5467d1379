package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func tuiCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "tui",
		Short: "Open the live board (also what `dibs` with no arguments does on a terminal)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl := c.client()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// Say what is wrong here, in one line, before handing over.
			if _, err := cl.Board(ctx); err != nil {
				return err
			}
			return runBoard(cl)
		},
	}
}

func isTerminal() bool {
	for _, f := range []*os.File{os.Stdin, os.Stdout} {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
			return false
		}
	}
	return true
}
