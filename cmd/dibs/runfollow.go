package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// dibs run --follow: a run (one node or a gang) in the foreground, as srun
// runs one. It is queued like any run, so it waits when it does not fit;
// the client only watches: the run lives in its tmux sessions, and a
// client that goes away (SSH dropped, killed, detached) leaves it going.

// stopGrace is how long the ranks of a run cancelled with two Ctrl-C have
// between SIGTERM and the end of their sessions: srun's KillWait is 30 s,
// and a person who pressed Ctrl-C twice wants the prompt back.
const stopGrace = 5 * time.Second

// doubleInterrupt is how soon a second Ctrl-C must follow the first to
// cancel the run (srun's one second).
const doubleInterrupt = time.Second

// exitCancelled is the status of a followed run that was cancelled.
const exitCancelled = 130

// runFollower is one foreground run.
type runFollower struct {
	c   *cli
	cl  *api.Client
	id  string
	f   *follower
	pty bool
	// waitShown is the waiting line last printed (a new one only when
	// it changes).
	waitShown string
	started   bool
	attempt   string // the leases of the attempt last announced
	// submitted is when the run was queued: for startWait.
	submitted time.Time
}

// followRun follows a just-submitted run until it ends, and returns its
// status: 0 when every rank exited 0, the exit status of the first rank
// that failed, 130 when it was cancelled.
// A gang's lines carry their rank from the first, even before every
// rank's lease has reached this agent's view.
func (c *cli) followRun(cl *api.Client, sub api.Submitted, pty, gang bool) error {
	r := &runFollower{c: c, cl: cl, id: sub.ID, pty: pty, submitted: time.Now()}
	r.f = newFollower(cl, c.stdout, sub.ID, isTerminal())
	r.f.label = gang
	sigs := timedSignals(os.Interrupt, syscall.SIGQUIT)
	defer signal.Reset(os.Interrupt, syscall.SIGQUIT)
	ctx := context.Background()
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	var lastInt time.Time
	for n := 0; ; n++ {
		if n%2 == 0 {
			st, err := r.status(ctx)
			if err == nil {
				if done, err := r.step(ctx, st); done {
					return err
				}
			}
		}
		if r.started && !r.pty {
			r.f.pump(ctx)
		}
		select {
		case <-tick.C:
		case s := <-sigs:
			if s.sig == syscall.SIGQUIT {
				r.f.store()
				what := "it keeps running"
				if !r.started {
					what = "it stays queued and starts on its own"
				}
				fmt.Fprintf(c.stderr, "detached from %s; %s: `dibs logs %s -f --resume` goes on from here, `dibs cancel %s` stops it\n", safe(r.id), what, safe(r.id), safe(r.id))
				return nil
			}
			if s.at.Sub(lastInt) > doubleInterrupt {
				lastInt = s.at
				r.tellState(ctx)
				continue
			}
			return r.cancel(ctx)
		}
	}
}

// timedSignal is a signal and when it came: the second Ctrl-C counts
// from when it was pressed, not from when the client, busy answering
// the first, got to it.
type timedSignal struct {
	sig os.Signal
	at  time.Time
}

// timedSignals delivers sigs with the time each came, for the life of
// the process (a foreground run is the last thing the client does).
func timedSignals(sigs ...os.Signal) <-chan timedSignal {
	in := make(chan os.Signal, 4)
	out := make(chan timedSignal, 4)
	signal.Notify(in, sigs...)
	go func() {
		for s := range in {
			out <- timedSignal{sig: s, at: time.Now()}
		}
	}()
	return out
}

// status asks the run's origin (this agent: it was queued here) where
// the run stands.
func (r *runFollower) status(ctx context.Context) (api.EntryStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r.cl.EntryStatus(cctx, r.id)
}

// step acts on the run's state; done when the run is over (err then
// carries its status).
func (r *runFollower) step(ctx context.Context, st api.EntryStatus) (bool, error) {
	switch st.State {
	case queue.EntryWaiting, queue.EntryBackoff:
		r.showWaiting(ctx, st, false)
		return false, nil
	case queue.EntryRunning:
		if err := r.f.refresh(ctx); err != nil || len(r.f.ranks) == 0 {
			return false, nil // its leases show in a moment
		}
		r.announce()
		if r.pty {
			return true, r.attachRank0(ctx)
		}
		return false, nil
	}
	// Over: print what is left, then its status.
	r.f.drain(ctx)
	return true, r.exitStatus(ctx, st)
}

