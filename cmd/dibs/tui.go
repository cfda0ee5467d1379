package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/demo"
	"github.com/dibs-gpu/dibs/tui"
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
			if _, err := cl.Board(ctx); err != nil {
				return err
			}
			return runBoard(cl)
		},
	}
}

// runBoard opens the board on this terminal over an agent's socket. Attach
// suspends the board and runs tmux attach (or ssh) in the terminal.
func runBoard(cl *api.Client) error {
	m := tui.New(tui.Options{
		Backend: cl,
		NoColor: os.Getenv("NO_COLOR") != "",
		Attach: func(argv []string) tea.Cmd {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = without(os.Environ(), "TMUX")
			return tea.ExecProcess(cmd, func(error) tea.Msg { return nil })
		},
	})
	_, err := tea.NewProgram(m).Run()
	return err
}

func isTerminal() bool {
	for _, f := range []*os.File{os.Stdin, os.Stdout} {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
			return false
		}
	}
	return true
}

func demoCmd(c *cli) *cobra.Command {
	var noTUI bool
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a simulated four-node cluster with teammates in this process and open the board",
		Long: `Start four dibs agents in this process, gossiping over loopback with a fresh
key: node01 and node02 with 8 × RTX PRO 6000 Blackwell, node03 with 4 × RTX 5090,
node04 with 4 × L40S. Simulated teammates claim, run and release; one GPU has a
squatter; one lease is about to expire. What you claim and run is real: tmux
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
			return runBoard(api.NewClient(d.Socket()))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "keep the demo's data and socket (dibs.sock) in DIR instead of a temp dir")
	cmd.Flags().BoolVar(&noTUI, "no-tui", false, "keep the cluster up without the board and print the socket to use with the CLI")
	return cmd
}
