package slurm

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func gpus(model string, idx ...int) []nodeprobe.GPU {
	out := make([]nodeprobe.GPU, len(idx))
	for i, x := range idx {
		out[i] = nodeprobe.GPU{Index: x, Model: model}
	}
	return out
}

// team is the cluster of docs/slurm.md: two H100 nodes, one L40S node with
// a GPU missing in the middle, one node down; shares and a quota configured.
func team() Cluster {
	p := lease.DefaultPolicy()
	p.MaxBatch = 3 * 24 * time.Hour
	return Cluster{
		Name:    "ML-Lab",
		Version: "v1.2.0",
		Nodes: []Node{
			{Name: "gpu02", Addr: "10.0.0.12", Host: nodeprobe.Host{CPUs: 128, MemoryMiB: 1031000}, GPUs: gpus("NVIDIA H100 80GB HBM3", 0, 1, 2, 3, 4, 5, 6, 7)},
			{Name: "gpu01", Addr: "10.0.0.11", Host: nodeprobe.Host{CPUs: 128, MemoryMiB: 1031000}, GPUs: gpus("NVIDIA H100 80GB HBM3", 7, 6, 5, 4, 3, 2, 1, 0)},
			{Name: "ws03", Host: nodeprobe.Host{CPUs: 32, MemoryMiB: 257000}, GPUs: append(gpus("NVIDIA L40S", 0, 1, 3), gpus("NVIDIA GeForce RTX 4090", 4)...)},
			{Name: "old04", Down: true, Host: nodeprobe.Host{CPUs: 16, MemoryMiB: 64000}, GPUs: gpus("Tesla V100-SXM2-32GB", 0, 1)},
		},
		Policy: p,
		Sched:  queue.SchedConfig{HalfLife: 14 * 24 * time.Hour, Shares: map[string]float64{"ana": 2, "bo": 1}, Quotas: map[string]int{"bo": 4}},
	}
}

func TestExportGolden(t *testing.T) {
	tests := []struct {
		name string
		c    Cluster
		o    Options
	}{
		{"team", team(), Options{}},
		{"one-node", Cluster{Name: "dibs", Nodes: []Node{{Name: "box", Host: nodeprobe.Host{CPUs: 2, MemoryMiB: 24105}, GPUs: gpus("NVIDIA H100 80GB HBM3", 0, 1)}}}, Options{DevDir: "/tmp/fake/dev"}},
		{"pools-mig", poolsAndMIG(), Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Export(tc.c, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+"-slurm.conf", f.SlurmConf)
			golden(t, tc.name+"-gres.conf", f.GresConf)
			golden(t, tc.name+"-cgroup.conf", f.CgroupConf)
		})
	}
}

// poolsAndMIG is the cluster of issue 23: 4×H100 tagged h100; 2×L40S in
// pool l40s (max_gpus 1, max_time 2h); an A100 split into three MIG
// instances beside a whole A100, in pool a100 open to two users.
func poolsAndMIG() Cluster {
	a100 := gpus("NVIDIA A100-SXM4-80GB", 0, 1)
	a100[0].MIG = nodeprobe.MIGEnabled
	a100[0].MIGDevices = []nodeprobe.MIGDevice{{Index: 0, Profile: "3g.40gb"}, {Index: 1, Profile: "2g.20gb"}, {Index: 2, Profile: "1g.10gb"}}
	p := lease.DefaultPolicy()
	p.Pools = lease.Pools{"l40s": {MaxGPUs: 1, MaxTime: 2 * time.Hour}, "a100": {Users: []string{"alice", "bob"}}}
	return Cluster{Name: "lab", Policy: p, Nodes: []Node{
		{Name: "node01", Host: nodeprobe.Host{CPUs: 64, MemoryMiB: 512000, Tags: []string{"h100"}}, GPUs: gpus("NVIDIA H100 80GB HBM3", 0, 1, 2, 3)},
		{Name: "node02", Host: nodeprobe.Host{CPUs: 32, MemoryMiB: 256000, Tags: []string{"l40s"}}, GPUs: gpus("NVIDIA L40S", 0, 1)},
		{Name: "node03", Host: nodeprobe.Host{CPUs: 32, MemoryMiB: 256000, Tags: []string{"a100"}}, GPUs: a100},
	}}
}

