package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func readEnvFile(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

const envDump = `env | grep -E '^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|LOCAL_WORLD_SIZE|RANK|LOCAL_RANK|NNODES|NODE_RANK|NPROC_PER_NODE|CUDA_VISIBLE_DEVICES|DIBS_GANG_ID|DIBS_HOSTS|DIBS_NODE|GLOO_SOCKET_IFNAME)=' > `

func TestGangStartsEveryRankTogetherWithRendezvousEnv(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S", "4xL40S", "4xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	// node01 is busy, so the gang lands on node02 and node03.
	if _, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 3}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 2*time.Second, "node03 to see node01's lease", func() bool {
		b, _ := nodes[2].Client.Board(ctx(t))
		return leaseOn(b, "node01", 0) != nil
	})
	s, err := nodes[2].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{
		Command: []string{"sh", "-c", envDump + dir + "/rank$NODE_RANK; date +%s.%N > " + dir + "/t$NODE_RANK; sleep 60"}}}})
	if err != nil {
		t.Fatalf("submit gang: %v", err)
	}
	var r0, r1 map[string]string
	agenttest.Eventually(t, 10*time.Second, "both ranks to start", func() bool {
		r0, r1 = readEnvFile(dir+"/rank0"), readEnvFile(dir+"/rank1")
		return len(r0) >= 9 && len(r1) >= 9 && !readTime(dir+"/t0").IsZero() && !readTime(dir+"/t1").IsZero()
	})
	// One process per node (no --per-gpu): env:// sees a world of 2 nodes,
	// each its node's rank; NPROC_PER_NODE is there for a launcher.
	for k, want := range map[string]string{"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0", "NNODES": "2", "NPROC_PER_NODE": "2"} {
		if r0[k] != want || r1[k] != want {
			t.Errorf("%s = %q / %q, want %s", k, r0[k], r1[k], want)
		}
	}
	if r0["NODE_RANK"] != "0" || r1["NODE_RANK"] != "1" || r0["RANK"] != "0" || r1["RANK"] != "1" {
		t.Errorf("NODE_RANK = %q / %q, RANK = %q / %q", r0["NODE_RANK"], r1["NODE_RANK"], r0["RANK"], r1["RANK"])
	}
	// gloo is told the interface of the address the gang knows the node
	// by (here loopback), not left to what the host name resolves to.
	if r0["GLOO_SOCKET_IFNAME"] != "lo" || r1["GLOO_SOCKET_IFNAME"] != "lo" {
		t.Errorf("GLOO_SOCKET_IFNAME = %q / %q, want lo", r0["GLOO_SOCKET_IFNAME"], r1["GLOO_SOCKET_IFNAME"])
	}
	if r0["MASTER_ADDR"] != "127.0.0.1" || r0["MASTER_PORT"] == "" || r0["MASTER_PORT"] != r1["MASTER_PORT"] || r0["DIBS_GANG_ID"] != r1["DIBS_GANG_ID"] {
		t.Errorf("rendezvous differs between ranks: %v / %v", r0, r1)
	}
	if r0["DIBS_NODE"] == r1["DIBS_NODE"] || r0["DIBS_NODE"] == "node01" || r1["DIBS_NODE"] == "node01" {
		t.Errorf("ranks on %s and %s; want two different nodes other than the busy node01", r0["DIBS_NODE"], r1["DIBS_NODE"])
	}
	if got := strings.Count(r0["DIBS_HOSTS"], ",") + 1; got != 2 {
		t.Errorf("DIBS_HOSTS = %q, want two hosts", r0["DIBS_HOSTS"])
	}
	t0, t1 := readTime(dir+"/t0"), readTime(dir+"/t1")
	if d := t0.Sub(t1).Abs(); d > time.Second {
		t.Errorf("ranks started %s apart, want within a second", d)
	}
	agenttest.Eventually(t, 3*time.Second, "the gang to show as running", func() bool {
		q, _ := nodes[0].Client.Queue(ctx(t))
		return len(q.Entries) == 1 && q.Entries[0].ID == s.ID && q.Entries[0].Running
	})
}

