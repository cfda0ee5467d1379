package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// clusterProc is one agent process of a test cluster on loopback.
type clusterProc struct {
	name, socket string
	cmd          *exec.Cmd
	log          *syncBuffer
}

// startClusterProcs starts n `dibs agent` processes on loopback with one key
// and config, node02… joining node01, and waits until each lists them all.
func startClusterProcs(t *testing.T, n int, config string) []*clusterProc {
	t.Helper()
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "cluster.key")
	if _, e, c := dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", key); c != 0 {
		t.Fatal(e)
	}
	conf := filepath.Join(dir, "dibs.toml")
	os.WriteFile(conf, []byte(config), 0o644)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	seed := agenttest.FreePort(t)
	var procs []*clusterProc
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node%02d", i)
		p := &clusterProc{name: name, socket: filepath.Join(dir, name, "dibs.sock"), log: &syncBuffer{}}
		os.MkdirAll(filepath.Dir(p.socket), 0o755)
		port := seed
		if i > 1 {
			port = agenttest.FreePort(t)
		}
		args := []string{"agent", "--config", conf, "--node-name", name, "--sim", "2xL40S", "--data-dir", filepath.Join(dir, name, "data"),
			"--socket", p.socket, "--bind", fmt.Sprintf("127.0.0.1:%d", port), "--cluster-key-file", key, "--probe-interval", "200ms"}
		if i > 1 {
			args = append(args, "--join", fmt.Sprintf("127.0.0.1:%d", seed))
		}
		p.cmd = exec.Command(dibsBin, args...)
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		p.cmd.Env = os.Environ()
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmd, log := p.cmd, p.log
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("%s log:\n%s", name, log)
			}
		})
		procs = append(procs, p)
	}
	clients := map[string]*api.Client{}
	for _, p := range procs {
		clients[p.name] = api.NewClient(p.socket)
	}
	agenttest.Eventually(t, 20*time.Second, "every agent to see every node alive", func() bool {
		for _, p := range procs {
			b, err := clients[p.name].Board(context.Background())
			if err != nil {
				return false
			}
			alive := 0
			for _, bn := range b.Nodes {
				if bn.State == api.NodeAlive && len(bn.GPUs) > 0 {
					alive++
				}
			}
			if alive != n {
				return false
			}
		}
		return true
	})
	return procs
}

// TestGangWhoseNodeDiesIsRequeued: kill -9 the agent of one rank's node in
// the middle of a two-node gang started with --requeue. The surviving rank
// is stopped, and once the dead node has been down for lost_after the gang
// counts as failed and goes back to the queue — it does not wait for a node
// that may never return — and runs again on the nodes that are up.
func TestGangWhoseNodeDiesIsRequeued(t *testing.T) {
	agenttest.RequireTmux(t)
	procs := startClusterProcs(t, 3, "[queue]\nlost_after = \"2s\"\npreempt_grace = \"1s\"\nrequeue_backoff = \"1s\"\n[leases]\nsignal_grace = \"1s\"\n")
	sock := procs[0].socket
	cl := api.NewClient(sock)
	out, errOut, code := dibs(t, sock, nil, "run", "--nodes", "2", "--gpus-per-node", "2", "--requeue", "--max-restarts", "2", "--json", "--", "sleep", "600")
	if code != 0 {
		t.Fatalf("gang: %s", errOut)
	}
	var sub api.Submitted
	json.Unmarshal([]byte(out), &sub)
	ranks := func() map[string]string { // node → lease id of a committed rank
		b, _ := cl.Board(context.Background())
		out := map[string]string{}
		for _, n := range b.Nodes {
			for _, g := range n.GPUs {
				if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, sub.ID+"#") && l.ReservedUntil.IsZero() && n.State == api.NodeAlive {
					out[n.Name] = l.Entry
				}
			}
		}
		return out
	}
	var first map[string]string
	agenttest.Eventually(t, 10*time.Second, "both ranks to run", func() bool {
		first = ranks()
		return len(first) == 2
	})
	// Kill a rank's node that is not node01 (the origin, which decides).
	var victim *clusterProc
	for _, p := range procs[1:] {
		if _, ok := first[p.name]; ok {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("no rank outside node01: %v", first)
	}
	victim.cmd.Process.Kill()
	victim.cmd.Wait()
	killed := time.Now()
	agenttest.Eventually(t, 30*time.Second, "the gang to be requeued and run again on the nodes that are up", func() bool {
		now := ranks()
		if len(now) != 2 {
			return false
		}
		for node, entry := range now {
			if node == victim.name || entry == first[node] {
				return false // still the first attempt
			}
		}
		return true
	})
	t.Logf("gang requeued and running again %s after its node was killed", time.Since(killed).Round(100*time.Millisecond))
	// The origin marks the attempt running when the scheduler's Started
	// message arrives, just after the ranks' leases show.
	agenttest.Eventually(t, 5*time.Second, "the entry to show restart 1, running", func() bool {
		q, err := cl.Queue(context.Background())
		if err != nil {
			return false
		}
		for _, e := range q.Entries {
			if e.ID == sub.ID {
				return e.Restarts == 1 && e.Running
			}
		}
		return false
	})
}