// showWaiting prints, on one line of standard error, the run's place in
// the queue and why it waits (as dibs queue shows it); with nodes, under
// it why it does not start on each node (as dibs queue -v shows it).
func (r *runFollower) showWaiting(ctx context.Context, st api.EntryStatus, nodes bool) {
	line := fmt.Sprintf("%s waiting", safe(r.id))
	if st.State == queue.EntryBackoff {
		line = fmt.Sprintf("%s failed (%s); restart %d of %d at %s", safe(r.id), safe(st.Reason), st.Restarts, st.MaxRestarts, st.RetryAt.Local().Format("15:04:05"))
	} else {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		q, err := r.cl.Queue(cctx)
		cancel()
		e := queueEntry(q, r.id)
		if !nodes && time.Since(r.submitted) < startWait && (e == nil || e.Waiting == "" || e.Waiting == queue.WaitingStarting) {
			// Not said to wait yet: a run that starts at once (the next
			// scheduling pass) never "waits".
			return
		}
		if err == nil && e != nil {
			if e.Position > 0 {
				line += fmt.Sprintf(": position %d of %d", e.Position, waitingCount(q))
			}
			if e.Waiting != "" {
				line += ": " + safe(e.Waiting)
			}
			if !e.EstStart.IsZero() {
				line += ", expected to start " + e.EstStart.Local().Format("Mon 15:04")
			}
			if nodes {
				for _, nr := range e.NodeReasons {
					line += fmt.Sprintf("\n      %s %s: %s", safe(nr.Node), nr.Code, safe(nr.Words))
				}
			}
		}
	}
	if line == r.waitShown {
		return
	}
	r.waitShown = line
	r.started = false
	if nodes {
		fmt.Fprintln(r.c.stderr, line)
		return
	}
	fmt.Fprintf(r.c.stderr, "%s (Ctrl-C twice withdraws, Ctrl-\\ detaches)\n", line)
}

// announce says, once per attempt, where its ranks run.
func (r *runFollower) announce() {
	var leases []string
	for _, rank := range r.f.order() {
		leases = append(leases, r.f.ranks[rank].src.Lease)
	}
	key := strings.Join(leases, ",")
	if key == r.attempt {
		return
	}
	r.attempt, r.started, r.waitShown = key, true, ""
	if r.pty {
		return
	}
	fmt.Fprintf(r.c.stderr, "%s started: %s (Ctrl-C shows its state, twice within a second cancels it, Ctrl-\\ detaches)\n", safe(r.id), r.f.ranksLine())
}

// tellState answers the first Ctrl-C: where the run stands.
func (r *runFollower) tellState(ctx context.Context) {
	st, err := r.status(ctx)
	switch {
	case err != nil:
		fmt.Fprintf(r.c.stderr, "%s: %v\n", safe(r.id), err)
	case st.State == queue.EntryRunning:
		r.f.refresh(ctx)
		fmt.Fprintf(r.c.stderr, "%s running: %s; Ctrl-C again within a second cancels it, Ctrl-\\ detaches\n", safe(r.id), r.f.ranksLine())
	case st.State == queue.EntryWaiting || st.State == queue.EntryBackoff:
		r.waitShown = ""
		r.showWaiting(ctx, st, true)
		r.waitShown = "" // the next regular line is printed again
		fmt.Fprintln(r.c.stderr, "Ctrl-C again within a second withdraws it, Ctrl-\\ detaches (it stays queued)")
	default:
		fmt.Fprintf(r.c.stderr, "%s %s\n", safe(r.id), st.State)
	}
}

// cancel answers the second Ctrl-C: the run is withdrawn (its ranks get
// SIGTERM from their nodes), and the ranks still running after stopGrace
// are released with SIGKILL to their sessions, so the prompt comes back
// within seconds even from a run that ignores SIGTERM; the agents alone
// would wait the preemption grace (2 minutes by default).
func (r *runFollower) cancel(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := r.cl.Cancel(cctx, r.id)
	cancel()
	var ae *api.Error
	if err != nil && !(errors.As(err, &ae) && ae.Code == "not_found") {
		return fmt.Errorf("cancel %s: %w (stop it with `dibs cancel %s`)", r.id, err, r.id)
	}
	fmt.Fprintf(r.c.stderr, "cancelling %s: SIGTERM to every rank, their sessions end in %s at the latest\n", safe(r.id), words.FormatDuration(stopGrace))
	deadline := time.Now().Add(stopGrace)
	for {
		held := r.heldLeases(ctx)
		if len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := r.cl.Release(rctx, api.ReleaseRequest{IDs: held, Kill: true})
			if errors.As(err, &ae) && strings.Contains(ae.Msg, "malformed request body") {
				// An agent before protocol 8 knows no Kill: its
				// release ends the sessions with tmux's hangup.
				_, err = r.cl.Release(rctx, api.ReleaseRequest{IDs: held})
			}
			cancel()
			if err != nil {
				fmt.Fprintf(r.c.stderr, "end %s: %v\n", strings.Join(held, " "), err)
			}
			break
		}
		if r.started && !r.pty {
			r.f.pump(ctx)
		}
		time.Sleep(followPoll) // a poll of remote leases: nothing to wait on
	}
	r.f.drain(ctx)
	if st, err := r.status(ctx); err == nil && st.State == queue.EntryFailed {
		// A rank had failed before the cancel landed: its status.
		return r.exitStatus(ctx, st)
	}
	return &exitError{code: exitCancelled, msg: "cancelled " + r.id}
}

