package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
)

// dibsAs runs the CLI as u (uid, gid, groups, and a HOME and PATH of its
// own) against socket.
func dibsAs(t *testing.T, u launch.User, path, socket string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return dibsAsWith(t, u, []string{"PATH=" + path}, socket, args...)
}

// dibsAsWith is dibsAs with env (PATH included) added to HOME, USER and LANG.
func dibsAsWith(t *testing.T, u launch.User, env []string, socket string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(dibsBin, append([]string{"--socket", socket}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Dir = u.Home
	cmd.Env = append([]string{"HOME=" + u.Home, "USER=" + u.Name, "LANG=C.UTF-8"}, env...)
	groups := make([]uint32, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: groups}}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run dibs %v as %s: %v", args, u.Name, err)
	}
	return o.String(), e.String(), code
}

// TestCLIEventsFromAnotherNode scripts a scenario at node01 and lists it,
// in order, with `dibs events --json` at node02; `--follow` at node02 sees a
// claim made at node01 as it happens.
func TestCLIEventsFromAnotherNode(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true})
	n1, n2 := nodes[0].Socket, nodes[1].Socket
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := dibs(t, n1, nil, args...)
		if code != 0 {
			t.Fatalf("dibs %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	var remote, queued api.ClaimResponse
	json.Unmarshal([]byte(run("claim", "--node", "node02", "-g", "1", "--for", "1h", "--json")), &remote)
	run("extend", remote.ID, "--for", "30m")
	// The origin records queue-start and queue-finish when its loop next
	// sees the run's lease made or gone, a moment after the claim or the
	// release returns; events are listed oldest first, so wait for each
	// (as a user watching `dibs events` would) before the next action, or
	// under load that action is genuinely older than the record.
	recorded := func(kind event.EventKind, entry string) {
		t.Helper()
		agenttest.Eventually(t, 20*time.Second, "node01 to record "+string(kind)+" of "+entry, func() bool {
			out, _, code := dibs(t, n1, nil, "events", "--json")
			var l api.EventList
			if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
				return false
			}
			for _, e := range l.Events {
				if e.Kind == kind && e.Entry == entry {
					return true
				}
			}
			return false
		})
	}
	json.Unmarshal([]byte(run("claim", "--queue", "--node", "node01", "-g", "1", "--json")), &queued)
	recorded(event.EventStart, "node01-q1")
	run("release", queued.ID)
	recorded(event.EventFinish, "node01-q1")
	run("release", remote.ID)

	me := os.Getenv("USER")
	if me == "" {
		me = "root"
	}
	want := []string{
		"node02 claim " + remote.ID, "node02 extend " + remote.ID,
		"node01 queue-submit node01-q1", "node01 claim " + queued.ID, "node01 queue-start node01-q1",
		"node01 release " + queued.ID, "node01 queue-finish node01-q1",
		"node02 release " + remote.ID,
	}
	var got []string
	agenttest.Eventually(t, 30*time.Second, "node02 to list the scenario", func() bool {
		out, _, code := dibs(t, n2, nil, "events", "--json", "--user", me)
		var l api.EventList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false
		}
		got = got[:0]
		for _, e := range l.Events {
			what := e.Lease
			if e.Kind != event.EventClaim && e.Kind != event.EventExtend && e.Kind != event.EventRelease {
				what = e.Entry
			}
			got = append(got, e.Node+" "+string(e.Kind)+" "+what)
		}
		return len(got) >= len(want)
	})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("dibs events --json at node02:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	out, _, _ := dibs(t, n2, nil, "events", "--user", me)
	if !strings.Contains(out, "queue-finish") || !strings.Contains(out, "extended "+remote.ID) {
		t.Errorf("dibs events (table) at node02:\n%s", out)
	}

	// --follow at node02 prints a claim made at node01 as it happens.
	cmd := exec.Command(dibsBin, "--socket", n2, "events", "--follow", "--json", "--since", "1s")
	pipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// A first claim shows the follower has looked (it is within --since);
	// the second must then come as it happens.
	seen := func(what string) {
		var claim api.ClaimResponse
		json.Unmarshal([]byte(run("claim", "--node", "node01", "-g", "1", "--json")), &claim)
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the follow stream ended")
				}
				var e event.Event
				if json.Unmarshal([]byte(l), &e) == nil && e.Kind == event.EventClaim && e.Lease == claim.ID {
					return
				}
			case <-deadline:
				t.Fatalf("dibs events --follow at node02 did not print the %s claim, %s at node01", what, claim.ID)
			}
		}
	}
	seen("first")
	seen("second")
}

