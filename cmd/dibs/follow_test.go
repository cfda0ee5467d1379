package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// foreground is a `dibs run --follow` client the test drives like a
// person at a terminal: it signals it and reads what it printed.
type foreground struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

func startForeground(t *testing.T, socket string, args ...string) *foreground {
	t.Helper()
	f := &foreground{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	f.cmd = exec.Command(dibsBin, append([]string{"--socket", socket}, args...)...)
	f.cmd.Stdout, f.cmd.Stderr, f.cmd.Dir = f.stdout, f.stderr, "/"
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := f.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			f.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				f.code = 128 + int(ws.Signal())
			}
		}
		close(f.done)
	}()
	t.Cleanup(func() {
		f.cmd.Process.Kill()
		<-f.done
	})
	return f
}

// exited waits for the client to end and returns its status.
func (f *foreground) exited(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-f.done:
		return f.code
	case <-time.After(within):
		t.Fatalf("the client still runs after %s; stderr:\n%s", within, f.stderr)
		return 0
	}
}

var startedLine = regexp.MustCompile(`(node\d+-q\d+) started: `)

// runID is the queue id the client announced when the run started.
func (f *foreground) runID(t *testing.T) string {
	t.Helper()
	var id string
	agenttest.Eventually(t, 30*time.Second, "the client to say the run started", func() bool {
		m := startedLine.FindStringSubmatch(f.stderr.String())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	return id
}

// rankLines are the numbers n of the lines "R: rank R line n" rank R
// printed, in the order printed.
func rankLines(out string, rank int) []int {
	var ns []int
	// A pane's output ends its lines with \r\n, as a terminal gets them.
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^%d: rank %d line (\d+)\r?$`, rank, rank))
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}

// heldBy are the leases of queue entry id still held, on every node.
func heldBy(cl *api.Client, id string) []lease.Lease {
	b, err := cl.Board(context.Background())
	if err != nil {
		return []lease.Lease{{ID: "?"}}
	}
	return entryLeases(b, id)
}

// TestGangInTheForeground is issue 35's foreground gang with real agents
// and real tmux: two nodes, each rank's lines prefixed and in order, the
// status of the rank that failed first (not the 143 of the rank dibs
// stopped after it), two Ctrl-C ending a gang that ignores SIGTERM within
// seconds although the preemption grace is two minutes, and a client
// killed mid-run leaving the gang going, with dibs logs -f --resume going
// on from where the client stopped.
func TestGangInTheForeground(t *testing.T) {
	agenttest.RequireTmux(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	procs := startClusterProcs(t, 2, "[queue]\npreempt_grace = \"2m\"\n")
	sock := procs[0].socket
	cl := api.NewClient(sock)

	t.Run("lines prefixed and in order, the status of the first rank that failed", func(t *testing.T) {
		// Rank 1 exits 3 after its lines; rank 0 would sleep on, and is
		// stopped (SIGTERM: 143) when its gang fails.
		script := `for i in 1 2 3 4 5; do echo "rank $NODE_RANK line $i"; sleep 0.2; done; if [ "$NODE_RANK" = 1 ]; then sleep 2; exit 3; fi; sleep 600`
		f := startForeground(t, sock, "run", "--nodes", "2", "--gpus-per-node", "1", "--follow", "--", "sh", "-c", script)
		code := f.exited(t, 60*time.Second)
		out := f.stdout.String()
		t.Logf("the client printed:\n%s\nand on standard error:\n%s", out, f.stderr)
		if code != 3 {
			t.Errorf("exit status %d, want 3 (rank 1's); stderr:\n%s", code, f.stderr)
		}
		if !strings.Contains(f.stderr.String(), "rank 1's command exited 3 first, on node02") {
			t.Errorf("the client does not say which rank failed first:\n%s", f.stderr)
		}
		if strings.Contains(f.stderr.String(), " waiting: ") {
			t.Errorf("a run that started at once was said to wait:\n%s", f.stderr)
		}
		for rank := range 2 {
			if got := rankLines(out, rank); fmt.Sprint(got) != "[1 2 3 4 5]" {
				t.Errorf("rank %d's lines: %v, want [1 2 3 4 5] in order; output:\n%s", rank, got, out)
			}
		}
		if strings.Contains(out, "\n rank") || strings.HasPrefix(out, "rank") {
			t.Errorf("a line without its rank:\n%s", out)
		}
	})

	t.Run("one rank: its lines bare, its status", func(t *testing.T) {
		f := startForeground(t, sock, "run", "-g", "1", "--follow", "--", "sh", "-c", "echo one; echo two; exit 4")
		if code := f.exited(t, 60*time.Second); code != 4 {
			t.Errorf("exit status %d, want 4; stderr:\n%s", code, f.stderr)
		}
		if got := strings.ReplaceAll(f.stdout.String(), "\r", ""); got != "one\ntwo\n" {
			t.Errorf("printed %q, want the run's two lines bare", got)
		}
	})

	t.Run("while it waits: its place and why; Ctrl-\\ detaches and it stays queued", func(t *testing.T) {
		// One GPU held on each node: a gang of two GPUs a node waits.
		for _, n := range []string{"node01", "node02"} {
			if _, errOut, code := dibs(t, sock, nil, "claim", "-g", "1", "--node", n); code != 0 {
				t.Fatalf("claim on %s: %s", n, errOut)
			}
		}
		t.Cleanup(func() { dibs(t, sock, nil, "release", "--all") })
		f := startForeground(t, sock, "run", "--nodes", "2", "--gpus-per-node", "2", "-f", "--", "echo", "never")
		waiting := regexp.MustCompile(`(node01-q\d+) waiting: position 1 of 1: \S[^\n]*\(Ctrl-C twice withdraws, Ctrl-\\ detaches\)`)
		var id string
		agenttest.Eventually(t, 30*time.Second, "the client to say where the run waits and why", func() bool {
			m := waiting.FindStringSubmatch(f.stderr.String())
			if m != nil {
				id = m[1]
				t.Logf("%s", m[0])
			}
			return m != nil
		})
		t.Cleanup(func() { dibs(t, sock, nil, "cancel", id) })
		// One Ctrl-C: why it does not start on each node, as dibs queue -v.
		f.cmd.Process.Signal(os.Interrupt)
		agenttest.Eventually(t, 10*time.Second, "each node's reason after one Ctrl-C", func() bool {
			out := f.stderr.String()
			return strings.Contains(out, "      node01 held: ") && strings.Contains(out, "      node02 held: ") &&
				strings.Contains(out, "Ctrl-C again within a second withdraws it")
		})
		f.cmd.Process.Signal(syscall.SIGQUIT)
		if code := f.exited(t, 10*time.Second); code != 0 {
			t.Errorf("exit status %d after Ctrl-\\, want 0; stderr:\n%s", code, f.stderr)
		}
		if !strings.Contains(f.stderr.String(), "detached from "+id+"; it stays queued") {
			t.Errorf("no word of the detach:\n%s", f.stderr)
		}
		if st, err := cl.EntryStatus(context.Background(), id); err != nil || st.State != "waiting" {
			t.Errorf("after the detach %s is %v (%v), want waiting", id, st.State, err)
		}
	})

	t.Run("--pty puts the person into rank 0's session", func(t *testing.T) {
		// A real terminal: a tmux pane of its own server runs the client,
		// whose tmux attach then shows rank 0's session in it. Rank 0 is
		// on node01 (a gang's ranks go to its nodes in name order), the
		// node whose agent the client asks: attached locally, not by ssh.
		p := newPane(t, 100, 20, []string{"TMUX_TMPDIR=" + os.Getenv("TMUX_TMPDIR")},
			dibsBin, "--socket", sock, "run", "--nodes", "2", "--gpus-per-node", "1", "--pty", "--",
			"sh", "-c", `'echo "rank $NODE_RANK shell"; exec sleep 600'`)
		t.Cleanup(func() {
			if q, err := cl.Queue(context.Background()); err == nil {
				for _, e := range q.Entries {
					dibs(t, sock, nil, "cancel", e.ID)
				}
			}
		})
		p.waitFor(30*time.Second, "rank 0's session in the pane", func(s string) bool { return strings.Contains(s, "rank 0 shell") })
		if s := p.screen(); strings.Contains(s, "rank 1 shell") {
			t.Errorf("rank 1's output in rank 0's session:\n%s", s)
		}
	})

	t.Run("two Ctrl-C end every rank within seconds", func(t *testing.T) {
		// Both ranks ignore SIGTERM and tmux's hangup: only the SIGKILL
		// at the short grace's end stops them.
		script := `trap "" TERM HUP; echo "pid $$"; echo "rank $NODE_RANK line 1"; while :; do sleep 1; done`
		f := startForeground(t, sock, "run", "--nodes", "2", "--gpus-per-node", "1", "-f", "--", "sh", "-c", script)
		id := f.runID(t)
		agenttest.Eventually(t, 30*time.Second, "both ranks' first line", func() bool {
			out := f.stdout.String()
			return len(rankLines(out, 0)) > 0 && len(rankLines(out, 1)) > 0
		})
		f.cmd.Process.Signal(os.Interrupt)
		agenttest.Eventually(t, 10*time.Second, "the first Ctrl-C to print the run's state", func() bool {
			return strings.Contains(f.stderr.String(), id+" running: rank 0 on ")
		})
		if len(heldBy(cl, id)) != 2 {
			t.Fatalf("one Ctrl-C stopped the run: %v", heldBy(cl, id))
		}
		// Two more, back to back: on a loaded machine the first of them
		// may come more than a second after the one above and only show
		// the state again, but the pair is a double Ctrl-C whatever the
		// load (the client times each signal as it arrives).
		f.cmd.Process.Signal(os.Interrupt)
		f.cmd.Process.Signal(os.Interrupt)
		start := time.Now()
		code := f.exited(t, 30*time.Second)
		if code == 0 {
			t.Errorf("exit status 0 after two Ctrl-C, want non-zero; stderr:\n%s", f.stderr)
		}
		agenttest.Eventually(t, 5*time.Second, "both ranks' leases to end", func() bool { return len(heldBy(cl, id)) == 0 })
		// The ranks' shells, which ignored SIGTERM and the hangup, are gone.
		pids := regexp.MustCompile(`(?m)^[01]: pid (\d+)\r?$`).FindAllStringSubmatch(f.stdout.String(), -1)
		if len(pids) != 2 {
			t.Fatalf("want both ranks' pids in the output:\n%s", f.stdout)
		}
		t.Cleanup(func() { // if they outlived the test's run, not the machine
			for _, m := range pids {
				if pid, err := strconv.Atoi(m[1]); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
		agenttest.Eventually(t, 5*time.Second, "both ranks' processes to be gone", func() bool {
			for _, m := range pids {
				if _, err := os.Stat("/proc/" + m[1]); err == nil {
					return false
				}
			}
			return true
		})
		took := time.Since(start)
		t.Logf("two Ctrl-C: client exited %d and both ranks ended %s later", code, took.Round(100*time.Millisecond))
		if took > 20*time.Second {
			t.Errorf("the ranks took %s to end, want a few seconds (not the 2m preemption grace)", took)
		}
	})

	t.Run("a killed client leaves the run going; logs -f --resume goes on from there", func(t *testing.T) {
		script := `i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo "rank $NODE_RANK line $i"; sleep 0.25; done`
		f := startForeground(t, sock, "run", "--nodes", "2", "--gpus-per-node", "1", "--follow", "--", "sh", "-c", script)
		id := f.runID(t)
		agenttest.Eventually(t, 30*time.Second, "both ranks' third line", func() bool {
			out := f.stdout.String()
			return len(rankLines(out, 0)) >= 3 && len(rankLines(out, 1)) >= 3
		})
		// The positions are saved just after the lines are printed: a
		// kill between the two loses only that bookmark, and before the
		// first there is none to resume. Wait for one.
		agenttest.Eventually(t, 10*time.Second, "the follow's positions to be saved", func() bool {
			path, err := followStateFile(id)
			if err != nil {
				return false
			}
			_, err = os.Stat(path)
			return err == nil
		})
		f.cmd.Process.Kill() // as the SSH connection's end would
		<-f.done
		before := f.stdout.String()
		if st, err := cl.EntryStatus(context.Background(), id); err != nil || st.State != "running" {
			t.Fatalf("after the client was killed the run is %v (%v), want running", st.State, err)
		}
		out, errOut, code := dibs(t, sock, nil, "logs", id, "-f", "--resume")
		if code != 0 {
			t.Fatalf("logs -f --resume: %d %s", code, errOut)
		}
		for rank := range 2 {
			seen, resumed := rankLines(before, rank), rankLines(out, rank)
			last := seen[len(seen)-1]
			if len(resumed) == 0 || resumed[0] > last+1 || resumed[0] == 1 {
				t.Errorf("rank %d: the client printed up to line %d, the resumed follow began at %v, want line %d (a line or two again at most)", rank, last, resumed, last+1)
				continue
			}
			if resumed[len(resumed)-1] != 30 {
				t.Errorf("rank %d: the resumed follow ended at line %d, want 30:\n%s", rank, resumed[len(resumed)-1], out)
			}
			for i := 1; i < len(resumed); i++ {
				if resumed[i] != resumed[i-1]+1 {
					t.Errorf("rank %d: resumed lines out of order or missing: %v", rank, resumed)
					break
				}
			}
		}
	})
}

// TestFollowerPrefixesWholeLines: with several ranks, every line printed
// carries its rank, a line split across two reads is printed once whole,
// and the saved position of a rank counts only what was printed.
func TestFollowerPrefixesWholeLines(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	var out bytes.Buffer
	f := newFollower(nil, &out, "node01-q9", false)
	f.update([]api.LogSource{{Node: "node01", Lease: "node01-1", Rank: 0}, {Node: "node02", Lease: "node02-1", Rank: 1}})
	r0, r1 := f.ranks[0], f.ranks[1]
	f.feed(r0, []byte("a\nb"))
	r0.pos = logPos{inode: 7, offset: 3}
	f.feed(r1, []byte("x\n"))
	f.feed(r0, []byte("c\n"))
	r0.pos.offset = 5
	f.feed(r1, []byte("tail"))
	r1.pos = logPos{inode: 8, offset: 6}
	f.store()
	f.flushAll()
	if got, want := out.String(), "0: a\n1: x\n0: bc\n1: tail\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	g := newFollower(nil, &out, "node01-q9", false)
	if err := g.resume(); err != nil {
		t.Fatal(err)
	}
	if got := g.saved.Ranks["1"].Offset; got != 6 {
		t.Errorf("rank 1 saved at %d after flushing its tail, want 6", got)
	}
}

// TestFirstFailureIsTheEarliestNonZeroExit: the rank that failed first
// gives the run its status, not the 143 of the rank stopped after it.
func TestFirstFailureIsTheEarliestNonZeroExit(t *testing.T) {
	t0 := time.Now()
	ended := []lease.LedgerEntry{
		{Rank: 0, Reason: "exit-143", End: t0.Add(2 * time.Second)},
		{Rank: 1, Reason: "exit-3", End: t0},
		{Rank: 2, Reason: "exit-0", End: t0.Add(-time.Second)},
	}
	if e, code, ok := firstFailure(ended); !ok || code != 3 || e.Rank != 1 {
		t.Errorf("firstFailure = rank %d exit %d, %v; want rank 1, exit 3", e.Rank, code, ok)
	}
	if _, _, ok := firstFailure(ended[2:]); ok {
		t.Error("a run whose ranks exited 0 has a failure")
	}
}