// heldLeases are the run's leases still held, on any node.
func (r *runFollower) heldLeases(ctx context.Context) []string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := r.cl.Board(cctx)
	if err != nil {
		return nil
	}
	var ids []string
	for _, l := range entryLeases(b, r.id) {
		ids = append(ids, l.ID)
	}
	return ids
}

// attachRank0 puts the person into rank 0's session (--pty).
func (r *runFollower) attachRank0(ctx context.Context) error {
	rank0, ok := r.f.ranks[0]
	if !ok {
		return fmt.Errorf("%s has no rank 0 to attach to: `dibs logs %s` shows its ranks", r.id, r.id)
	}
	if len(r.f.ranks) > 1 {
		fmt.Fprintf(r.c.stderr, "%s started: %s; attaching to rank 0 (the others: `dibs logs %s -f`)\n", safe(r.id), r.f.ranksLine(), safe(r.id))
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return r.c.attach(cctx, r.cl, rank0.src.Lease)
}

// exitStatus is the status of a run that is over: 0 when it finished,
// the exit status of the rank that failed first (the others, stopped
// after it, exit 143 from the SIGTERM: that is not the run's status),
// 130 when it was cancelled, 1 otherwise.
func (r *runFollower) exitStatus(ctx context.Context, st api.EntryStatus) error {
	switch st.State {
	case queue.EntryFinished:
		return nil
	case queue.EntryCancelled:
		return &exitError{code: exitCancelled, msg: r.id + " was cancelled"}
	case queue.EntryFailed:
		// The ranks' ledger entries say how each ended; a rank's node
		// writes its entry as the lease ends, a moment after the origin
		// heard of it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rec, err := r.cl.Run(cctx, r.id)
			cancel()
			if err == nil {
				if e, code, ok := firstFailure(rec.Ended); ok {
					msg := fmt.Sprintf("%s failed: its command exited %d on %s (lease %s)", r.id, code, e.Node, e.LeaseID)
					if len(rec.Ended) > 1 {
						msg = fmt.Sprintf("%s failed: rank %d's command exited %d first, on %s (lease %s); the other ranks were stopped", r.id, e.Rank, code, e.Node, e.LeaseID)
					}
					return &exitError{code: code, msg: msg}
				}
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(followPoll) // a poll of the ranks' ledgers
		}
		return &exitError{code: 1, msg: fmt.Sprintf("%s failed: %s", r.id, st.Reason)}
	}
	return &exitError{code: 1, msg: fmt.Sprintf("%s ended, its state %s (`dibs events` says more)", r.id, st.State)}
}

// firstFailure is the rank that failed first, and its exit status: the
// earliest end with a non-zero exit status.
func firstFailure(ended []lease.LedgerEntry) (lease.LedgerEntry, int, bool) {
	sorted := slices.Clone(ended)
	slices.SortStableFunc(sorted, func(a, b lease.LedgerEntry) int { return a.End.Compare(b.End) })
	for _, e := range sorted {
		if code, ok := lease.EndReason(e.Reason).ExitCode(); ok && code != 0 {
			return e, code, true
		}
	}
	return lease.LedgerEntry{}, 0, false
}

// checkFollow refuses what does not go with --follow or --pty.
func checkFollow(f claimFlags, q queueFlags, attach, follow, pty bool, args []string) error {
	flag := "--follow"
	if pty {
		flag = "--pty"
	}
	switch {
	case follow && pty:
		return errors.New("--follow prints the ranks' output, --pty puts you into rank 0's session: give one")
	case attach:
		return fmt.Errorf("%s and --attach: --attach opens a run's session, %s follows it; give one (a gang's rank 0: --pty)", flag, flag)
	case f.at != "":
		return fmt.Errorf("%s with --at: a booked run starts later; follow it then with dibs logs ID -f", flag)
	case f.json:
		return fmt.Errorf("%s prints the run's output, not JSON: drop --json", flag)
	case q.sweep():
		return fmt.Errorf("%s follows one run: an array or a run that waits for others starts later; follow a task with dibs logs ID -f", flag)
	case len(args) == 0:
		return fmt.Errorf("%s starts a command: give it, as in dibs run -g 1 %s -- python train.py (a shell: -- bash)", flag, flag)
	}
	return nil
}
