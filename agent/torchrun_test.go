package agent

import (
	"slices"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

func TestTorchrunCommandUsesTheGangsRendezvous(t *testing.T) {
	e := lease.QueueEntry{Nodes: 2, GPUsPerNode: 4}
	env := map[string]string{"MASTER_ADDR": "10.0.0.11", "MASTER_PORT": "29517", "DIBS_GANG_ID": "node01-q3-0"}
	got := torchrunCommand(e, env, []string{"train.py", "--lr", "3e-4"})
	want := []string{"torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-backend=c10d",
		"--rdzv-endpoint=10.0.0.11:29517", "--rdzv-id=node01-q3-0", "train.py", "--lr", "3e-4"}
	if !slices.Equal(got, want) {
		t.Errorf("torchrun command\n got %q\nwant %q", got, want)
	}
}
