// Package daemoncmd is the command line of dibsd, the daemon's binary: the
// agent, the demo, the GPU probe, keygen and config check — everything that
// links the daemon's parts (memberlist, bbolt, Prometheus, the SSH server,
// NVML). The client, dibs, links none of it and hands these verbs to dibsd
// (cmd/dibs/daemon_shim.go), so the command a person runs every minute
// starts like squeue. This package only parses and prints; the work happens
// in agent, demo and nodeprobe.
package daemoncmd

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/base/buildinfo"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/launch"
)

// ExitConfig is the status of an agent that cannot start with its config or
// flags (sysexits' EX_CONFIG); the packaged unit does not restart on it
// (RestartPreventExitStatus in packaging/dibs.service).
const ExitConfig = 78

// cli carries what every subcommand needs instead of package-level state.
type cli struct {
	stdout io.Writer
	stderr io.Writer
	// socket is the --socket flag of the root the commands hang under.
	socket string
}

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Main runs dibsd with args (os.Args[1:]) and returns its exit status. An
// error is one line on stderr, escaped (it may quote a peer or a config
// file), prefixed "dibs:" as the client's are: to a person it is one
// product, whichever binary spoke.
func Main(args []string, stdout, stderr io.Writer) int {
	root := Root(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "dibs: "+termsafe.String(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "dibs: "+termsafe.String(err.Error()))
	return 1
}

// Root is dibsd's command tree, for Main and for the release's man pages
// (`man dibsd`, `man dibsd-agent`, written by the client's gen-docs).
func Root(stdout, stderr io.Writer) *cobra.Command {
	c := &cli{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "dibsd",
		Short: "The dibs daemon: the node agent, the demo, the GPU probe and the cluster key",
		Long: `dibsd is the daemon's binary. The dibs package runs "dibsd agent" as the
dibs.service unit on every GPU node; people run the client, dibs, which
hands "dibs agent", "dibs demo", "dibs probe", "dibs keygen" and
"dibs config check" to this binary.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildInfo().Release(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&c.socket, "socket", "", "the agent's socket (default: $DIBS_SOCKET, then /run/dibs/dibs.sock as root, else your own: $XDG_RUNTIME_DIR/dibs.sock, /run/user/UID/dibs.sock or ~/.local/state/dibs/dibs.sock)")
	root.AddCommand(c.commands()...)
	root.AddCommand(versionCmd(c), pipeLogCmd(), cpusCmd(), boardCmd(c))
	return root
}

// Commands are the daemon's verbs as the client names them (agent, config,
// probe, keygen, demo), for a root that carries --socket itself: the
// client's man pages and completions are generated from its tree with
// these in place of its hand-off commands (cmd/dibs/daemon_docs.go).
func Commands(stdout, stderr io.Writer) []*cobra.Command {
	return (&cli{stdout: stdout, stderr: stderr}).commands()
}

func (c *cli) commands() []*cobra.Command {
	return []*cobra.Command{agentCmd(c), configCmd(c), probeCmd(c), keygenCmd(c), demoCmd(c)}
}

// buildInfo is this binary's release and how it reads GPUs.
func buildInfo() buildinfo.Build {
	b := buildinfo.Read("dibsd")
	b.Probes, b.NVML = true, nvmlBuilt
	return b
}

func versionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release, commit and build of this dibsd binary, and how it reads GPUs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(c.stdout, buildInfo())
			return err
		},
	}
}

// isTerminal reports whether stdin and stdout are both a terminal, where the
// demo opens its board.
func isTerminal() bool {
	for _, f := range []*os.File{os.Stdin, os.Stdout} {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
			return false
		}
	}
	return true
}

// cpusCmd is what a session's command runs under to be bound to the
// cores local to its GPUs (launch.CPUMain); the agent names its own
// executable. Hidden: people never run it.
func cpusCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "_cpus LIST [COMMAND...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return launch.CPUMain(args, os.Stderr)
		},
	}
}

// pipeLogCmd is what tmux's pipe-pane runs, as the user, to keep a job's
// output (launch.PipeLog): the agent names its own executable, so dibsd
// carries it. Hidden: people never run it.
func pipeLogCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "_pipe-log FILE MAX_BYTES",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return launch.PipeLogArgs(os.Stdin, args[0], args[1])
		},
	}
}
