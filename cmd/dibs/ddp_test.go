package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// requireTorch skips unless Debian's python3-torch is installed for
// /usr/bin/python3 (the interpreter these tests name: runs carry the
// caller's PATH, where another python3 may come first).
func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		prereq.Missing(t, "needs torch for /usr/bin/python3 (apt-get install python3-torch): %v", err)
	}
	if _, err := exec.LookPath("torchrun"); err != nil {
		prereq.Missing(t, "needs torchrun (apt-get install python3-torch)")
	}
}

// startNetnsCluster starts one `dibs agent` per namespace of lab, each
// with its own host name (nodeNN, in an /etc/hosts of the nodes' own, as
// on a real cluster: torchrun tells the workers of other nodes to reach
// node 0 by its host name) and its own tmux server (a session must live in
// its node's network, and a tmux server runs its sessions where it was
// started), each node with its own PID namespace too (nsNode), and waits
// until every agent sees every node alive. It returns their sockets.
func startNetnsCluster(t *testing.T, lab *netLab, sim string) []string {
	t.Helper()
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "cluster.key")
	if out, err := exec.Command(dibsBin, "keygen", key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	var joins []string
	for _, a := range lab.addrs {
		joins = append(joins, a+":7946")
	}
	hosts := "127.0.0.1 localhost\n"
	for i, a := range lab.addrs {
		hosts += fmt.Sprintf("%s node%02d\n", a, i+1)
	}
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	socks := make([]string, len(lab.nodes))
	for i, ns := range lab.nodes {
		name := fmt.Sprintf("node%02d", i+1)
		socks[i] = filepath.Join(dir, name+".sock")
		node := bootNsNode(t, ns, name, hostsFile)
		logFile := filepath.Join(dir, name+".log")
		a := node.startAgent([]string{"TMUX_TMPDIR=" + agenttest.TmuxDir(t)}, filepath.Join(dir, name+".pid"), logFile,
			"--node-name", name, "--sim", sim, "--data-dir", filepath.Join(dir, name), "--socket", socks[i],
			"--bind", lab.addrs[i]+":7946", "--join", strings.Join(joins, ","),
			"--cluster-name", "lab", "--cluster-key-file", key, "--probe-interval", "200ms")
		t.Cleanup(func() {
			a.stop()
			if t.Failed() {
				b, _ := os.ReadFile(logFile)
				t.Logf("%s log:\n%s", name, b)
			}
		})
	}
	agenttest.Eventually(t, 30*time.Second, "the namespace nodes to form a cluster", func() bool {
		for _, s := range socks {
			b, err := api.NewClient(s).Board(context.Background())
			if err != nil {
				return false
			}
			alive := 0
			for _, n := range b.Nodes {
				if n.State == api.NodeAlive && len(n.GPUs) > 0 {
					alive++
				}
			}
			if alive != len(socks) {
				return false
			}
		}
		return true
	})
	return socks
}

// ddpResult is what testdata/ddp.py writes for each rank.
type ddpResult struct {
	Rank      int    `json:"rank"`
	WorldSize int    `json:"world_size"`
	LocalRank int    `json:"local_rank"`
	Node      string `json:"node"`
	Weights   string `json:"weights"`
}

// TestDDPGangOnNamespaceNodes trains a real DDP program (torch's gloo
// backend, on CPU) as a 2-node × 2-GPU gang on two network-namespace
// nodes, in each of the three launch styles dibs offers: one process per
// GPU started by dibs (--per-gpu), one process per node with env://, and
// torchrun (--torchrun, checked against Debian's torch 1.13 on Python
// 3.11). Every rank must finish and all replicas must end with identical
// weights.
func TestDDPGangOnNamespaceNodes(t *testing.T) {
	requireTorch(t)
	agenttest.RequireTmux(t)
	lab := newNetLab(t, 2)
	socks := startNetnsCluster(t, lab, "2xL40S")
	script, err := filepath.Abs("testdata/ddp.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		world int
		// local: the LOCAL_RANKs each node's processes see.
		local []int
	}{
		{"per-gpu", []string{"--per-gpu"}, 4, []int{0, 1}},
		{"per-node", nil, 2, []int{0}},
		{"torchrun", []string{"--torchrun"}, 4, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := agenttest.PublicDir(t)
			args := append([]string{"run", "--nodes", "2", "--gpus-per-node", "2", "--for", "10m", "--json"}, tc.flags...)
			args = append(args, "--", "/usr/bin/python3", script, out, "5")
			o, errOut, code := dibs(t, socks[0], nil, args...)
			var sub api.Submitted
			if code != 0 || json.Unmarshal([]byte(o), &sub) != nil {
				t.Fatalf("dibs %s: exit %d %q %q", strings.Join(args, " "), code, o, errOut)
			}
			start := time.Now()
			cl := api.NewClient(socks[0])
			finished := func() bool {
				q, err := cl.Queue(context.Background())
				if err != nil {
					return false
				}
				for _, e := range q.Entries {
					if e.ID == sub.ID {
						return false
					}
				}
				return true
			}
			if !poll.WaitEvery(200*time.Millisecond, 2*time.Minute-time.Since(start), finished) {
				logs, _, _ := dibs(t, socks[0], nil, "logs", sub.ID)
				t.Fatalf("the gang did not finish in 2 minutes; its output:\n%s", logs)
			}
			took := time.Since(start)
			results := map[int]ddpResult{}
			files, _ := filepath.Glob(filepath.Join(out, "rank*.json"))
			for _, f := range files {
				var r ddpResult
				b, _ := os.ReadFile(f)
				if err := json.Unmarshal(b, &r); err != nil {
					t.Errorf("%s: %v", f, err)
				}
				results[r.Rank] = r
			}
			if len(results) != tc.world {
				logs, _, _ := dibs(t, socks[0], nil, "logs", sub.ID)
				t.Fatalf("%d of %d ranks finished; the run's output:\n%s", len(results), tc.world, logs)
			}
			nodes := map[string][]int{}
			for rank := range tc.world {
				r, ok := results[rank]
				if !ok || r.WorldSize != tc.world {
					t.Errorf("rank %d: %+v, want world size %d", rank, r, tc.world)
				}
				if r.Weights != results[0].Weights {
					t.Errorf("rank %d ended with weights %s, rank 0 with %s", rank, r.Weights, results[0].Weights)
				}
				nodes[r.Node] = append(nodes[r.Node], r.LocalRank)
			}
			if len(nodes) != 2 {
				t.Errorf("ranks ran on %v, want two nodes", nodes)
			}
			if tc.name != "per-node" {
				for n, locals := range nodes {
					if fmt.Sprint(locals) != fmt.Sprint(tc.local) {
						t.Errorf("node %s ran LOCAL_RANKs %v, want %v", n, locals, tc.local)
					}
				}
			}
			t.Logf("%s: %d ranks, identical weights, %s from submit to done", tc.name, tc.world, took.Round(100*time.Millisecond))
		})
	}
}
