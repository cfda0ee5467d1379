package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
)

func logsCmd(c *cli) *cobra.Command {
	var rank int
	var follow, raw, resume bool
	cmd := &cobra.Command{
		Use:   "logs ID [--rank N] [-f] [--resume]",
		Short: "Show a run's output, kept after its session ends (every rank of a gang)",
		Long: `Show what a run printed: a lease started with a command (dibs run -- CMD), or a
queued request (every rank of its latest attempt, each under a header), or
an array (every task's latest attempt, each under a header naming the task;
one task alone is ARRAY/N), or a tmux session's name. The
output is kept in ~/` + launch.LogDir + `/SESSION.log on the node that ran it,
a file only you can read, capped at 8 MiB (the older 8 MiB in SESSION.log.1),
and shown from any node. -f keeps printing what running sessions add:
every rank of a gang, each line with its rank in front ("1: …"), until
every rank has ended. A follow (this one, or dibs run --follow) notes how
far it printed each rank in ~/.local/state/dibs/follow/ID.json; --resume
goes on from there, after a follow was stopped, detached or cut off.

On a terminal, escape sequences that could change it (titles, the clipboard)
are dropped and colours kept; --raw prints every byte.`,
		Example: `  dibs logs node01-42
  dibs logs node01-q3 --rank 1
  dibs logs node01-q7        # every task of an array; node01-q7/3 is one
  dibs logs node02-7 -f
  dibs logs node01-q3 -f --resume   # every rank, from where the last follow stopped`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cl := c.client()
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			srcs, err := cl.LogSources(fctx, args[0])
			if sess, ok := c.orServiceSession(fctx, cl, err, args[0]); ok {
				srcs, err = cl.LogSources(fctx, sess)
			}
			cancel()
			if err != nil {
				return err
			}
			if tasks := arrayTasks(srcs); len(tasks) > 1 && (follow || cmd.Flags().Changed("rank")) {
				shown := tasks
				if len(shown) > 8 {
					shown = append(shown[:8:8], "…")
				}
				return fmt.Errorf("%s is an array of %d tasks with logs: name one (%s), as in dibs logs %s", args[0], len(tasks), strings.Join(shown, " "), tasks[0])
			}
			if cmd.Flags().Changed("rank") {
				i := slices.IndexFunc(srcs, func(s api.LogSource) bool { return s.Rank == rank })
				if i < 0 {
					return fmt.Errorf("%s has no rank %d: its ranks are %s", args[0], rank, ranks(srcs))
				}
				srcs = srcs[i : i+1]
			}
			var out io.Writer = c.stdout
			filter := !raw && isTerminal()
			if follow || resume {
				f := newFollower(cl, c.stdout, args[0], filter)
				if cmd.Flags().Changed("rank") {
					f.only = rank
				}
				if resume {
					if err := f.resume(); err != nil {
						return err
					}
				}
				for _, s := range srcs {
					if err := hasLog(ctx, cl, s); err != nil {
						return err
					}
				}
				f.update(srcs)
				if !follow {
					f.drain(ctx)
					return nil
				}
				err := followRanks(ctx, f)
				if ctx.Err() != nil && f.save {
					fmt.Fprintf(c.stderr, "\nstopped following %s: `dibs logs %s -f --resume` goes on from here\n", safe(args[0]), safe(args[0]))
				}
				return err
			}
			if filter {
				out = &escapeFilter{w: c.stdout}
			}
			for _, s := range srcs {
				switch {
				case s.Task != "" && s.Rank > 0:
					fmt.Fprintf(c.stdout, "==> task %s rank %d on %s (%s, tmux %s) <==\n", safe(s.Task), s.Rank, safe(s.Node), safe(s.Lease), safe(s.Session))
				case s.Task != "":
					fmt.Fprintf(c.stdout, "==> task %s on %s (%s, tmux %s) <==\n", safe(s.Task), safe(s.Node), safe(s.Lease), safe(s.Session))
				case len(srcs) > 1:
					fmt.Fprintf(c.stdout, "==> rank %d on %s (%s, tmux %s) <==\n", s.Rank, safe(s.Node), safe(s.Lease), safe(s.Session))
				}
				if _, err := printLog(ctx, cl, out, s); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&rank, "rank", 0, "only this rank of a gang")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the running sessions add, every rank of a gang with its rank in front (\"1: …\"); Ctrl-C ends")
	cmd.Flags().BoolVar(&resume, "resume", false, "go on from where the last dibs run --follow or dibs logs -f of ID on this machine stopped printing, rank by rank")
	cmd.Flags().BoolVar(&raw, "raw", false, "print every byte, escape sequences and all")
	return cmd
}

// arrayTasks lists the array tasks among srcs, once each, in order; none
// when the name given was not an array's.
func arrayTasks(srcs []api.LogSource) []string {
	var out []string
	for _, s := range srcs {
		if s.Task != "" && !slices.Contains(out, safe(s.Task)) {
			out = append(out, safe(s.Task))
		}
	}
	return out
}

func ranks(srcs []api.LogSource) string {
	s := ""
	for i, x := range srcs {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(x.Rank)
	}
	return s
}

// logPos is where a reader of a log is: the current file's inode and how
// far into it.
type logPos struct {
	inode  uint64
	offset int64
}

// printLog prints the rotated part, then the current file, whole.
func printLog(ctx context.Context, cl *api.Client, w io.Writer, s api.LogSource) (logPos, error) {
	if _, err := copyPart(ctx, cl, w, s, ".1", 0); err != nil && !notFound(err) {
		return logPos{}, err
	}
	pos, err := copyPart(ctx, cl, w, s, "", 0)
	if notFound(err) {
		return logPos{}, fmt.Errorf("no log of %s on %s: only runs started with a command keep one (a shell's session keeps none)", s.Lease, s.Node)
	}
	return pos, err
}

// hasLog refuses to follow a source that keeps no log (a shell's
// session), which would otherwise be followed, silently, until it ends.
func hasLog(ctx context.Context, cl *api.Client, s api.LogSource) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := cl.ReadLog(cctx, api.LogReadRequest{Node: s.Node, Session: logName(s), Max: 1})
	if notFound(err) {
		return fmt.Errorf("no log of %s on %s: only runs started with a command keep one (a shell's session keeps none)", s.Lease, s.Node)
	}
	return err
}