func readTime(path string) time.Time {
	b, err := os.ReadFile(path)
	var sec, nsec int64
	if n, _ := fmt.Sscanf(strings.TrimSpace(string(b)), "%d.%d", &sec, &nsec); err != nil || n != 2 {
		return time.Time{}
	}
	return time.Unix(sec, nsec)
}

func TestGangRankFailureStopsOthersAndRequeues(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	p := lease.DefaultPolicy()
	p.PreemptGrace = time.Second
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Policy: p, Quiet: true})
	dir := agenttest.PublicDir(t)
	os.Chmod(dir, 0o777)
	// Rank 1 fails on the first attempt only; rank 0 would run for a minute.
	script := fmt.Sprintf(`echo start >> %[1]s/attempts.$NODE_RANK; if [ "$NODE_RANK" = 1 ] && [ ! -f %[1]s/failed ]; then touch %[1]s/failed; sleep 0.5; exit 3; fi; sleep 60`, dir)
	s, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Requeue: true, MaxRestarts: 2,
		Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{Command: []string{"sh", "-c", script}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the gang to be restarted after rank 1 failed", func() bool {
		a0, _ := os.ReadFile(dir + "/attempts.0")
		a1, _ := os.ReadFile(dir + "/attempts.1")
		return strings.Count(string(a0), "start") == 2 && strings.Count(string(a1), "start") == 2
	})
	q, _ := nodes[0].Client.Queue(ctx(t))
	if len(q.Entries) != 1 || q.Entries[0].ID != s.ID || q.Entries[0].Restarts != 1 {
		t.Errorf("queue after the restart = %+v, want %s with 1 restart", q.Entries, s.ID)
	}
	// Never more than one attempt's leases at once: 2 GPUs in use, not 4.
	b, _ := nodes[0].Client.Board(ctx(t))
	held := 0
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if g.Lease != nil {
				held++
			}
		}
	}
	if held != 2 {
		t.Errorf("%d GPUs held after the restart, want 2 (one per rank)", held)
	}
}

// fakeScheduler is a gossip member that reserves like a scheduler and then
// dies before committing.
type fakeScheduler struct{}

func (fakeScheduler) LocalState() gossip.NodeState { return gossip.NodeState{} }
func (fakeScheduler) HandleRequest(context.Context, string, gossip.Request) gossip.Response {
	return gossip.Response{ErrCode: refusal.CodeUnavailable, ErrMsg: "fake"}
}
func (fakeScheduler) ClusterChanged() {}

func TestSchedulerDeathMidGangLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	sched := queue.SchedConfig{ReservationTTL: 2 * time.Second}
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Sched: sched, Quiet: true})
	// A scheduler reserves a rank on node02 and dies before the commit.
	fake, err := gossip.New(gossip.Config{NodeName: "node00", BindAddr: "127.0.0.1", ClusterName: "test", Key: nodes[0].Opts.Cluster.Key,
		Join: []string{nodes[0].Agent.GossipAddr()}, Protocol: peer.Version}, fakeScheduler{})
	if err != nil {
		t.Fatal(err)
	}
	entry := queue.QueueEntry{ID: "node01-q99", Origin: "node01", User: nodes[0].Me().Caller().User, UID: os.Getuid(),
		Nodes: 2, GPUsPerNode: 2, Duration: time.Hour, Kind: lease.KindBatch}
	req, _ := json.Marshal(peer.StartRequest{Entry: entry, Phase: peer.PhaseReserve, GPUs: []int{0, 1}, Gang: "g", Rank: 1})
	body, _ := json.Marshal(map[string]any{"v": peer.Version, "actor": peer.As(entry.User), "req": json.RawMessage(req)})
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := fake.Request(c, "node02", gossip.Request{Op: "start", Body: body})
	cancel()
	if err != nil || resp.ErrMsg != "" {
		t.Fatalf("fake reserve: %v %s", err, resp.ErrMsg)
	}
	fake.Shutdown()
	var until time.Time
	agenttest.Eventually(t, 2*time.Second, "the reservation to hold node02's GPUs on node01's board", func() bool {
		b, _ := nodes[0].Client.Board(ctx(t))
		if l := leaseOn(b, "node02", 0); l != nil {
			until = l.ReservedUntil
		}
		return !until.IsZero()
	})
	// A real gang waits behind the orphaned reservation, then runs once it expires.
	dir := agenttest.PublicDir(t)
	_, err = nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{
		Command: []string{"sh", "-c", "date +%s.%N > " + dir + "/ran$NODE_RANK; sleep 30"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the orphaned reservation to expire and the gang to run", func() bool {
		return !readTime(dir+"/ran0").IsZero() && !readTime(dir+"/ran1").IsZero()
	})
	for _, rank := range []string{"ran0", "ran1"} {
		if at := readTime(dir + "/" + rank); at.Before(until) {
			t.Errorf("a rank of the gang started at %s, %s before the orphaned reservation expired",
				at.Format("15:04:05.000"), until.Sub(at).Round(time.Millisecond))
		}
	}
	for _, n := range nodes {
		b, _ := n.Client.Board(ctx(t))
		for _, bn := range b.Nodes {
			for _, g := range bn.GPUs {
				if g.Lease != nil && g.Lease.Entry == entry.Key() {
					t.Errorf("%s still shows the orphaned reservation on %s GPU %d", n.Opts.Name, bn.Name, g.Index)
				}
			}
		}
	}
}

// TestPerGPUStartsOneProcessPerGPU: --per-gpu starts the command once per
// leased GPU, as srun --ntasks-per-node does, each copy with the env://
// variables set for it and every GPU of its node's lease visible (so
// LOCAL_RANK picks one), for a gang and for a single-node run.
func TestPerGPUStartsOneProcessPerGPU(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "4xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	dump := `env | grep -E '^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|LOCAL_WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK|CUDA_VISIBLE_DEVICES|DIBS_NODE)=' > `
	for _, tc := range []struct {
		name         string
		nodes, gpus  int
		prefix       string
		wantMasterIP string
	}{
		{"gang", 2, 2, "g", "127.0.0.1"},
		{"single node", 1, 2, "s", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nodes[1].Client.Submit(ctx(t), api.SubmitRequest{Nodes: tc.nodes, GPUsPerNode: tc.gpus, PerGPU: true, Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{
				Command: []string{"sh", "-c", dump + dir + "/" + tc.prefix + "$RANK.tmp && mv " + dir + "/" + tc.prefix + "$RANK.tmp " + dir + "/" + tc.prefix + "$RANK; sleep 60"}}}})
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			world := tc.nodes * tc.gpus
			ranks := make([]map[string]string, world)
			agenttest.Eventually(t, 15*time.Second, "every process to start", func() bool {
				for r := range ranks {
					if ranks[r] = readEnvFile(fmt.Sprintf("%s/%s%d", dir, tc.prefix, r)); len(ranks[r]) < 8 {
						return false
					}
				}
				return true
			})
			for r, env := range ranks {
				node, local := r/tc.gpus, r%tc.gpus
				want := map[string]string{"RANK": fmt.Sprint(r), "LOCAL_RANK": fmt.Sprint(local), "NODE_RANK": fmt.Sprint(node),
					"WORLD_SIZE": fmt.Sprint(world), "LOCAL_WORLD_SIZE": fmt.Sprint(tc.gpus), "MASTER_ADDR": tc.wantMasterIP, "MASTER_PORT": ranks[0]["MASTER_PORT"]}
				for k, v := range want {
					if env[k] != v {
						t.Errorf("rank %d: %s = %q, want %q", r, k, env[k], v)
					}
				}
				if n := strings.Count(env["CUDA_VISIBLE_DEVICES"], ",") + 1; n != tc.gpus {
					t.Errorf("rank %d sees CUDA_VISIBLE_DEVICES=%q, want all %d GPUs of its lease", r, env["CUDA_VISIBLE_DEVICES"], tc.gpus)
				}
				if first := ranks[node*tc.gpus]; env["CUDA_VISIBLE_DEVICES"] != first["CUDA_VISIBLE_DEVICES"] || env["DIBS_NODE"] != first["DIBS_NODE"] {
					t.Errorf("rank %d and rank %d share a node but see %q / %q", r, node*tc.gpus, env["CUDA_VISIBLE_DEVICES"], first["CUDA_VISIBLE_DEVICES"])
				}
			}
			if ranks[0]["MASTER_PORT"] == "" {
				t.Error("no MASTER_PORT")
			}
		})
	}
}

