// Command dibs shares a few GPU servers among a small team: an agent per node
// holds advisory leases on its GPUs, and the CLI and board claim, run and
// release them. This package only parses flags and prints; the work happens in
// the packages it imports.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
)

// cli carries what every subcommand needs instead of package-level state.
type cli struct {
	stdout io.Writer
	stderr io.Writer
	// socket is the --socket flag shared by every client verb.
	socket string
}

func main() {
	c := &cli{stdout: os.Stdout, stderr: os.Stderr}
	root := rootCmd(c)
	if cmd, err := root.ExecuteC(); err != nil {
		os.Exit(reportError(os.Stderr, cmd, err))
	}
}

// reportError prints a command's error on w — as one JSON object when the
// command was given --json — and returns the exit status.
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	switch {
	case askedJSON(cmd):
		// A script asked for JSON: its errors are JSON too.
		printJSONError(w, err)
	case ee != nil && ee.msg == "":
	default:
		// An error may quote an agent's or a peer's message, which may
		// quote a process name or a note: escape it like every other text.
		fmt.Fprintln(w, "dibs: "+safe(err.Error()))
	}
	return code
}

// askedJSON reports whether the command that failed was given --json.
func askedJSON(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Changed && f.Value.String() == "true"
}

// jsonError is an error as `--json` prints it: the message and, when the
// agent gave one, its code (invalid, conflict, forbidden, …; see
// docs/api.md).
type jsonError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// printJSONError writes err as one JSON object on w.
func printJSONError(w io.Writer, err error) {
	je := jsonError{Error: err.Error(), Code: "error"}
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code != "":
		je.Code = ae.Code
	case refusal.CodeOf(err) != "":
		je.Code = string(refusal.CodeOf(err))
	}
	if perr := printJSON(w, je); perr != nil {
		fmt.Fprintln(w, "dibs: "+safe(err.Error()))
	}
}

// safe makes text from outside (agents, peers, /proc) safe to print; see
// termsafe.String. Every string the CLI prints that it did not write itself
// goes through it (boards through api.Board.Escaped, JSON through
// printJSON).
func safe(s string) string { return termsafe.String(s) }

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func rootCmd(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "dibs",
		Short: "Share GPUs without a scheduler and without Slack pings",
		Long: `dibs shares a few GPU servers among a small team without a scheduler. An
agent on every node (dibsd agent, the dibs.service unit) holds advisory,
time-limited leases ("dibs") on its GPUs and gossips them to the others;
this client claims free GPUs, starts tmux sessions on them with the right
CUDA_VISIBLE_DEVICES, queues what does not fit, and shows who holds what.
On a terminal, dibs alone opens the live board.

Common commands:
  dibs ls                           every GPU: who holds it, for how long, what runs
  dibs claim -g 2 --for 3h          claim two GPUs on this node for three hours
  dibs run -g 1 -- python train.py  claim and start the command in a tmux session
  dibs run --queue -g 8 -- ...      wait in the cluster's queue when it does not fit
  dibs attach                       open your newest session
  dibs release LEASE                end a lease (and its session)
  dibs who, dibs queue, dibs usage  holders, the queue, GPU-hours per person
  dibs doctor                       the cluster's health; when to move to SLURM

The daemon's verbs (agent, demo, probe, keygen, config check) run dibsd, the
daemon's binary, installed beside dibs. The guide for people:
/usr/share/doc/dibs/user-guide.md; for the admin: operations.md beside it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `dibs version` prints (see build.release).
		Version: buildInfo().Release(),
	}
	root.SetFlagErrorFunc(suggestFlag)
	root.PersistentFlags().StringVar(&c.socket, "socket", "", "agent socket (default: $DIBS_SOCKET, then /run/dibs/dibs.sock, else your own agent's: $XDG_RUNTIME_DIR/dibs.sock, /run/user/UID/dibs.sock or ~/.local/state/dibs/dibs.sock); it must lie in a directory only root or you can write, and be served by root or you")
	root.AddCommand(lsCmd(c), claimCmd(c), runCmd(c),
		releaseCmd(c), extendCmd(c), adoptCmd(c), attachCmd(c), whoCmd(c), statusCmd(c),
		tuiCmd(c), queueCmd(c), cancelCmd(c), usageCmd(c), historyCmd(c), effCmd(c), versionCmd(c),
		doctorCmd(c), replayCmd(c), exportCmd(c), leaveCmd(c))
	// agent, config, probe, keygen and demo are the daemon's: dibsd runs them.
	root.AddCommand(c.daemonCmds()...)
	root.AddCommand(bookCmd(c), bookingsCmd(c), unbookCmd(c))
	root.AddCommand(serveCmd(c), servicesCmd(c), urlCmd(c), stopCmd(c))
	root.AddCommand(eventsCmd(c), notifyCmd(c), logsCmd(c), jupyterCmd(c), pipeLogCmd(c))
	root.AddCommand(c.extraCmds()...)
	// Completion for the shells the package ships it for (bash, zsh, fish):
	// cobra's default command also offers PowerShell, which no Linux
	// package installs or documents, so it is dropped (its man page too).
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		for _, sub := range comp.Commands() {
			if sub.Name() == "powershell" {
				comp.RemoveCommand(sub)
			}
		}
	}
	// `dibs` alone on a terminal opens the board; elsewhere it prints help.
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q: `dibs --help` lists them", args[0])
		}
		if !isTerminal() {
			return cmd.Help()
		}
		return tuiCmd(c).RunE(cmd, nil)
	}
	root.Args = cobra.ArbitraryArgs
	return root
}