// The export carries pools to partitions and the MIG layout to typed GRES,
// and lists plainly what a partition cannot hold (it dropped both without
// a word).
func TestExportCarriesPoolsAndMIG(t *testing.T) {
	f, err := Export(poolsAndMIG(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"PartitionName=l40s Nodes=node02 MaxTime=2:00:00 DefaultTime=2:00:00 State=UP\n",
		"PartitionName=h100 Nodes=node01 MaxTime=7-00:00:00 DefaultTime=1-00:00:00 State=UP\n",
		"PartitionName=a100 Nodes=node03 ",
		"NodeName=node03 CPUs=32 RealMemory=250880 Gres=gpu:a100_3g.40gb:1,gpu:a100_2g.20gb:1,gpu:a100_1g.10gb:1,gpu:a100:1 State=UNKNOWN\n",
		"pool a100: open to alice, bob only: a partition admits by group or account",
		"pool l40s: max_gpus 1 per person: with slurmdbd, sacctmgr add qos l40s MaxTRESPerUser=gres/gpu=1",
		"shared GPUs with memory budgets",
	} {
		if !strings.Contains(f.SlurmConf, want) {
			t.Errorf("slurm.conf lacks %q", want)
		}
	}
	for _, want := range []string{"NodeName=node03 AutoDetect=nvml\n", "NodeName=node02 Name=gpu Type=l40s File=/dev/nvidia[0-1]\n"} {
		if !strings.Contains(f.GresConf, want) {
			t.Errorf("gres.conf lacks %q", want)
		}
	}
}

// TestExportCarriesTheNumbers reads the exported lines a person would check
// first, so a wrong value is named, not buried in a golden diff.
func TestExportCarriesTheNumbers(t *testing.T) {
	f, err := Export(team(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ClusterName=ml_lab\n",
		"SlurmctldHost=gpu01(10.0.0.11)\n",
		"NodeName=gpu01 NodeAddr=10.0.0.11 CPUs=128 RealMemory=1010380 Gres=gpu:h100:8 State=UNKNOWN\n",
		"NodeName=ws03 CPUs=32 RealMemory=251860 Gres=gpu:l40s:3,gpu:rtx4090:1 State=UNKNOWN\n",
		"PartitionName=gpu Nodes=ALL Default=YES MaxTime=7-00:00:00 DefaultTime=1-00:00:00 State=UP\n",
		"PriorityType=priority/multifactor\n",
		"PriorityDecayHalfLife=14-00:00:00\n",
		"KillWait=30\n",
		"sacctmgr add user ana account=team fairshare=200\n",
		"sacctmgr add user bo account=team fairshare=100 grptres=gres/gpu=4\n",
		"old04 was down",
	} {
		if !strings.Contains(f.SlurmConf, want) {
			t.Errorf("slurm.conf lacks %q", want)
		}
	}
	for _, want := range []string{
		"NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n",
		"NodeName=ws03 Name=gpu Type=l40s File=/dev/nvidia[0-1]\n",
		"NodeName=ws03 Name=gpu Type=l40s File=/dev/nvidia3\n",
		"NodeName=ws03 Name=gpu Type=rtx4090 File=/dev/nvidia4\n",
	} {
		if !strings.Contains(f.GresConf, want) {
			t.Errorf("gres.conf lacks %q", want)
		}
	}
	if !strings.Contains(f.CgroupConf, "ConstrainDevices=yes") {
		t.Errorf("cgroup.conf does not constrain devices:\n%s", f.CgroupConf)
	}
}

func TestExportRefusesNothing(t *testing.T) {
	if _, err := Export(Cluster{}, Options{}); err == nil || !strings.Contains(err.Error(), "no node") {
		t.Errorf("Export of no nodes = %v, want a refusal naming it", err)
	}
}

func TestType(t *testing.T) {
	for model, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":                             "h100",
		"NVIDIA A100-SXM4-40GB":                             "a100",
		"NVIDIA GeForce RTX 4090":                           "rtx4090",
		"NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "rtxpro6000",
		"Tesla V100-SXM2-32GB":                              "v100",
		"NVIDIA L40S":                                       "l40s",
		"":                                                  "gpu",
		"NVIDIA":                                            "gpu",
	} {
		if got := Type(model); got != want {
			t.Errorf("Type(%q) = %q, want %q", model, got, want)
		}
	}
}

func TestTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		4 * time.Hour:                   "4:00:00",
		24 * time.Hour:                  "1-00:00:00",
		7*24*time.Hour + 90*time.Minute: "7-01:30:00",
		30 * time.Second:                "0:01:00",
		0:                               "0",
	} {
		if got := Time(d); got != want {
			t.Errorf("Time(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestSbatchGolden(t *testing.T) {
	tests := []struct {
		name string
		j    Job
	}{
		{"single", Job{ID: "node01-q7", State: "queued", User: "ana", Nodes: 1, GPUsPerNode: 2, Time: 4 * time.Hour,
			Command: []string{"python", "train.py", "--lr", "3e-4", "--name", "it's a test"}, Dir: "/home/ana/proj", Note: "sweep #3"}},
		{"gang-torchrun", Job{ID: "node02-q3", State: "running", User: "bo", Name: "llm", Nodes: 4, GPUsPerNode: 8, Model: "H100",
			Time: 48 * time.Hour, Command: []string{"train.py", "--config", "big.yaml"}, Torchrun: true}},
		{"gang-plain", Job{ID: "node02-q4", State: "queued", User: "bo", Nodes: 2, GPUsPerNode: 4, Time: time.Hour,
			Command: []string{"sh", "-c", "echo $NODE_RANK of $NNODES"}}},
		{"gang-per-gpu", Job{ID: "node02-q5", State: "queued", User: "bo", Nodes: 2, GPUsPerNode: 4, Time: time.Hour, CPUsPerGPU: 8,
			Command: []string{"/usr/bin/python3", "ddp.py"}, PerGPU: true}},
		{"single-torchrun", Job{ID: "node01-q8", State: "queued", User: "ana", Nodes: 1, GPUsPerNode: 2, Time: time.Hour,
			Command: []string{"python3", "ddp.py", "--steps", "5"}, Torchrun: true}},
		{"finished-unknown-command", Job{ID: "node01-42", State: "finished", User: "cy", Nodes: 1, GPUsPerNode: 1, Time: 2 * time.Hour, AnyCPU: true}},
		{"array-after", Job{ID: "node01-q9", State: "queued", User: "ana", Nodes: 1, GPUsPerNode: 1, Time: time.Hour, Array: "0-19%4",
			After: []string{"afterok:node01-q7", "afterany:node02-q3"}, Command: []string{"sh", "-c", "python train.py --seed $DIBS_ARRAY_INDEX"}}},
		// What made a run fit goes with it: a MIG instance as the typed
		// GRES slurm.conf counts, its pool as a partition, a budget as a
		// whole GPU with the words that say what was lost.
		{"mig", Job{ID: "na-q2", State: "queued", User: "ana", Nodes: 1, GPUsPerNode: 1, Time: time.Hour,
			MIG: "3g.40gb", MIGModel: "NVIDIA H100 80GB HBM3", Command: []string{"python", "infer.py"}}},
		{"mig-unknown-model", Job{ID: "na-q3", State: "queued", User: "ana", Nodes: 1, GPUsPerNode: 1, Time: time.Hour,
			MIG: "3g.40gb", Command: []string{"python", "infer.py"}}},
		{"pool", Job{ID: "nb-q4", State: "queued", User: "bo", Nodes: 1, GPUsPerNode: 2, Time: time.Hour,
			Pools: []string{"l40s"}, Command: []string{"python", "train.py"}}},
		{"pools-many", Job{ID: "nb-q5", State: "queued", User: "bo", Nodes: 1, GPUsPerNode: 1, Time: time.Hour,
			Pools: []string{"l40s", "fast", "bad name"}, Command: []string{"python", "train.py"}}},
		{"nodes", Job{ID: "na-q6", State: "queued", User: "bo", Nodes: 2, GPUsPerNode: 1, Time: time.Hour,
			Nodelist: []string{"na", "nb", "nc"}, Exclude: []string{"nd"}, Command: []string{"python", "train.py"}}},
		{"node", Job{ID: "na-q7", State: "queued", User: "bo", Nodes: 1, GPUsPerNode: 1, Time: time.Hour,
			Nodelist: []string{"nc"}, Command: []string{"python", "train.py"}}},
		{"budget", Job{ID: "nc-7", State: "running", User: "cy", Nodes: 1, GPUsPerNode: 1, Time: 2 * time.Hour,
			MemMiB: 10 * 1024, Pools: []string{"a100"}, Command: []string{"jupyter", "lab"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Sbatch(tc.j)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "sbatch-"+tc.name, s)
		})
	}
}

// TestMIGTypeIsTheGresName holds the one name of a MIG instance's GRES
// type: what slurm.conf's Gres= counts is what an sbatch script asks for.
func TestMIGTypeIsTheGresName(t *testing.T) {
	g := gpus("NVIDIA H100 80GB HBM3", 0)
	g[0].MIG = nodeprobe.MIGEnabled
	g[0].MIGDevices = []nodeprobe.MIGDevice{{Index: 0, Profile: "3g.40gb"}}
	if got, want := gresOf(g), "gpu:"+MIGType("NVIDIA H100 80GB HBM3", "3g.40gb")+":1"; got != want {
		t.Fatalf("gresOf = %q, want %q", got, want)
	}
	s, err := Sbatch(Job{ID: "na-q2", Nodes: 1, GPUsPerNode: 1, MIG: "3G.40GB", MIGModel: "NVIDIA H100 80GB HBM3", Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "#SBATCH --gpus-per-node=h100_3g.40gb:1\n"; !strings.Contains(s, want) {
		t.Fatalf("the script lacks %q:\n%s", want, s)
	}
}

func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"train.py":   "train.py",
		"--lr=3e-4":  "--lr=3e-4",
		"it's":       `'it'\''s'`,
		"$HOME":      `'$HOME'`,
		"":           "''",
		"a b":        "'a b'",
		"x\ny":       "'x\ny'",
		"`rm -rf /`": "'`rm -rf /`'",
	} {
		if got := job.ShellWord(in); got != want {
			t.Errorf("job.ShellWord(%q) = %s, want %s", in, got, want)
		}
	}
}
