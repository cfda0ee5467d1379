package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// waitFinished waits until the agent says run id has finished.
func waitFinished(t *testing.T, n *agenttest.Node, id string) {
	t.Helper()
	agenttest.Eventually(t, 20*time.Second, id+" to finish", func() bool {
		rec, err := n.Me().Run(context.Background(), id)
		return err == nil && rec.State == api.RunFinished
	})
}

// `dibs export sbatch` of a finished run writes its command (issue 23: it
// said the command was not recorded): a plain run, a queued one, and a
// gang whose first rank ran on another node. The command is its holder's
// (and admins') to see: anyone else gets the script without it.
func TestCLIExportSbatchOfFinishedRuns(t *testing.T) {
	agenttest.RequireTmux(t)
	ctx := context.Background()
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})

	run, err := n.Me().Claim(ctx, api.ClaimRequest{Count: 1, Duration: "1h", Run: &api.RunSpec{Command: []string{"sh", "-c", "true # it's done"}, Dir: "/tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := n.Me().Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "30m", Kind: "batch",
		Run: &api.RunSpec{Command: []string{"sh", "-c", "exit 0"}, Name: "short"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFinished(t, n, run.ID)
	waitFinished(t, n, sub.ID)

	tests := []struct {
		id   string
		want []string
	}{
		{run.ID, []string{"from a finished run of", "#SBATCH --chdir=/tmp", `exec sh -c 'true # it'\''s done'`}},
		{sub.ID, []string{"from a finished run of", "#SBATCH --job-name=short", "#SBATCH --time=0:30:00", "exec sh -c 'exit 0'"}},
	}
	for _, tc := range tests {
		out, errOut, code := dibs(t, n.Socket, nil, "export", "sbatch", tc.id)
		if code != 0 || strings.Contains(out, "not recorded") || strings.Contains(out, "exit 1") {
			t.Errorf("export sbatch %s: exit %d %s, the command missing:\n%s", tc.id, code, errOut, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("export sbatch %s lacks %q:\n%s", tc.id, want, out)
			}
		}
	}

	// Another person learns the run's shape, not its command; an admin
	// gets it.
	other := n.As(lease.Caller{User: "mallory", UID: 4242})
	admin := n.As(lease.Caller{User: "ops", UID: 4343, Admin: true})
	for _, id := range []string{run.ID, sub.ID} {
		rec, err := other.Run(ctx, id)
		if err != nil || rec.Job != nil {
			t.Errorf("mallory's look at %s: job %+v, err %v; want no command", id, rec.Job, err)
		}
		if rec, err := admin.Run(ctx, id); err != nil || rec.Job == nil || len(rec.Job.Command) == 0 {
			t.Errorf("an admin's look at %s: job %+v, err %v; want its command", id, rec.Job, err)
		}
	}

	// The node keeps them across a restart of its agent.
	n.Restart()
	out, errOut, code := dibs(t, n.Socket, nil, "export", "sbatch", run.ID)
	if code != 0 || !strings.Contains(out, `exec sh -c 'true # it'\''s done'`) {
		t.Errorf("export sbatch %s after a restart: exit %d %s, the command missing:\n%s", run.ID, code, errOut, out)
	}
}

// A finished gang's script carries its command, kept by the node its first
// rank ran on, whichever node is asked.
func TestCLIExportSbatchOfFinishedGang(t *testing.T) {
	agenttest.RequireTmux(t)
	ctx := context.Background()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	sub, err := nodes[0].Me().Submit(ctx, api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Claim: api.ClaimRequest{Duration: "1h", Kind: "batch",
		Run: &api.RunSpec{Command: []string{"sh", "-c", "echo rank $NODE_RANK"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFinished(t, nodes[0], sub.ID)
	for _, n := range nodes {
		out, errOut, code := dibs(t, n.Socket, nil, "export", "sbatch", sub.ID)
		for _, want := range []string{"from a finished run of", "#SBATCH --nodes=2", "#SBATCH --gpus-per-node=1", "rank sh -c 'echo rank $NODE_RANK'"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("export sbatch %s from %s lacks %q (exit %d %s):\n%s", sub.ID, n.Opts.Name, want, code, errOut, out)
			}
		}
	}
}
