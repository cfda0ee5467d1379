package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/outgrow/slurm"
	"github.com/dibs-gpu/dibs/queue"
)

// TestSbatchUnitFromTheBoard: what made a run fit is found where dibs
// keeps it: a queued MIG request's profile on the GPUs the board shows
// (its model gives the GRES type), a running MIG lease's instance by its
// UUID, a budget, and the pools asked for or of the node a lease ran on.
func TestSbatchUnitFromTheBoard(t *testing.T) {
	h100 := api.GPU{GPU: nodeprobe.GPU{Index: 0, Model: "NVIDIA H100 80GB HBM3", MIG: nodeprobe.MIGEnabled,
		MIGDevices: []nodeprobe.MIGDevice{{Index: 0, UUID: "MIG-aaa", Profile: "3g.40gb"}, {Index: 1, UUID: "MIG-bbb", Profile: "2g.20gb"}}}}
	l40s := api.GPU{GPU: nodeprobe.GPU{Index: 0, Model: "NVIDIA L40S"}}
	b := api.Board{Nodes: []api.Node{
		{Name: "na", GPUs: []api.GPU{h100}},
		{Name: "nb", Host: nodeprobe.Host{Tags: []string{"l40s"}}, GPUs: []api.GPU{l40s}},
	}}
	script := func(rec api.RunRecord) string {
		t.Helper()
		j, err := sbatchJob(rec)
		if err != nil {
			t.Fatal(err)
		}
		sbatchUnit(&j, rec, b)
		j.Command = []string{"true"}
		s, err := slurm.Sbatch(j)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		rec  api.RunRecord
		want []string
	}{
		{"a queued MIG request by profile", api.RunRecord{ID: "na-q1", State: "queued", Entry: &queue.QueueEntry{User: "ana", Nodes: 1, GPUsPerNode: 1, MIG: "3g.40gb"}},
			[]string{"#SBATCH --gpus-per-node=h100_3g.40gb:1\n"}},
		{"a queued MIG request by GPU:INDEX", api.RunRecord{ID: "na-q2", State: "queued", Entry: &queue.QueueEntry{User: "ana", Nodes: 1, GPUsPerNode: 1, MIG: "0:1"}},
			[]string{"#SBATCH --gpus-per-node=h100_2g.20gb:1\n"}},
		{"a running MIG lease", api.RunRecord{ID: "na-7", State: "running", Lease: []lease.Lease{{ID: "na-7", Node: "na", GPUs: []int{0}, User: "ana", MIG: "MIG-bbb"}}},
			[]string{"#SBATCH --gpus-per-node=h100_2g.20gb:1\n"}},
		{"a queued pool request", api.RunRecord{ID: "nb-q3", State: "queued", Entry: &queue.QueueEntry{User: "bo", Nodes: 1, GPUsPerNode: 1, Tags: []string{"l40s"}}},
			[]string{"#SBATCH --partition=l40s\n"}},
		{"a budget on a pool's node", api.RunRecord{ID: "nb-4", State: "running", Lease: []lease.Lease{{ID: "nb-4", Node: "nb", GPUs: []int{0}, User: "bo", MemMiB: 10240}}},
			[]string{"#SBATCH --partition=l40s\n", "a 10G memory budget on a shared GPU", "#SBATCH --gpus-per-node=1\n"}},
	} {
		got := script(tc.rec)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the script lacks %q:\n%s", tc.name, w, got)
			}
		}
		if slices.ContainsFunc(tc.want, func(w string) bool { return strings.Contains(w, "_") }) && strings.Contains(got, "--gpus-per-node=1\n") {
			t.Errorf("%s: a MIG run asks for a whole GPU:\n%s", tc.name, got)
		}
	}
}
