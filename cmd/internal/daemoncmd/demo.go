package daemoncmd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/demo"
	"github.com/dibs-gpu/dibs/tui"
)

func demoCmd(c *cli) *cobra.Command {
	var noTUI bool
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a simulated four-node cluster with teammates in this process and open the board",
		Long: `Start four dibs agents in this process, gossiping over loopback with a fresh
key: node01 with 6 × RTX PRO 6000 Blackwell, an A100 split into MIG instances and
an A100 shared by memory budgets; node02 with 8 × RTX PRO 6000; node03 with
4 × RTX 5090 in pool rtx5090; node04 with 4 × L40S. Simulated teammates claim,
run and release; one GPU has a squatter; one lease is about to expire; two of
node02's GPUs are booked for tomorrow morning. What you claim and run is real: tmux
sessions on this machine with the right CUDA_VISIBLE_DEVICES. Quitting stops
the cluster and ends the demo's sessions.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := exec.LookPath("tmux"); err != nil {
				fmt.Fprintln(c.stderr, "note: tmux is not installed, so `r` (run) will fail; claims still work (apt-get install tmux)")
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			d, err := demo.Start(ctx, demo.Options{Dir: dir, TmuxTmpDir: os.Getenv("TMUX_TMPDIR")})
			if err != nil {
				return err
			}
			defer d.Stop()
			if noTUI || !isTerminal() {
				fmt.Fprintf(c.stdout, "dibs demo: 4 nodes up; node01's socket is %s\n", d.Socket())
				fmt.Fprintf(c.stdout, "try:  DIBS_SOCKET=%s dibs ls\n", d.Socket())
				fmt.Fprintln(c.stdout, "Ctrl-C stops the cluster and ends the demo's sessions.")
				<-ctx.Done()
				return nil
			}
			return tui.RunLocal(api.NewClient(d.Socket()), os.Getenv("NO_COLOR") != "")
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "keep the demo's data and socket (dibs.sock) in DIR instead of a temp dir")
	cmd.Flags().BoolVar(&noTUI, "no-tui", false, "keep the cluster up without the board and print the socket to use with the CLI")
	return cmd
}