// TestPerGPUFailedProcessStopsItsSiblings: one process of a --per-gpu run
// failing ends the others on its node, so the run fails (and, asked to,
// goes back to the queue) instead of hanging on a dead peer.
func TestPerGPUFailedProcessStopsItsSiblings(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	os.Chmod(dir, 0o777)
	script := fmt.Sprintf(`echo start >> %[1]s/attempts.$RANK; if [ "$RANK" = 1 ] && [ ! -f %[1]s/failed ]; then touch %[1]s/failed; sleep 0.5; exit 3; fi; sleep 60`, dir)
	if _, err := nodes[0].Client.Submit(ctx(t), api.SubmitRequest{Nodes: 1, GPUsPerNode: 2, PerGPU: true, Requeue: true, MaxRestarts: 1,
		Claim: api.ClaimRequest{Duration: "1h", Run: &api.RunSpec{Command: []string{"sh", "-c", script}}}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the run to start again after its rank 1 failed", func() bool {
		a0, _ := os.ReadFile(dir + "/attempts.0")
		return strings.Count(string(a0), "start") == 2
	})
}

// TestRunNamesItsGPUsForContainers: a session's environment names the
// lease's GPUs by UUID (DIBS_GPU_UUIDS, NVIDIA_VISIBLE_DEVICES), exactly
// those of the lease, in its order, as `docker run --gpus device=…`, CDI
// and apptainer take them: a container renumbers GPUs from 0, so
// CUDA_VISIBLE_DEVICES=2,3 would name the wrong ones there.
func TestRunNamesItsGPUsForContainers(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S"}, Quiet: true})
	dir := agenttest.PublicDir(t)
	if _, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	r, err := nodes[0].Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Duration: "1h", Run: &api.RunSpec{
		Command: []string{"sh", "-c", `env | grep -E '^(DIBS_GPU_UUIDS|NVIDIA_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES)=' > ` + dir + `/env.tmp && mv ` + dir + `/env.tmp ` + dir + `/env; sleep 60`}}})
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	agenttest.Eventually(t, 10*time.Second, "the run to start", func() bool {
		env = readEnvFile(dir + "/env")
		return len(env) == 3
	})
	b, _ := nodes[0].Client.Board(ctx(t))
	var want []string
	for _, i := range r.GPUs {
		want = append(want, b.Nodes[0].GPUs[i].UUID)
	}
	if w := strings.Join(want, ","); env["DIBS_GPU_UUIDS"] != w || env["NVIDIA_VISIBLE_DEVICES"] != w || !strings.HasPrefix(w, "GPU-") {
		t.Errorf("CUDA_VISIBLE_DEVICES=%s: DIBS_GPU_UUIDS=%q NVIDIA_VISIBLE_DEVICES=%q, want %q (the UUIDs of GPUs %v)",
			env["CUDA_VISIBLE_DEVICES"], env["DIBS_GPU_UUIDS"], env["NVIDIA_VISIBLE_DEVICES"], w, r.GPUs)
	}
}
