package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
)

// TestRunPrintsNoExport: `dibs run` (and a queued run that starts at once)
// prints what it started and where, but no `export CUDA_VISIBLE_DEVICES=…`
// line: the run's session has it, and on another node's GPUs the line
// would name this node's (issue 30: `dibs run --node nc` on na printed
// nc's GPU for na's shell). `claim --json` says "here" whether true or
// false.
func TestRunPrintsNoExport(t *testing.T) {
	agenttest.RequireTmux(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "4xL40S")
	for _, args := range [][]string{
		{"run", "-g", "1", "--", "sleep", "30"},
		{"run", "--queue", "-g", "1", "--", "sleep", "30"},
	} {
		out, errOut, code := dibs(t, p.socket, nil, args...)
		if code != 0 || !strings.Contains(out, "` to see it") {
			t.Fatalf("dibs %s: exit %d %q %q", strings.Join(args, " "), code, out, errOut)
		}
		if strings.Contains(out+errOut, "export ") {
			t.Errorf("dibs %s printed an export line:\n%s%s", strings.Join(args, " "), out, errOut)
		}
	}
	out, errOut, code := dibs(t, p.socket, nil, "claim", "-g", "1", "--json")
	var r map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("claim --json: exit %d %q %q", code, out, errOut)
	}
	if r["here"] != true {
		t.Errorf("claim --json here = %v (%s); want true", r["here"], out)
	}
}