func notFound(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == "not_found"
}

// copyPart copies one file of a log from off to its end, chunk by chunk.
func copyPart(ctx context.Context, cl *api.Client, w io.Writer, s api.LogSource, part string, off int64) (logPos, error) {
	var pos logPos
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ch, err := cl.ReadLog(cctx, api.LogReadRequest{Node: s.Node, Session: logName(s), Part: part, Offset: off, Max: 128 << 10})
		cancel()
		if err != nil {
			return pos, err
		}
		if pos.inode != 0 && ch.Inode != pos.inode {
			off = 0 // rotated under us: the new file from its start
		}
		pos.inode = ch.Inode
		if _, err := w.Write(ch.Data); err != nil {
			return pos, err
		}
		off += int64(len(ch.Data))
		pos.offset = off
		if len(ch.Data) == 0 || off >= ch.Size {
			return pos, nil
		}
	}
}

// followRanks prints what the followed ranks add until every one has
// ended and everything they wrote is printed, or until Ctrl-C.
func followRanks(ctx context.Context, f *follower) error {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for checks := 0; ; checks++ {
		got, err := f.pump(ctx)
		if err != nil {
			return nil // Ctrl-C
		}
		if !got && checks%4 == 3 {
			f.refresh(ctx)
			if !f.running() {
				f.drain(ctx)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// escapeFilter passes a job's output to a terminal without the escape
// sequences that act on the terminal itself rather than draw (OSC: titles,
// the clipboard, hyperlinks; DCS, APC, PM, SOS), keeping colours and cursor
// movement (CSI), which a job's progress bars need.
type escapeFilter struct {
	w     io.Writer
	state int // 0 text, 1 after ESC, 2 inside a string sequence, 3 ESC inside one
}

func (f *escapeFilter) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for _, b := range p {
		switch f.state {
		case 0:
			if b == 0x1b {
				f.state = 1
				continue
			}
			out = append(out, b)
		case 1:
			switch b {
			case ']', 'P', '_', '^', 'X':
				f.state = 2
			default:
				out = append(out, 0x1b, b)
				f.state = 0
			}
		case 2:
			switch b {
			case 0x07:
				f.state = 0
			case 0x1b:
				f.state = 3
			}
		case 3:
			if b == '\\' {
				f.state = 0
			} else {
				f.state = 2
			}
		}
	}
	if _, err := f.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// pipeLogCmd is what tmux's pipe-pane runs, as the user, to keep a job's
// output (launch.PipeLog). Hidden: people never run it. Agents now name
// dibsd's own; the client keeps it for an agent of a release before dibsd,
// which names /usr/bin/dibs until the package's upgrade restarts it.
func pipeLogCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:    "_pipe-log FILE MAX_BYTES",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return launch.PipeLogArgs(os.Stdin, args[0], args[1])
		},
	}
}

// logName names the file a source's output is kept in: its own name, or
// its session's for a run from before logs had names of their own.
func logName(s api.LogSource) string {
	if s.Log != "" {
		return s.Log
	}
	return s.Session
}
