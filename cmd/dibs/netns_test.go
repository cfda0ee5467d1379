package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// netLab is a set of network namespaces joined by a bridge in a hub
// namespace: separate hosts on one machine. Addresses live only inside the
// namespaces the test creates and removes.
type netLab struct {
	t     *testing.T
	hub   string
	nodes []string
	addrs []string
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: the partition test builds network namespaces with ip netns and veth")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		prereq.Missing(t, "needs iproute2 (ip) for network namespaces")
	}
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	lab := &netLab{t: t, hub: "dibshub" + tag}
	if out, err := exec.Command("ip", "netns", "add", lab.hub).CombinedOutput(); err != nil {
		prereq.Missing(t, "cannot create network namespaces here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(lab.remove)
	run(t, "ip", "-n", lab.hub, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", lab.hub, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("dibs%s-%d", tag, i)
		addr := fmt.Sprintf("10.213.77.%d", i)
		lab.nodes = append(lab.nodes, ns)
		lab.addrs = append(lab.addrs, addr)
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		run(t, "ip", "link", "add", "dv"+tag+"x"+fmt.Sprint(i), "type", "veth", "peer", "name", "dh"+tag+"x"+fmt.Sprint(i))
		run(t, "ip", "link", "set", "dv"+tag+"x"+fmt.Sprint(i), "netns", ns, "name", "eth0")
		run(t, "ip", "link", "set", "dh"+tag+"x"+fmt.Sprint(i), "netns", lab.hub)
		run(t, "ip", "-n", lab.hub, "link", "set", "dh"+tag+"x"+fmt.Sprint(i), "master", "br0")
		run(t, "ip", "-n", lab.hub, "link", "set", "dh"+tag+"x"+fmt.Sprint(i), "up")
		run(t, "ip", "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	}
	return lab
}

// cut takes node i (0-based) off the bridge, or puts it back.
func (l *netLab) cut(i int, off bool) {
	state := "up"
	if off {
		state = "down"
	}
	tag := strings.TrimPrefix(l.hub, "dibshub")
	run(l.t, "ip", "-n", l.hub, "link", "set", "dh"+tag+"x"+fmt.Sprint(i+1), state)
}

func (l *netLab) remove() {
	for _, ns := range l.nodes {
		exec.Command("ip", "netns", "del", ns).Run()
	}
	exec.Command("ip", "netns", "del", l.hub).Run()
}

// TestPartitionKeepsEachSideServingItsOwnGPUs cuts one node off, checks that
// both sides keep granting their own GPUs, that nobody can claim the other
// side's, that no GPU is ever held twice, and that the views converge after
// the network heals.
func TestPartitionKeepsEachSideServingItsOwnGPUs(t *testing.T) {
	lab := newNetLab(t, 3)
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "cluster.key")
	if out, err := exec.Command(dibsBin, "keygen", key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	var joins []string
	for _, a := range lab.addrs {
		joins = append(joins, a+":7946")
	}
	socks := make([]string, 3)
	for i, ns := range lab.nodes {
		name := fmt.Sprintf("node0%d", i+1)
		socks[i] = filepath.Join(dir, name+".sock")
		node := bootNsNode(t, ns, name, "")
		logFile := filepath.Join(dir, name+".log")
		a := node.startAgent(nil, filepath.Join(dir, name+".pid"), logFile, "--node-name", name,
			"--sim", "2xL40S", "--data-dir", filepath.Join(dir, name), "--socket", socks[i],
			"--bind", lab.addrs[i]+":7946", "--join", strings.Join(joins, ","),
			"--cluster-name", "lab", "--cluster-key-file", key)
		t.Cleanup(func() {
			a.stop()
			if t.Failed() {
				b, _ := os.ReadFile(logFile)
				t.Logf("%s log:\n%s", name, b)
			}
		})
	}
	clients := make([]*api.Client, 3)
	for i := range socks {
		clients[i] = api.NewClient(socks[i])
	}
	board := func(i int) api.Board {
		b, _ := clients[i].Board(context.Background())
		return b
	}
	state := func(b api.Board, node string) string {
		for _, n := range b.Nodes {
			if n.Name == node {
				return n.State
			}
		}
		return ""
	}
	allAlive := func() bool {
		for i := range clients {
			b := board(i)
			for _, n := range []string{"node01", "node02", "node03"} {
				if state(b, n) != api.NodeAlive {
					return false
				}
			}
		}
		return true
	}
	agenttest.Eventually(t, 20*time.Second, "three nodes in three namespaces to form a cluster", allAlive)

	grants := map[string]string{} // "node:gpu" -> lease id, for every grant ever made
	claim := func(at int, node string) (api.ClaimResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := clients[at].Claim(ctx, api.ClaimRequest{Node: node, Count: 1})
		if err == nil {
			for _, g := range r.GPUs {
				k := fmt.Sprintf("%s:%d", r.Node, g)
				if prev, ok := grants[k]; ok {
					t.Errorf("%s granted twice: %s and %s", k, prev, r.ID)
				}
				grants[k] = r.ID
			}
		}
		return r, err
	}
	if _, err := claim(0, "node03"); err != nil {
		t.Fatalf("claim on node03 before the partition: %v", err)
	}

	lab.cut(2, true)
	agenttest.Eventually(t, 15*time.Second, "each side to see the other as down", func() bool {
		return state(board(0), "node03") != api.NodeAlive && state(board(2), "node01") != api.NodeAlive
	})
	// node03 keeps serving its own GPUs.
	if _, err := claim(2, "node03"); err != nil {
		t.Errorf("node03 cannot claim its own GPU while partitioned: %v", err)
	}
	// The majority side keeps serving its own.
	if _, err := claim(0, "node02"); err != nil {
		t.Errorf("node01 cannot claim on node02 while node03 is cut off: %v", err)
	}
	// Nobody gets the other side's GPUs, and says so quickly.
	t0 := time.Now()
	if r, err := claim(0, "node03"); err == nil {
		t.Errorf("node01 claimed %v on unreachable node03", r)
	} else if time.Since(t0) > 6*time.Second {
		t.Errorf("claim on unreachable node03 took %s to fail", time.Since(t0))
	}
	if r, err := claim(2, "node01"); err == nil {
		t.Errorf("node03 claimed %v on unreachable node01", r)
	}
	// node01's board shows node03's GPUs as unknown, never free.
	for _, n := range board(0).Nodes {
		if n.Name == "node03" {
			for _, g := range n.GPUs {
				if g.Free(n.State) {
					t.Errorf("node01 shows partitioned node03 GPU %d as free", g.Index)
				}
			}
		}
	}

	lab.cut(2, false)
	agenttest.Eventually(t, 45*time.Second, "the views to converge after the network heals", func() bool {
		if !allAlive() {
			return false
		}
		// node01 sees both leases node03 granted, one during the partition.
		held := 0
		for _, n := range board(0).Nodes {
			if n.Name == "node03" {
				for _, g := range n.GPUs {
					if g.Lease != nil {
						held++
					}
				}
			}
		}
		return held == 2
	})
	// Every live lease is on a distinct GPU, on every board.
	for i := range clients {
		seen := map[string]string{}
		for _, n := range board(i).Nodes {
			for _, g := range n.GPUs {
				if g.Lease == nil {
					continue
				}
				k := fmt.Sprintf("%s:%d", n.Name, g.Index)
				if seen[k] != "" {
					t.Errorf("node0%d's board holds %s twice", i+1, k)
				}
				seen[k] = g.Lease.ID
			}
		}
	}
}

// nsNode is one node of a netLab as a machine of its own: its network
// namespace, plus mount, UTS and PID namespaces held by a PID 1 that does
// nothing else. Every process of the node — its agent, its tmux servers,
// every session and what runs in them — is started in them (command), so
// killing PID 1 ends them all at once, as a power-off ends a machine's
// (the kernel kills a PID namespace whole when its init dies). /proc is
// the node's own; /etc/hosts names the lab's nodes.
type nsNode struct {
	t      *testing.T
	name   string
	holder *exec.Cmd
	// pid1 is the node's PID 1 as this machine numbers it.
	pid1 int
}

// bootNsNode starts a node in network namespace netns, with host name
// name and hostsFile as its /etc/hosts (none: this machine's). It is
// powered off at cleanup.
func bootNsNode(t *testing.T, netns, name, hostsFile string) *nsNode {
	t.Helper()
	setup := `hostname "$1" && { [ -z "$2" ] || mount --bind "$2" /etc/hosts; } && echo ready && exec sleep infinity`
	cmd := exec.Command("ip", "netns", "exec", netns, "unshare", "--uts", "--mount", "--pid", "--fork", "--mount-proc",
		"--propagation", "private", "sh", "-c", setup, "node", name, hostsFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &nsNode{t: t, name: name, holder: cmd}
	t.Cleanup(n.powerOff)
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		cmd.Wait()
		prereq.Missing(t, "cannot make a node with its own PID and mount namespaces here (unshare --pid --mount-proc): %s", strings.TrimSpace(stderr.String()))
	}
	// ip netns exec execs unshare, which forked the node's PID 1.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if f := strings.Fields(string(kids)); err != nil || len(f) != 1 {
		t.Fatalf("find PID 1 of node %s (the child of unshare %d): %q %v", name, cmd.Process.Pid, kids, err)
	} else if n.pid1, err = strconv.Atoi(f[0]); err != nil {
		t.Fatal(err)
	}
	return n
}

// command is argv run inside the node (all its namespaces), with env
// added to this process's environment.
func (n *nsNode) command(env []string, argv ...string) *exec.Cmd {
	args := append([]string{"-t", strconv.Itoa(n.pid1), "-n", "-m", "-u", "-p", "--"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// powerOff kills the node's PID 1, and with it every process of the node,
// and waits until it is gone (idempotent).
func (n *nsNode) powerOff() {
	if n.holder == nil {
		return
	}
	syscall.Kill(n.pid1, syscall.SIGKILL)
	n.holder.Wait()
	n.holder = nil
}

// nsAgent is a `dibs agent` running in an nsNode.
type nsAgent struct {
	node *nsNode
	cmd  *exec.Cmd
	// pidFile holds the agent's pid as its node numbers it.
	pidFile string
}

// startAgent runs `dibs agent args…` in the node, with env added to this
// process's environment and its output appended to logFile; pidFile
// receives its pid in the node. It does not wait for it to answer.
func (n *nsNode) startAgent(env []string, pidFile, logFile string, args ...string) *nsAgent {
	n.t.Helper()
	argv := append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, pidFile, dibsBin, "agent"}, args...)
	cmd := n.command(env, argv...)
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	return &nsAgent{node: n, cmd: cmd, pidFile: pidFile}
}

// stop stops the agent as systemctl restart does (SIGTERM; its sessions
// run on) and waits until it is gone; after a power-off it only waits.
// Idempotent.
func (a *nsAgent) stop() {
	if a == nil || a.cmd == nil {
		return
	}
	if a.node.holder != nil {
		a.node.command(nil, "sh", "-c", `kill -TERM "$(cat "$0")"`, a.pidFile).Run()
	}
	a.cmd.Wait()
	a.cmd = nil
}
