package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestClaimEvalPutsGPUsInThisShell: `eval "$(dibs claim -g 1)"` in bash
// leaves CUDA_VISIBLE_DEVICES set in that shell (stdout holds only the
// export, the sentence goes to stderr); a claim that fails prints nothing
// on stdout, so the eval does nothing, and holds nothing.
func TestClaimEvalPutsGPUsInThisShell(t *testing.T) {
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S", "1xL40S"}, Quiet: true})
	sock := nodes[0].Socket
	script := `set -e; eval "$("$0" --socket "$1" claim -g "$2" --for 1h)"; echo "CVD=$CUDA_VISIBLE_DEVICES ORDER=$CUDA_DEVICE_ORDER ID=$DIBS_LEASE_ID"`
	eval := func(gpus string) (string, string, error) {
		cmd := exec.Command("bash", "-c", script, dibsBin, sock, gpus)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	for _, tc := range []struct {
		name, gpus, want string
	}{
		// node02's single free GPU is the tighter fit (where a claim made
		// without a shell in mind goes): the claim stays on the node it was
		// typed on.
		{"one GPU", "1", "CVD=0 ORDER=PCI_BUS_ID ID=node01-1\n"},
		{"the other", "1", "CVD=1 ORDER=PCI_BUS_ID ID=node01-2\n"},
	} {
		out, errOut, err := eval(tc.gpus)
		if err != nil || out != tc.want {
			t.Errorf("%s: eval in bash printed %q (stderr %q, %v), want %q", tc.name, out, errOut, err, tc.want)
		}
		if !strings.Contains(errOut, " on node01 until ") {
			t.Errorf("%s: stderr %q does not say what was claimed", tc.name, errOut)
		}
	}
	// A refused claim: nothing on stdout, the eval sets nothing, nothing held.
	out, errOut, code := dibs(t, sock, nil, "claim", "-g", "9")
	if code == 0 || out != "" || !strings.HasPrefix(errOut, "dibs: ") {
		t.Errorf("claim -g 9: exit %d, stdout %q, stderr %q; want a failure with nothing on stdout", code, out, errOut)
	}
	b, err := nodes[0].Client.Board(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := countLeases(b); n != 2 || b.Nodes[1].GPUs[0].Lease != nil {
		t.Errorf("%d leases after the refused claim, want the 2 from before", n)
	}
}

// TestClaimLandingElsewherePrintsNoExport: node01 is full, so the claim
// lands on node02; stdout (what eval runs) holds nothing, since
// CUDA_VISIBLE_DEVICES=0 here would name node01's GPU 0, which node02's
// lease does not cover; stderr says where the GPUs are and how to use them.
func TestClaimLandingElsewherePrintsNoExport(t *testing.T) {
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "2xL40S"}, Quiet: true})
	if _, err := nodes[0].Client.Claim(context.Background(), api.ClaimRequest{Node: "node01", Count: 1}); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitConverged(t, nodes, 30*time.Second)
	out, errOut, code := dibs(t, nodes[0].Socket, nil, "claim", "-g", "1")
	if code != 0 {
		t.Fatalf("claim: exit %d %q", code, errOut)
	}
	if out != "" {
		t.Errorf("stdout %q; want nothing for this shell when the GPUs are on another node", out)
	}
	for _, want := range []string{"on node02 until", "the GPUs are on node02, not on this node", "`ssh node02`", "CUDA_VISIBLE_DEVICES=0"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}

func countLeases(b api.Board) int {
	seen := map[string]bool{}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if g.Lease != nil {
				seen[g.Lease.ID] = true
			}
		}
	}
	return len(seen)
}

// TestRunLaunchFlagsRefuseNonsense: --per-gpu and --torchrun each start one
// process per GPU, so together they are refused with one line, as is
// either without a command; nothing is claimed.
func TestRunLaunchFlagsRefuseNonsense(t *testing.T) {
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "2xL40S")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-g", "2", "--per-gpu", "--torchrun", "--", "python3", "t.py"}, "dibs: give either --torchrun or --per-gpu: both start one process per GPU\n"},
		{[]string{"run", "-g", "2", "--per-gpu"}, "dibs: --torchrun and --per-gpu start a command once per GPU: give it, as in dibs run -g 2 --per-gpu -- python3 train.py\n"},
	} {
		out, errOut, code := dibs(t, p.socket, nil, tc.args...)
		if code != 1 || out != "" || errOut != tc.want {
			t.Errorf("dibs %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	b, err := api.NewClient(p.socket).Board(context.Background())
	if err != nil || countLeases(b) != 0 {
		t.Errorf("leases after refused runs: %d (%v)", countLeases(b), err)
	}
}
