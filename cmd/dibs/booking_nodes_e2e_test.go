package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// `dibs book --nodes N --gpus-per-node M` on three real agents: the
// booking is made on every node, `dibs bookings` shows it as one line with
// its nodes (--json as its parts), `dibs unbook` withdraws it whole, and
// flags that do not go together are refused in one line.
func TestCLIBookAcrossNodes(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Quiet: true})
	sock := nodes[0].Socket

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"book", "--nodes", "3", "--at", "in 5h", "--for", "2h"}, "--nodes needs --gpus-per-node M"},
		{[]string{"book", "--nodes", "2", "--gpus-per-node", "1", "-g", "1", "--at", "in 5h", "--for", "2h"}, "give either -g N (or --ids) for one node, or --nodes N --gpus-per-node M"},
		{[]string{"book", "--nodes", "2", "--gpus-per-node", "1", "--node", "node02", "--at", "in 5h", "--for", "2h"}, "--node books one node"},
		{[]string{"book", "--nodes", "4", "--gpus-per-node", "1", "--at", "in 5h", "--for", "2h"}, "asked to book 4 nodes but only 3 are up"},
		{[]string{"book", "--nodes", "2", "--gpus-per-node", "3", "--at", "in 5h", "--for", "2h"}, "at most 2 can be booked together"},
		{[]string{"run", "--nodes", "2", "--gpus-per-node", "1", "--at", "in 5h", "--for", "2h", "--", "true"}, "--at with --nodes"},
	} {
		out, errOut, code := dibs(t, sock, nil, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("dibs %s: exit %d, stderr %q, stdout %q; want one line saying %q", strings.Join(tc.args, " "), code, errOut, out, tc.want)
		}
	}
	if out, _, _ := dibs(t, sock, nil, "bookings"); !strings.Contains(out, "no bookings") {
		t.Fatalf("the refusals left bookings behind:\n%s", out)
	}

	out, errOut, code := dibs(t, sock, nil, "book", "--nodes", "3", "--gpus-per-node", "2", "--at", "in 5h", "--for", "2h", "--note", "scaling run")
	if code != 0 || !strings.Contains(out, "2 GPUs on each of 3 nodes (node01:0,1 node02:0,1 node03:0,1) booked") {
		t.Fatalf("book --nodes 3 --gpus-per-node 2: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.SplitN(out, ":", 2)[0]
	if !strings.Contains(out, "`dibs unbook "+id+"` withdraws every part") {
		t.Errorf("book --nodes does not say how to withdraw it:\n%s", out)
	}

	// Every node's agent shows it as one line.
	for _, n := range nodes {
		out, errOut, code = dibs(t, n.Socket, nil, "bookings")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], id+" ") || !strings.Contains(lines[1], "3 nodes × 2") ||
			!strings.Contains(lines[1], "on node01,node02,node03  scaling run") {
			t.Errorf("bookings at %s: exit %d; want one line for %s with its three nodes\n%s%s", n.Opts.Name, code, id, out, errOut)
		}
	}
	out, _, _ = dibs(t, sock, nil, "bookings", "--json")
	var bs api.Bookings
	if err := json.Unmarshal([]byte(out), &bs); err != nil || len(bs.Bookings) != 3 {
		t.Fatalf("bookings --json: %v\n%s", err, out)
	}
	for _, b := range bs.Bookings {
		if b.Group != id {
			t.Errorf("bookings --json: part %s has group %q, want %s", b.ID, b.Group, id)
		}
	}

	// Tab after unbook offers the booking once, by the id that names it.
	out, errOut, code = dibs(t, sock, nil, "__complete", "unbook", "")
	if code != 0 || strings.Count(out, "node") == 0 || !strings.Contains(out, id+"\tGPUs 0,1 on node01 and the booking's other nodes from ") ||
		strings.Count(out, "\t") != 1 {
		t.Errorf("__complete unbook: exit %d; want %s alone, offered for the whole booking\n%s%s", code, id, out, errOut)
	}
	if out, errOut, code = dibs(t, nodes[2].Socket, nil, "unbook", id); code != 0 || !strings.Contains(out, "unbooked "+id) {
		t.Fatalf("unbook %s: exit %d %s%s", id, code, out, errOut)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to show no bookings", func() bool {
			out, _, _ := dibs(t, n.Socket, nil, "bookings")
			return strings.Contains(out, "no bookings")
		})
	}
	// --nodes 1 is a booking of one node, as -g is.
	out, errOut, code = dibs(t, sock, nil, "book", "--nodes", "1", "--gpus-per-node", "2", "--at", "in 5h", "--for", "1h")
	if code != 0 || !strings.Contains(out, ": GPUs 0,1 on node0") || strings.Contains(out, "each of") {
		t.Errorf("book --nodes 1 --gpus-per-node 2: exit %d; want a booking of one node\n%s%s", code, out, errOut)
	}
}
