package queue_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/outgrow/slurm"
	"github.com/dibs-gpu/dibs/queue"
)

// torchParser reads argv (JSON) with the installed torch's own torchrun
// parser and prints what it understood.
const torchParser = `
import json, sys
from torch.distributed.run import get_args_parser
out = []
for argv in json.loads(sys.argv[1]):
    a = get_args_parser().parse_args(argv)
    out.append({"nnodes": a.nnodes, "nproc_per_node": str(a.nproc_per_node), "rdzv_backend": a.rdzv_backend,
        "rdzv_endpoint": a.rdzv_endpoint, "rdzv_id": a.rdzv_id, "rdzv_conf": a.rdzv_conf, "redirects": a.redirects, "tee": a.tee,
        "no_python": a.no_python, "script": a.training_script, "args": a.training_script_args})
print(json.dumps(out))
`

// parsedTorchrun is what torch's parser made of one argv.
type parsedTorchrun struct {
	NNodes    string   `json:"nnodes"`
	NProc     string   `json:"nproc_per_node"`
	Backend   string   `json:"rdzv_backend"`
	Endpoint  string   `json:"rdzv_endpoint"`
	ID        string   `json:"rdzv_id"`
	Conf      string   `json:"rdzv_conf"`
	Redirects string   `json:"redirects"`
	Tee       string   `json:"tee"`
	NoPython  bool     `json:"no_python"`
	Script    string   `json:"script"`
	Args      []string `json:"args"`
}

// TestTorchrunArgvWithInstalledTorch hands the argv dibs builds to the
// installed torch's torchrun parser (torch 1.13 on Debian 12 knows only the
// underscore spellings; dibs once wrote --nproc-per-node, which it refuses),
// in the environment dibs gives the rank (the endpoint as
// PET_RDZV_ENDPOINT, off the command line), and checks it reads the
// rendezvous and the program as meant.
func TestTorchrunArgvWithInstalledTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").Run(); err != nil {
		prereq.Missing(t, "no torch for /usr/bin/python3 (apt-get install python3-torch): %v", err)
	}
	e := queue.QueueEntry{ID: "n1-q3", Attempt: 1, Nodes: 2, GPUsPerNode: 4}
	env := queue.RankEnv(queue.RendezvousEnv(e, []string{"10.0.0.1", "10.0.0.2"}, 29500), 1)
	tests := []struct {
		cmd      []string
		noPython bool
		script   string
		args     []string
	}{
		{[]string{"train.py", "--lr", "3e-4"}, false, "train.py", []string{"--lr", "3e-4"}},
		{[]string{"python3", "ddp.py", "--steps", "5"}, true, "python3", []string{"ddp.py", "--steps", "5"}},
		{[]string{"/usr/bin/python3", "-m", "pkg.train"}, true, "/usr/bin/python3", []string{"-m", "pkg.train"}},
		{[]string{"python ddp.py | tee log"}, true, "/bin/sh", []string{"-c", "python ddp.py | tee log"}},
	}
	var argvs [][]string
	for _, tc := range tests {
		argvs = append(argvs, queue.TorchrunCommand(e, env, tc.cmd)[1:])
	}
	in, _ := json.Marshal(argvs)
	parse := exec.Command("/usr/bin/python3", "-c", torchParser, string(in))
	for k, v := range queue.TorchrunEnv(env) {
		parse.Env = append(parse.Env, k+"="+v)
	}
	out, err := parse.Output()
	if err != nil {
		t.Fatalf("torch's parser refused one of %q: %v", argvs, err)
	}
	var got []parsedTorchrun
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(tests) {
		t.Fatalf("parser output %q: %v", out, err)
	}
	for i, tc := range tests {
		g := got[i]
		if g.NNodes != "2" || g.NProc != "4" || g.Backend != "c10d" || g.Endpoint != "10.0.0.1:29500" || g.ID != "n1-q3-1" || g.Conf != "is_host=0" || g.Redirects != "1" || g.Tee != "1" {
			t.Errorf("%q: torch read %+v", argvs[i], g)
		}
		if g.NoPython != tc.noPython || g.Script != tc.script || !slices.Equal(g.Args, tc.args) {
			t.Errorf("%q: torch runs no_python=%v %q %q, want no_python=%v %q %q", argvs[i], g.NoPython, g.Script, g.Args, tc.noPython, tc.script, tc.args)
		}
	}
}

// TestSbatchTorchrunLineWithInstalledTorch: the torchrun line `dibs export
// sbatch` writes, its words expanded by bash as the script would under
// SLURM, reads right with the installed torch's parser.
func TestSbatchTorchrunLineWithInstalledTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").Run(); err != nil {
		prereq.Missing(t, "no torch for /usr/bin/python3 (apt-get install python3-torch): %v", err)
	}
	jobs := []slurm.Job{
		{ID: "node02-q3", Nodes: 2, GPUsPerNode: 4, Torchrun: true, Command: []string{"python3", "ddp.py", "--steps", "5"}},
		{ID: "node01-q8", Nodes: 1, GPUsPerNode: 2, Torchrun: true, Command: []string{"python3", "ddp.py", "--steps", "5"}},
	}
	var argvs [][]string
	for _, j := range jobs {
		script, err := slurm.Sbatch(j)
		if err != nil {
			t.Fatal(err)
		}
		line := ""
		for _, l := range strings.Split(script, "\n") {
			if _, rest, ok := strings.Cut(l, "torchrun "); ok && !strings.HasPrefix(l, "#") {
				line = rest
			}
		}
		if line == "" {
			t.Fatalf("%s: no torchrun line in\n%s", j.ID, script)
		}
		// bash expands the words as the batch script would under SLURM.
		expand := `MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 SLURM_NNODES=2 SLURM_JOB_ID=77; eval "set -- ` + line + `"; printf '%s\0' "$@"`
		words, err := exec.Command("bash", "-c", expand).Output()
		if err != nil {
			t.Fatalf("%s: expand %q: %v", j.ID, line, err)
		}
		argvs = append(argvs, strings.Split(strings.TrimSuffix(string(words), "\x00"), "\x00"))
	}
	in, _ := json.Marshal(argvs)
	out, err := exec.Command("/usr/bin/python3", "-c", torchParser, string(in)).Output()
	if err != nil {
		t.Fatalf("torch's parser refused one of %q: %v", argvs, err)
	}
	var got []parsedTorchrun
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(jobs) {
		t.Fatalf("parser output %q: %v", out, err)
	}
	for i, j := range jobs {
		g := got[i]
		if g.NProc != strconv.Itoa(j.GPUsPerNode) || g.Redirects != "1" || g.Tee != "1" || !g.NoPython || g.Script != "python3" || !slices.Equal(g.Args, []string{"ddp.py", "--steps", "5"}) {
			t.Errorf("%s: torch read %+v", j.ID, g)
		}
		if j.Nodes > 1 && (g.NNodes != "2" || g.Backend != "c10d" || g.Endpoint != "10.0.0.1:29500" || g.ID != "77") {
			t.Errorf("%s: torch read the rendezvous as %+v", j.ID, g)
		}
	}
}