// TestCLILogsOfARunAndAGang: a batch run's output and both ranks of a gang,
// kept after their sessions ended, shown by `dibs logs` (as their user);
// the failed run's holder hears how it ended.
func TestCLILogsOfARunAndAGang(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	sock := nodes[0].Socket
	as := func(args ...string) (string, string, int) { return dibsAs(t, u, "/usr/bin:/bin", sock, args...) }

	out, errOut, code := as("run", "-g", "1", "--node", "node01", "--json", "--", "sh", "-c", "echo hello-from-the-job; exit 3")
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run: exit %d %s %s", code, out, errOut)
	}
	agenttest.Eventually(t, 30*time.Second, "the run to end", func() bool { return !leaseLive(nodes[0].Board(), r.ID) })
	// The output reaches the file through tmux's pipe just after the lease
	// ends (as in TestCLILogsThroughTheAgentBinary): a client that asks at
	// once may be there first.
	if !poll.Wait(15*time.Second, func() bool {
		out, errOut, code = as("logs", r.ID)
		return code == 0 && strings.Contains(out, "hello-from-the-job")
	}) {
		t.Errorf("dibs logs %s: exit %d %q %q", r.ID, code, out, errOut)
	}
	agenttest.Eventually(t, 15*time.Second, "the holder to hear the run failed", func() bool {
		b := nodes[1].BoardAs(lease.Caller{UID: u.UID, User: u.Name})
		return strings.Contains(strings.Join(b.Notices, "\n"), "failed (exit 3)")
	})

	out, errOut, code = as("run", "--nodes", "2", "--gpus-per-node", "1", "--", "sh", "-c", "echo rank-$NODE_RANK-of-$WORLD_SIZE")
	if code != 0 {
		t.Fatalf("gang: exit %d %s", code, errOut)
	}
	// "queued node01-q1: position …", or "started node01-q1 at once …".
	id := regexp.MustCompile(`node0\d-q\d+`).FindString(out)
	if id == "" {
		t.Fatalf("gang: no queue id in %q", out)
	}
	agenttest.Eventually(t, 60*time.Second, "the gang to run and finish", func() bool {
		q := nodes[0].Queue()
		return len(q.Entries) == 0 && !leaseLive(nodes[0].Board(), "")
	})
	// Each rank's output reaches its file through tmux's pipe just after
	// its lease ends, as the run's did above: wait for both.
	ranks := []string{"==> rank 0 on node0", "rank-0-of-2", "==> rank 1 on node0", "rank-1-of-2"}
	poll.Wait(15*time.Second, func() bool {
		out, errOut, code = as("logs", id)
		for _, want := range ranks {
			if !strings.Contains(out, want) {
				return false
			}
		}
		return code == 0
	})
	for _, want := range ranks {
		if !strings.Contains(out, want) {
			t.Errorf("dibs logs %s lacks %q: exit %d\n%s\n%s", id, want, code, out, errOut)
		}
	}
	out, _, _ = as("logs", id, "--rank", "1")
	if !strings.Contains(out, "rank-1-of-2") || strings.Contains(out, "rank-0") {
		t.Errorf("dibs logs %s --rank 1:\n%s", id, out)
	}
	if _, errOut, code = as("logs", id, "--rank", "5"); code == 0 || !strings.Contains(errOut, "ranks are 0, 1") {
		t.Errorf("a rank that is not there: exit %d %q", code, errOut)
	}
	// Nobody else reads them.
	if out, _, code := dibs(t, sock, nil, "logs", r.ID); code == 0 {
		t.Errorf("root's dibs logs of %s's run: exit 0\n%s", u.Name, out)
	}
}

// leaseLive reports whether lease id (any lease, for "") is on the board.
func leaseLive(b api.Board, id string) bool {
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if g.Lease != nil && (id == "" || g.Lease.ID == id) {
				return true
			}
		}
	}
	return false
}

// TestCLIClaimQueueWaitGivesUp: --wait gives up, says so, withdraws.
func TestCLIClaimQueueWaitGivesUp(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1"); c != 0 {
		t.Fatal(e)
	}
	start := time.Now()
	_, errOut, code := dibs(t, p.socket, nil, "claim", "--queue", "-g", "1", "--wait", "1s")
	if code != 124 || !strings.Contains(errOut, "gave up after waiting 1s") || !strings.Contains(errOut, "node01-q1 was withdrawn") {
		t.Errorf("claim --queue --wait 1s: exit %d %q, want 124 and why", code, errOut)
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Errorf("gave up after %s, want about 1s", d)
	}
	if out, _, _ := dibs(t, p.socket, nil, "queue"); !strings.Contains(out, "the queue is empty") {
		t.Errorf("the request stayed after --wait ran out:\n%s", out)
	}
	if _, errOut, code := dibs(t, p.socket, nil, "claim", "-g", "1", "--wait", "1s"); code == 0 || !strings.Contains(errOut, "--wait goes with --queue") {
		t.Errorf("--wait without --queue: exit %d %q", code, errOut)
	}
}

// TestCLILogsThroughTheAgentBinary: an agent process keeps a run's output
// through `_pipe-log` (the newest output, in a file the user owns): the
// client's, beside the agent's binary as the package installs them.
func TestCLILogsThroughTheAgentBinary(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "1xL40S")
	out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", p.socket, "run", "-g", "1", "--json", "--", "sh", "-c", "seq 1 3000; echo done-counting")
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run: exit %d %s %s", code, out, errOut)
	}
	agenttest.Eventually(t, 10*time.Second, "the run to end", func() bool {
		b, _ := api.NewClient(p.socket).Board(t.Context())
		return !leaseLive(b, r.ID)
	})
	// The session's last output reaches the file through tmux's pipe and
	// `_pipe-log` just after the lease ends: on a loaded machine (the
	// whole suite on 2 cores), seconds later.
	agenttest.Eventually(t, 30*time.Second, "dibs logs "+r.ID+" to show the run's whole output", func() bool {
		out, errOut, code = dibsAs(t, u, "/usr/bin:/bin", p.socket, "logs", r.ID)
		return code == 0 && strings.Contains(out, "\n2999\r\n3000\r\ndone-counting")
	})
	// The file is named for the session and when the run started
	// (lease.Lease.LogName), so runs that share a session name never mix.
	files, _ := filepath.Glob(filepath.Join(u.Home, launch.LogDir, r.Session+"-*.log"))
	if len(files) != 1 {
		t.Fatalf("kept logs of %s: %v, want one", r.Session, files)
	}
	st, err := os.Stat(files[0])
	if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != uint32(u.UID) {
		t.Errorf("the kept log: %v %v, want a file of %s's, mode 0600", st, err, u.Name)
	}
}
