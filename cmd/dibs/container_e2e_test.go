package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// TestAdoptRootfulContainer: rootful docker runs a container's processes as
// root, so on the holder's GPU they are flagged as not the holder's. After
// `dibs adopt --container ID` (the real CLI, as a real user: SO_PEERCRED
// says who) they are the holder's on both nodes' boards and in `dibs ls`,
// still after the agent restarts. A container that also runs on a GPU the
// caller does not hold, or on none of theirs, is refused with one line and
// nothing changes.
func TestAdoptRootfulContainer(t *testing.T) {
	ana, bob := launchtest.User(t), launchtest.User(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S", "2xL40S"}, Quiet: true})
	n1, n2 := nodes[0], nodes[1]
	const path = "/usr/bin:/bin"
	claim := func(u launch.User, ids string) string {
		t.Helper()
		out, errOut, code := dibsAs(t, u, path, n1.Socket, "claim", "--node", "node01", "--ids", ids, "--json")
		var r api.ClaimResponse
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("%s claims GPUs %s: exit %d %q %q", u.Name, ids, code, out, errOut)
		}
		return r.ID
	}
	anaLease := claim(ana, "0,1")
	claim(bob, "2")

	const mine, spans, unleased = "3f2a9c1b7d4e", "9a8b7c6d5e4f", "0123456789ab"
	root := 0
	load := sim.Load{GPUs: map[int]sim.GPULoad{
		0: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 4242, UID: &root, Command: "python", UsedMemoryMiB: 9000, Container: mine}}},
		1: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 4343, UID: &root, Command: "python", UsedMemoryMiB: 9000, Container: spans}}},
		2: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 4343, UID: &root, Command: "python", UsedMemoryMiB: 9000, Container: spans}}},
		3: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 4444, UID: &root, Command: "python", UsedMemoryMiB: 9000, Container: unleased}}},
	}}
	if err := n1.Probe.SetLoad(load); err != nil {
		t.Fatal(err)
	}
	// gpu0 is GPU 0 of node01 on n's board, once its process shows.
	gpu0 := func(n *agenttest.Node) (api.GPU, *lease.Lease, bool) {
		b, err := n.Client.Board(context.Background())
		if err != nil {
			return api.GPU{}, nil, false
		}
		for _, bn := range b.Nodes {
			if bn.Name == "node01" && len(bn.GPUs) == 4 && len(bn.GPUs[0].Processes) == 1 {
				return bn.GPUs[0], bn.GPUs[0].Lease, true
			}
		}
		return api.GPU{}, nil, false
	}
	squatted := func(n *agenttest.Node, want bool) func() bool {
		return func() bool {
			g, l, ok := gpu0(n)
			return ok && l != nil && slices.Contains(g.Flags, lease.FlagSquatted) == want
		}
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 10*time.Second, n.Opts.Name+" flags root's container on ana's GPU 0", squatted(n, true))
	}
	if out, _, _ := dibsAs(t, ana, path, n2.Socket, "ls"); !strings.Contains(out, "squatted") {
		t.Errorf("dibs ls at node02 before the adopt does not flag GPU 0:\n%s", out)
	}

	// The refusals first: each is one line, exits non-zero and changes nothing.
	for _, tc := range []struct {
		who  launch.User
		id   string
		want string
	}{
		{ana, spans, "container " + spans + " runs pid 4343 on GPU 2 (held by " + bob.Name + "), which you do not hold"},
		{ana, unleased, "runs pid 4444 on GPU 3 (not leased), which you do not hold"},
		{bob, mine, "container " + mine + " runs pid 4242 on GPU 0 (held by " + ana.Name + "), which you do not hold"},
		{ana, "deadbeef0000", "no process of container deadbeef0000 runs on a GPU of node01"},
		{ana, "trainer", `"trainer" is not a container id`},
	} {
		out, errOut, code := dibsAs(t, tc.who, path, n1.Socket, "adopt", "--container", tc.id)
		if code == 0 || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s adopts %s: exit %d, stdout %q, stderr %q; want one line saying %q", tc.who.Name, tc.id, code, out, errOut, tc.want)
		}
	}
	if _, l, _ := gpu0(n1); l == nil || len(l.Containers) != 0 {
		t.Fatalf("after the refusals ana's lease adopts %v, want nothing", l)
	}

	out, errOut, code := dibsAs(t, ana, path, n1.Socket, "adopt", "--container", mine)
	if code != 0 || !strings.Contains(out, "container "+mine+" is yours") || !strings.Contains(out, "lease "+anaLease) {
		t.Fatalf("ana adopts %s: exit %d %q %q", mine, code, out, errOut)
	}
	adopted := func(n *agenttest.Node) func() bool {
		return func() bool {
			g, l, ok := gpu0(n)
			return ok && l != nil && slices.Equal(l.Containers, []string{mine}) && !slices.Contains(g.Flags, lease.FlagSquatted)
		}
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" counts the adopted container as ana's", adopted(n))
	}
	out, _, _ = dibsAs(t, ana, path, n2.Socket, "ls")
	if !strings.Contains(out, "└ container "+mine+" (adopted)") || !strings.Contains(out, "container "+mine) {
		t.Errorf("dibs ls at node02 does not show the adopted container under ana's lease:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "node01" && f[1] == "0" && strings.Contains(line, "squatted") {
			t.Errorf("dibs ls at node02 still flags GPU 0: %q", line)
		}
	}
	// Adopting it again is no change and no error.
	out, errOut, code = dibsAs(t, ana, path, n1.Socket, "adopt", "--container", mine+strings.Repeat("0", 52), "--json")
	var again api.AdoptContainerResponse
	if code != 0 || json.Unmarshal([]byte(out), &again) != nil || again.Container != mine || len(again.Leases) != 1 || !slices.Equal(again.Leases[0].Containers, []string{mine}) {
		t.Errorf("ana adopts her container again by its full id: exit %d %q %q; want it once on her lease", code, out, errOut)
	}

	// Durable: a restarted agent has it from bbolt, not from memory.
	n1.Restart()
	if err := n1.Probe.SetLoad(load); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the restarted node01 still counts the container as ana's", adopted(n1))
	agenttest.Eventually(t, 10*time.Second, "node02 still counts it as ana's after node01's restart", adopted(n2))
}
