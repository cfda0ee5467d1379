package daemoncmd

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/tui"
)

// boardCmd is `dibsd tui`: the live board on this terminal over an agent's
// socket, which `dibs` and `dibs tui` hand over to. The board lives in
// this binary, with the demo's and the SSH front door's, because its
// libraries (bubbletea, lipgloss, bubbles and theirs) are a third of the
// client's size and their package inits run before main: linked into dibs,
// every `dibs ls` paid for a board it never opened (docs/benchmarks.md). A
// board runs for minutes, so the exec costs it nothing a person notices.
func boardCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "tui",
		Short: "Open the live board over the agent's socket (what `dibs` and `dibs tui` run)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl := api.NewClient(api.SocketPath(c.socket, os.Getenv))
			return tui.RunLocal(cl, os.Getenv("NO_COLOR") != "")
		},
	}
}
