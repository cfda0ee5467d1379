package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/replay"
	"github.com/dibs-gpu/dibs/outgrow/slurm"
	"github.com/dibs-gpu/dibs/runrecord"
)

// TestCLIReplayWeek: the bundled week prints one line per policy, fast;
// --json carries the same results; --write-trace writes a trace that
// --trace reads back to the same figures.
func TestCLIReplayWeek(t *testing.T) {
	start := time.Now()
	out, errOut, code := dibs(t, "/nonexistent.sock", nil, "replay", "--trace", "week")
	if code != 0 {
		t.Fatalf("dibs replay --trace week: exit %d\n%s%s", code, out, errOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("dibs replay --trace week took %s, over 10 s", d)
	}
	for _, want := range []string{"replay of week: ", "4 nodes, 32 GPUs", "POLICY", "\ndibs ", "\nslack ", "\nslurm ", "idle leases reclaimed", "runs cut at their limit"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay table lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "week.jsonl")
	js, _, code := dibs(t, "/nonexistent.sock", nil, "replay", "--trace", "week", "--json", "--write-trace", file, "--policy", "slurm")
	var got replayOutput
	if err := json.Unmarshal([]byte(js), &got); err != nil || code != 0 || len(got.Results) != 1 || got.Results[0].Policy != replay.PolicySLURM {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, js)
	}
	again, _, code := dibs(t, "/nonexistent.sock", nil, "replay", "--trace", file, "--json", "--policy", "slurm")
	var back replayOutput
	if err := json.Unmarshal([]byte(again), &back); err != nil || code != 0 {
		t.Fatalf("replay of the written trace: exit %d, %v\n%s", code, err, again)
	}
	if back.Results[0].BusyGPUHours != got.Results[0].BusyGPUHours || back.Results[0].WaitP95 != got.Results[0].WaitP95 {
		t.Errorf("the written trace replays differently: %+v vs %+v", back.Results[0], got.Results[0])
	}
	if _, e, code := dibs(t, "/nonexistent.sock", nil, "replay", "--trace", "week", "--policy", "pbs"); code == 0 || !strings.Contains(e, "unknown policy \"pbs\": use dibs, slack or slurm") {
		t.Errorf("--policy pbs: exit %d, %q", code, e)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"trace":{"nodes":[{"name":"n1","spec":"2xL40S"}]}}`+"\n"+`{"id":"x","user":"ana","gpus":1,"work":"1h"}`+"\n"), 0o644)
	if _, e, code := dibs(t, "/nonexistent.sock", nil, "replay", "--trace", bad); code == 0 || !strings.Contains(e, "request x has no time") {
		t.Errorf("a trace without a time: exit %d, %q", code, e)
	}
}

// TestCLIReplayOwnLedger replays the cluster's own history: two leases
// that ended become two requests on the cluster's own nodes.
func TestCLIReplayOwnLedger(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		c, err := n.Me().Claim(ctx, api.ClaimRequest{Count: 1, Duration: "1h", Kind: "batch"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Me().Release(ctx, api.ReleaseRequest{IDs: []string{c.ID}}); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := dibs(t, n.Socket, nil, "replay", "--window", "1d", "--json")
	var got replayOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("dibs replay: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if got.Trace.Name != "ledger" || got.Trace.Requests != 2 || got.Trace.GPUs != 2 || len(got.Results) != 3 {
		t.Errorf("replayed %+v with %d results; want the ledger's 2 requests on 2 GPUs under 3 policies", got.Trace, len(got.Results))
	}
	for _, r := range got.Results {
		if r.Started != 2 || r.NeverStarted != 0 {
			t.Errorf("%s started %d of 2", r.Policy, r.Started)
		}
	}
}

// TestCLIExportSbatch exports a queued run (its command known), a
// running claim and a finished one (the command not kept: the script says
// so, and -- CMD fills it in).
func TestCLIExportSbatch(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	ctx := context.Background()
	held, err := n.Me().Claim(ctx, api.ClaimRequest{Count: 2, Duration: "2h", Note: "blocker"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := n.Me().Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "90m", Kind: "batch",
		Run: &api.RunSpec{Command: []string{"python", "train.py", "--name", "it's"}, Dir: "/srv/proj"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, e, code := dibs(t, n.Socket, nil, "export", "sbatch", sub.ID)
	for _, want := range []string{"from a queued run of", "#SBATCH --nodes=1", "#SBATCH --gpus-per-node=1", "#SBATCH --time=1:30:00", "#SBATCH --chdir=/srv/proj",
		`exec python train.py --name 'it'\''s'`} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("export sbatch %s lacks %q (exit %d %s):\n%s", sub.ID, want, code, e, out)
		}
	}
	out, _, _ = dibs(t, n.Socket, nil, "export", "sbatch", held.ID)
	if !strings.Contains(out, "from a running run of") || !strings.Contains(out, "#SBATCH --gpus-per-node=2") || !strings.Contains(out, "#SBATCH --time=2:00:00") {
		t.Errorf("export sbatch of a running claim:\n%s", out)
	}
	if _, err := n.Me().Release(ctx, api.ReleaseRequest{IDs: []string{held.ID}}); err != nil {
		t.Fatal(err)
	}
	out, _, _ = dibs(t, n.Socket, nil, "export", "sbatch", held.ID)
	if !strings.Contains(out, "from a finished run of") || !strings.Contains(out, "was not recorded") || !strings.Contains(out, "exit 1") {
		t.Errorf("export sbatch of a finished claim:\n%s", out)
	}
	out, _, _ = dibs(t, n.Socket, nil, "export", "sbatch", held.ID, "--", "python", "eval.py")
	if !strings.Contains(out, "exec python eval.py") || strings.Contains(out, "exit 1") {
		t.Errorf("export sbatch with the command given:\n%s", out)
	}
	if _, e, code := dibs(t, n.Socket, nil, "export", "sbatch", "node01-q99"); code == 0 || !strings.Contains(e, "no run node01-q99") {
		t.Errorf("export sbatch of an unknown run: exit %d %q", code, e)
	}
}

