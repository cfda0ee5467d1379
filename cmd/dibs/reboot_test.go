package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

// rebootLab is two namespace nodes (nsNode: network, mount, UTS and PID
// namespaces of their own) running real agents, each reading its kernel
// boot id from a file of its own (the nodes share one kernel).
type rebootLab struct {
	t                  *testing.T
	lab                *netLab
	dir, key, hosts    string
	nodes              []*nsNode
	agents             []*nsAgent
	socks, boots, pids []string
	joins, tmux        []string
}

func newRebootLab(t *testing.T) *rebootLab {
	agenttest.RequireTmux(t)
	r := &rebootLab{t: t, lab: newNetLab(t, 2), dir: agenttest.PublicDir(t)}
	r.key, r.hosts = filepath.Join(r.dir, "cluster.key"), filepath.Join(r.dir, "hosts")
	if out, err := exec.Command(dibsBin, "keygen", r.key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	hosts := "127.0.0.1 localhost\n"
	for i, a := range r.lab.addrs {
		hosts += fmt.Sprintf("%s node%02d\n", a, i+1)
		r.joins = append(r.joins, a+":7946")
	}
	if err := os.WriteFile(r.hosts, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range r.lab.nodes {
		name := fmt.Sprintf("node%02d", i+1)
		r.socks = append(r.socks, filepath.Join(r.dir, name+".sock"))
		r.boots = append(r.boots, filepath.Join(r.dir, name+".boot-id"))
		r.pids = append(r.pids, filepath.Join(r.dir, name+".pid"))
		// Each node's tmux servers live in a directory of its own, as on
		// a machine of its own.
		r.tmux = append(r.tmux, agenttest.TmuxDir(t))
		r.setBoot(i, name+"-boot-1")
		r.nodes = append(r.nodes, bootNsNode(t, r.lab.nodes[i], name, r.hosts))
		r.agents = append(r.agents, nil)
		r.start(i)
	}
	r.waitWhole()
	return r
}

func (r *rebootLab) setBoot(i int, id string) {
	if err := os.WriteFile(r.boots[i], []byte(id+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// start runs node i's agent in the node, on its data dir, and waits until
// it answers; it returns how long that took.
func (r *rebootLab) start(i int) time.Duration {
	t := r.t
	t.Helper()
	name := fmt.Sprintf("node%02d", i+1)
	os.Remove(r.socks[i])
	began := time.Now()
	// The node's own tmux directory and boot id file.
	a := r.nodes[i].startAgent([]string{"TMUX_TMPDIR=" + r.tmux[i], daemoncmd.TestBootIDFileEnv + "=" + r.boots[i]},
		r.pids[i], filepath.Join(r.dir, name+".log"), "--node-name", name,
		"--sim", "4xL40S", "--data-dir", filepath.Join(r.dir, name), "--socket", r.socks[i],
		"--bind", r.lab.addrs[i]+":7946", "--join", strings.Join(r.joins, ","),
		"--cluster-name", "lab", "--cluster-key-file", r.key, "--probe-interval", "200ms")
	r.agents[i] = a
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(r.dir, name+".log"))
			t.Logf("%s log:\n%s", name, b)
		}
	})
	if !poll.WaitEvery(50*time.Millisecond, 30*time.Second, func() bool {
		_, err := api.NewClient(r.socks[i]).WithoutRetry().Board(context.Background())
		return err == nil
	}) {
		t.Fatalf("%s's agent did not answer within 30 s", name)
	}
	return time.Since(began)
}

// stop stops node i's agent as systemctl restart does (SIGTERM), its
// sessions left running.
func (r *rebootLab) stop(i int) { r.agents[i].stop() }

// waitWhole waits until every agent shows every node alive.
func (r *rebootLab) waitWhole() {
	r.t.Helper()
	agenttest.Eventually(r.t, 60*time.Second, "the namespace nodes to form one cluster", func() bool {
		for _, s := range r.socks {
			b, err := api.NewClient(s).WithoutRetry().Board(context.Background())
			if err != nil {
				return false
			}
			alive := 0
			for _, n := range b.Nodes {
				if n.State == api.NodeAlive && len(n.GPUs) > 0 {
					alive++
				}
			}
			if alive != len(r.socks) {
				return false
			}
		}
		return true
	})
}

// leases are the leases node i's own agent holds, by id.
func (r *rebootLab) leases(i int) map[string]lease.Lease {
	b, err := api.NewClient(r.socks[i]).WithoutRetry().Board(context.Background())
	if err != nil {
		return nil
	}
	out := map[string]lease.Lease{}
	for _, n := range b.Nodes {
		if n.Name != fmt.Sprintf("node%02d", i+1) {
			continue
		}
		for _, g := range n.GPUs {
			if g.Lease != nil {
				out[g.Lease.ID] = *g.Lease
			}
		}
	}
	return out
}

func (r *rebootLab) events() []event.Event {
	l, err := api.NewClient(r.socks[0]).Events(context.Background(), api.EventsRequest{Since: "1h"})
	if err != nil || len(l.Missing) > 0 {
		return nil
	}
	return l.Events
}

// TestNodeRebootEndsItsSessionsButRestartKeepsThem powers off a namespace
// node (its PID 1 killed: the agent, the tmux server and every session
// with it) that holds a claim's session, a --requeue run and one rank of a
// 2-node gang, and boots it again under a new kernel boot id on the same
// data dir: within seconds of the agent's start, the three leases end
// "node-rebooted" (one end each, so their holders are told once), the
// agent says once that its node rebooted, the --requeue run goes back in
// the queue, and the gang fails as after a node loss. Before that, a plain
// agent restart (same boot id) keeps all three.
func TestNodeRebootEndsItsSessionsButRestartKeepsThem(t *testing.T) {
	r := newRebootLab(t)
	run := func(sock string, args ...string) string {
		t.Helper()
		o, e, code := dibs(t, sock, nil, args...)
		if code != 0 {
			t.Fatalf("dibs %s: exit %d: %s%s", strings.Join(args, " "), code, o, e)
		}
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(o), &v); err != nil || v.ID == "" {
			t.Fatalf("dibs %s printed %q: %v", strings.Join(args, " "), o, err)
		}
		return v.ID
	}
	claimID := run(r.socks[1], "run", "-g", "1", "--node", "node02", "--for", "1h", "--json", "--", "sleep", "100000")
	requeueID := run(r.socks[0], "run", "--queue", "--requeue", "-g", "1", "--node", "node02", "--for", "1h", "--json", "--", "sleep", "100000")
	gangID := run(r.socks[0], "run", "--queue", "--nodes", "2", "--gpus-per-node", "1", "--for", "1h", "--json", "--", "sleep", "100000")
	// held are node02's three leases: the claim's, the requeue run's, the
	// gang's rank.
	var held map[string]lease.Lease
	agenttest.Eventually(t, 60*time.Second, "node02 to hold the claim, the --requeue run and a gang rank, each in a session", func() bool {
		held = r.leases(1)
		var claim, requeue, gang bool
		for id, l := range held {
			if l.Session == "" {
				return false
			}
			claim = claim || id == claimID
			requeue = requeue || strings.HasPrefix(l.Entry, requeueID)
			gang = gang || strings.HasPrefix(l.Entry, gangID)
		}
		return claim && requeue && gang && len(held) == 3
	})

	// A plain restart: the boot id is the same, so nothing ended. The
	// agent ends a reboot's leases before it answers, so once it answers
	// a wrong end would already show.
	r.stop(1)
	r.start(1)
	r.waitWhole()
	// An absence check: the re-adopted sessions are asked after every
	// 500 ms; 3 s of polls would have seen one taken for gone.
	poll.Never(t, 3*time.Second, fmt.Sprintf("after a restart (same boot id) node02 no longer holds the same three leases %v", keys(held)), func() bool {
		got := r.leases(1)
		return len(got) != 3 || !sameKeys(got, held)
	})
	for _, e := range r.events() {
		if e.Reason == string(lease.EndRebooted) {
			t.Fatalf("a restart was taken for a reboot: %s", e.Text)
		}
	}

	// Power off: every process of node02 ends with its PID 1.
	tmuxSock, _ := filepath.Glob(filepath.Join(r.tmux[1], "tmux-*", "*"))
	if len(tmuxSock) == 0 {
		t.Fatal("node02's agent started no tmux server")
	}
	r.nodes[1].powerOff()
	r.stop(1)
	for _, s := range tmuxSock {
		if out, err := exec.Command("tmux", "-S", s, "ls").CombinedOutput(); err == nil {
			t.Fatalf("node02's tmux server %s still answers after the power-off: %s", s, out)
		}
	}
	r.setBoot(1, "node02-boot-2")
	r.nodes[1] = bootNsNode(t, r.lab.nodes[1], "node02", r.hosts)
	took := r.start(1)
	// The agent ended them before it answered.
	if got := r.leases(1); len(got) != 0 {
		t.Errorf("node02's agent answered %s after its start still holding %v", took.Round(time.Millisecond), keys(got))
	}
	t.Logf("node02 answered %s after its agent started", took.Round(time.Millisecond))

	var evs []event.Event
	agenttest.Eventually(t, 60*time.Second, "the gang to fail and the --requeue run to go back in the queue, as the events say", func() bool {
		evs = r.events()
		return slices.ContainsFunc(evs, func(e event.Event) bool { return e.Kind == event.EventFail && strings.HasPrefix(e.Entry, gangID) }) &&
			slices.ContainsFunc(evs, func(e event.Event) bool { return e.Kind == event.EventRequeue && strings.HasPrefix(e.Entry, requeueID) })
	})
	ends := map[string]int{}
	rebootSaid := 0
	for _, e := range evs {
		if e.Kind == event.EventEnd && e.Node == "node02" && held[e.Lease].ID != "" {
			ends[e.Lease]++
			if e.Reason != string(lease.EndRebooted) {
				t.Errorf("lease %s ended %s, want %s: %s", e.Lease, e.Reason, lease.EndRebooted, e.Text)
			}
		}
		if e.Kind == event.EventAgentJoin && e.Reason == string(lease.EndRebooted) {
			rebootSaid++
			if e.Subject != "node02" || !strings.Contains(e.Text, "rebooted") || !strings.Contains(e.Text, "3 of its leases ended") {
				t.Errorf("the reboot event reads %q (about %s)", e.Text, e.Subject)
			}
		}
	}
	for id := range held {
		if ends[id] != 1 {
			t.Errorf("lease %s has %d end events, want exactly 1 (its holder is told once)", id, ends[id])
		}
	}
	if rebootSaid != 1 {
		t.Errorf("the node's reboot was said %d times, want once", rebootSaid)
	}
	q, err := api.NewClient(r.socks[0]).Queue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(q.Entries, func(e api.QueuedEntry) bool { return e.ID == requeueID }) {
		t.Errorf("the --requeue run %s is not in the queue after the reboot", requeueID)
	}
	if slices.ContainsFunc(q.Entries, func(e api.QueuedEntry) bool { return e.ID == gangID }) {
		t.Errorf("the gang %s (no --requeue) is still in the queue after its rank's node rebooted", gangID)
	}
}

func keys(m map[string]lease.Lease) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sameKeys(a, b map[string]lease.Lease) bool { return slices.Equal(keys(a), keys(b)) }
