package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestQueuedNodelistBesideFirstRelease: beside a real v0.1.0 agent (built
// from its commit), whose scheduler would ignore a queued request's
// --nodelist and --exclude, such a request is refused at submit, naming the
// old node; a direct claim with them is placed where it is typed, so it is
// granted; a single-node nodelist of one queues as --node, which v0.1.0
// honours.
func TestQueuedNodelistBesideFirstRelease(t *testing.T) {
	agenttest.RequireTmux(t)
	old := buildRelease(t, firstRelease)
	c := startMixedCluster(t, []string{old, dibsBin}, "")
	at := c.nodes[1] // this release, beside node01 on v0.1.0

	_, errOut, code := dibsWith(t, dibsBin, at.socket, "run", "--queue", "-g", "1", "--for", "10m", "-x", "node01", "--", "sleep", "300")
	if code == 0 || !strings.Contains(errOut, "node01 runs an older dibs") || !strings.Contains(errOut, "--nodelist or --exclude") {
		t.Errorf("run --queue -x node01 beside v0.1.0's node01: exit %d, %q; want a refusal naming node01", code, errOut)
	}
	out, errOut, code := dibsWith(t, dibsBin, at.socket, "claim", "-g", "1", "--for", "10m", "-x", "node02", "--json")
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Node != "node01" {
		t.Errorf("claim -x node02 at node02: exit %d, %q %q; want granted on node01", code, out, errOut)
	}
	out, errOut, code = dibsWith(t, dibsBin, at.socket, "run", "--queue", "-g", "1", "--for", "10m", "-w", "node01", "--json", "--", "sleep", "300")
	var sub api.Submitted
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.ID == "" {
		t.Fatalf("run --queue -w node01 (a pin) beside v0.1.0: exit %d, %q %q; want it queued", code, out, errOut)
	}
	agenttest.Eventually(t, 30*time.Second, "the pinned run to start on node01", func() bool {
		out, _, code := dibsWith(t, dibsBin, at.socket, "ls", "--json")
		var b api.Board
		if code != 0 || json.Unmarshal([]byte(out), &b) != nil {
			return false
		}
		for _, bn := range b.Nodes {
			for _, g := range bn.GPUs {
				if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, sub.ID+"#") {
					return bn.Name == "node01"
				}
			}
		}
		return false
	})
}