// TestSbatchJobOfAFinishedGang: a gang known only from the ledger keeps
// its shape: one rank per ledger entry.
func TestSbatchJobOfAFinishedGang(t *testing.T) {
	rec := api.RunRecord{ID: "node01-q3", State: api.RunFinished, Ended: []lease.LedgerEntry{
		{LeaseID: "node01-4", Node: "node01", User: "bo", GPUs: []int{0, 1, 2, 3}, Limit: 6 * time.Hour, Kind: lease.KindBatch, Entry: "node01-q3#0", Gang: "node01-q3-0"},
		{LeaseID: "node02-9", Node: "node02", User: "bo", GPUs: []int{4, 5, 6, 7}, Limit: 6 * time.Hour, Kind: lease.KindBatch, Entry: "node01-q3#0", Gang: "node01-q3-0", Rank: 1},
	}}
	j, err := sbatchJob(rec)
	if err != nil {
		t.Fatal(err)
	}
	if j.Nodes != 2 || j.GPUsPerNode != 4 || j.Time != 6*time.Hour || j.User != "bo" || j.Command != nil {
		t.Errorf("job %+v, want 2 nodes × 4 GPUs for 6h by bo with no command", j)
	}
}

// TestSbatchOfAFinishedRunNotesItsPeakMemory: a finished run's script says
// how much GPU memory dibs measured it using at most, of what its GPU had.
func TestSbatchOfAFinishedRunNotesItsPeakMemory(t *testing.T) {
	f := &runrecord.Figures{GPUs: []runrecord.GPUFigures{{GPU: 0, PeakMemMiB: 9 * 1024, MemTotalMiB: 80 * 1024}, {GPU: 1, PeakMemMiB: 1024, MemTotalMiB: 80 * 1024}}}
	rec := api.RunRecord{ID: "node01-4", State: api.RunFinished, Ended: []lease.LedgerEntry{
		{LeaseID: "node01-4", Node: "node01", User: "bo", GPUs: []int{0, 1}, Limit: time.Hour, Kind: lease.KindBatch, Figures: f},
	}}
	j, err := sbatchJob(rec)
	if err != nil {
		t.Fatal(err)
	}
	script, err := slurm.Sbatch(j)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "# dibs measured a peak GPU memory of 9G of 80G on one GPU") {
		t.Errorf("the script does not note the peak memory:\n%s", script)
	}
}
