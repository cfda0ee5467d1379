package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestServiceMovesAcrossAPartitionAndTheCutOffCopyFencesItself: two
// agents in two network namespaces (separate hosts), a real HTTP server
// served with `dibs serve` on node02. node02's link is cut: past the grace
// the service answers on node01's address (sampled inside node01's
// namespace), and inside node02's namespace its copy has stopped itself
// (node02, not the lowest-named, is the side that fences in a two-node
// split). When the link is back, node02 ends its own copy: one runs.
func TestServiceMovesAcrossAPartitionAndTheCutOffCopyFencesItself(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	agenttest.RequireTmux(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl to ask the service inside each namespace")
	}
	lab := newNetLab(t, 2)
	u := launchtest.User(t)
	const grace = 3 * time.Second
	socks := nsCluster(t, lab, "[queue]\nlost_after = \"3s\"\n")
	// answers: whether GET http://ADDR:8000/ inside namespace ns is 200.
	answers := func(ns, addr string) bool {
		out, _ := exec.Command("ip", "netns", "exec", ns, "curl", "-s", "-o", "/dev/null", "-m", "2", "-w", "%{http_code}", "http://"+addr+":8000/").Output()
		return string(out) == "200"
	}
	if out, errOut, code := dibsAs(t, u, "/usr/bin:/bin", socks[0], "serve", "web", "-g", "1", "--node", "node02", "--port", "8000",
		"--", "/usr/bin/python3", "-m", "http.server", "8000"); code != 0 {
		t.Fatalf("serve: exit %d %q %q", code, out, errOut)
	}
	agenttest.Eventually(t, 30*time.Second, "the service answering on node02", func() bool { return answers(lab.nodes[1], lab.addrs[1]) })

	cut := time.Now()
	lab.cut(1, true)
	agenttest.Eventually(t, grace+30*time.Second, "the service answering on node01 (sampled on node01's side)", func() bool {
		return answers(lab.nodes[0], lab.addrs[0])
	})
	moved := time.Since(cut)
	agenttest.Eventually(t, grace+30*time.Second, "node02's copy stopped itself (sampled on node02's side)", func() bool {
		return !answers(lab.nodes[1], "127.0.0.1")
	})
	fenced := time.Since(cut)
	t.Logf("link cut to answering on node01: %s; to node02's copy stopped: %s (grace %s)", moved.Round(10*time.Millisecond), fenced.Round(10*time.Millisecond), grace)

	lab.cut(1, false)
	alive := func(sock, node string) bool {
		b, err := api.NewClient(sock).Board(context.Background())
		if err != nil {
			return false
		}
		for _, n := range b.Nodes {
			if n.Name == node {
				return n.State == api.NodeAlive
			}
		}
		return false
	}
	agenttest.Eventually(t, 30*time.Second, "the link back: both nodes alive", func() bool {
		return alive(socks[0], "node02") && alive(socks[1], "node01")
	})
	out, _, _ := dibsAs(t, u, "/usr/bin:/bin", socks[0], "services")
	agenttest.Eventually(t, 20*time.Second, "one copy listed, on node01", func() bool {
		out, _, _ = dibsAs(t, u, "/usr/bin:/bin", socks[1], "services")
		return strings.Count(out, "web") == 1 && strings.Contains(out, "node01") && !strings.Contains(out, "node02")
	})
	// An absence check: node02's supervisor would have restarted its
	// copy within a second or two of the link's return.
	poll.Never(t, 3*time.Second, "node02 runs the service again after the link came back (two copies), or node01's copy stopped answering", func() bool {
		return answers(lab.nodes[1], "127.0.0.1") || !answers(lab.nodes[0], lab.addrs[0])
	})
}
