package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	simprobe "github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// TestDoctorOnAThreeAgentCluster runs `dibs doctor` against a healthy
// 3-agent cluster with some history: every check prints, and a verdict
// with the figures behind it; --json carries the same.
func TestDoctorOnAThreeAgentCluster(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xH100", "4xH100", "2xL40S"}, Quiet: true})
	ctx := context.Background()
	me := nodes[0].Me()
	c, err := me.Claim(ctx, api.ClaimRequest{Node: "node02", Count: 2, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := me.Release(ctx, api.ReleaseRequest{IDs: []string{c.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := me.Claim(ctx, api.ClaimRequest{Node: "node03", Count: 1, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	// A queued claim: its lease and then its ledger entry keep when it was
	// queued, so the doctor counts its wait.
	sub, err := me.Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 4, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	var queued lease.Lease
	agenttest.Eventually(t, 10*time.Second, "the queued claim to start", func() bool {
		for _, n := range nodes[0].Board().Nodes {
			for _, g := range n.GPUs {
				if g.Lease != nil && strings.HasPrefix(g.Lease.Entry, sub.ID+"#") {
					queued = *g.Lease
					return true
				}
			}
		}
		return false
	})
	if queued.QueuedAt.IsZero() || queued.QueuedAt.After(queued.StartedAt) {
		t.Errorf("the queued lease's queued_at is %s (started %s)", queued.QueuedAt, queued.StartedAt)
	}
	if _, err := me.Release(ctx, api.ReleaseRequest{IDs: []string{queued.ID}}); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := dibs(t, nodes[0].Socket, nil, "doctor")
	if code != 0 {
		t.Fatalf("dibs doctor on a healthy cluster: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, name := range doctor.CheckNames {
		if !strings.Contains(out, " "+name+" ") {
			t.Errorf("no %q check in:\n%s", name, out)
		}
	}
	for _, want := range []string{"3 of 3 agents answered", "every agent runs dibs dev", "Have we outgrown dibs?", "10 GPUs on 3 nodes",
		"held ", "3 leases", "over 1 queued runs", "Verdict: ", "docs/doctor.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("dibs doctor lacks %q:\n%s", want, out)
		}
	}

	out, _, code = dibs(t, nodes[0].Socket, nil, "doctor", "--json")
	var rep api.DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("dibs doctor --json: exit %d, %v\n%s", code, err, out)
	}
	if len(rep.Nodes) != 3 || len(rep.Checks) < len(doctor.CheckNames) || rep.Verdict == nil || rep.Findings == nil {
		t.Fatalf("--json report: %d nodes, %d checks, verdict %v", len(rep.Nodes), len(rep.Checks), rep.Verdict)
	}
	if rep.Findings.GPUs != 10 || rep.Findings.Leases != 3 || rep.Findings.Users != 1 || rep.Findings.Queued != 1 {
		t.Errorf("findings: %d GPUs, %d leases, %d users, %d queued; want 10, 3 (two ended, one held), 1, 1",
			rep.Findings.GPUs, rep.Findings.Leases, rep.Findings.Users, rep.Findings.Queued)
	}
	if rep.Config.DefaultInteractive != 4*time.Hour || rep.Config.HalfLife != queue.DefaultHalfLife {
		t.Errorf("config in the report: %+v", rep.Config)
	}
}

// TestDoctorSeesEachFault plants one fault per node and reads what `dibs
// doctor` tells: an agent down, another version, no tmux, a clock five
// minutes ahead, a GPU squatted for over half an hour.
func TestDoctorSeesEachFault(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	if err := os.WriteFile(load, []byte(`{"gpus":{"0":{"utilization_pct":90,"processes":[{"pid":4242,"user":"nobody","uid":65534,"command":"python","used_memory_mib":1000}]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Now())
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i + 1)
	}
	tmux := agenttest.TmuxDir(t)
	opts := []agenttest.Options{
		{Name: "node01"},
		{Name: "node02", Version: "v0.9.0"},
		{Name: "node03", TmuxPath: "/nonexistent/tmux"},
		{Name: "node04", Clock: fake, SimLoad: load},
		{Name: "node05"},
	}
	var nodes []*agenttest.Node
	seed := ""
	for _, o := range opts {
		o.Sim, o.Quiet, o.TmuxTmpDir = "2xL40S", true, tmux
		o.Cluster = &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "faults", Key: key, Fast: true}
		if seed != "" {
			o.Cluster.Join = []string{seed}
		}
		n := agenttest.Start(t, o)
		if seed == "" {
			seed = n.Agent.GossipAddr()
		}
		nodes = append(nodes, n)
	}
	agenttest.WaitConverged(t, nodes, 15*time.Second)
	nodes[4].Crash()
	// node04's clock: five minutes ahead, and 31 minutes on, so its sampler
	// has seen the squatter for that long.
	fake.StepWall(5 * time.Minute)
	fake.Advance(31 * time.Minute)
	agenttest.Eventually(t, 10*time.Second, "node01 to see node05 down", func() bool {
		for _, n := range nodes[0].Board().Nodes {
			if n.Name == "node05" {
				return n.State != api.NodeAlive
			}
		}
		return false
	})

	var out string
	var code int
	agenttest.Eventually(t, 10*time.Second, "the squatter to be seen for half an hour", func() bool {
		out, _, code = dibs(t, nodes[0].Socket, nil, "doctor", "--window", "1d")
		return strings.Contains(out, "squatted for")
	})
	if code != 1 {
		t.Errorf("dibs doctor with failing checks exited %d, want 1", code)
	}
	for _, want := range []struct{ check, text string }{
		{"FAIL  agents", "node05 is "},
		{"warn  version", fmt.Sprintf("v0.9.0 (protocol %d) on node02", peer.Version)},
		{"FAIL  tmux", "node03 has no tmux"},
		{"FAIL  clock", "node04's clock is 3"},
		{"warn  leases", "GPU 0 on node04 (with no lease) has been squatted for 36m by nobody (pid 4242)"},
		{"warn  probe", "the GPUs of node01, node02, node03, node04 are simulated"},
	} {
		if want.check == "FAIL  clock" && !strings.Contains(lineWith(out, want.text), "ahead of this node's") {
			t.Errorf("node04's clock is not said to be ahead:\n%s", out)
		}
		line := lineWith(out, want.text)
		if line == "" || !strings.Contains(line, want.check) {
			t.Errorf("want a %q line saying %q; got line %q in:\n%s", want.check, want.text, line, out)
		}
	}
	for _, fix := range []string{"start its agent on node05", "install the same dibs on every node", "apt-get install tmux` on node03", "chrony", "dibs adopt 4242"} {
		if !strings.Contains(out, "fix: ") || !strings.Contains(out, fix) {
			t.Errorf("no fix mentioning %q in:\n%s", fix, out)
		}
	}
	if !strings.Contains(out, "Verdict: ") {
		t.Errorf("no verdict:\n%s", out)
	}
}

// lineWith is the first line of out containing s.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// memStore is a lease.Store in memory, preloaded with a long ledger.
type memStore struct {
	mu     sync.Mutex
	leases map[string]lease.Lease
	ledger []lease.LedgerEntry
	last   uint64
	queue  map[string]queue.QueueEntry
	seq    uint64
}

func (m *memStore) Load() ([]lease.Lease, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.leases)), m.last, nil
}
func (m *memStore) Put(l lease.Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leases[l.ID], m.last = l, max(m.last, l.Token)
	return nil
}
func (m *memStore) End(id string, e lease.LedgerEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leases, id)
	m.ledger = append(m.ledger, e)
	return nil
}
func (m *memStore) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []lease.LedgerEntry
	for _, e := range m.ledger {
		if !e.End.Before(since) {
			out = append(out, e)
		}
	}
	return out, nil
}
func (m *memStore) PutEntry(e queue.QueueEntry, seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue[e.ID], m.seq = e, max(m.seq, seq)
	return nil
}
func (m *memStore) DeleteEntry(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.queue, id)
	return nil
}
func (m *memStore) Entries() ([]queue.QueueEntry, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.queue)), m.seq, nil
}
func (m *memStore) Close() error { return nil }

// TestDoctorReadsALongLedgerInPages: a ledger far over one reply's size
// comes across whole, page by page, and the figures count every lease.
func TestDoctorReadsALongLedgerInPages(t *testing.T) {
	now := time.Now()
	st := &memStore{leases: map[string]lease.Lease{}, queue: map[string]queue.QueueEntry{}}
	const n = 1500
	for i := 0; i < n; i++ {
		start := now.Add(-time.Duration(n-i) * 10 * time.Minute)
		st.ledger = append(st.ledger, lease.LedgerEntry{LeaseID: fmt.Sprintf("node01-%d", i+1), Node: "node01", User: fmt.Sprintf("user%d", i%5), GPUs: []int{i % 4},
			Start: start, End: start.Add(5 * time.Minute), GPUSeconds: 300, Reason: "released", Kind: lease.KindBatch, Limit: time.Hour,
			Entry: fmt.Sprintf("node01-q%d#0", i+1), QueuedAt: start.Add(-time.Minute)})
	}
	st.last = n
	probe, err := simprobe.New(simprobe.Options{Spec: "4xH100", HostName: "node01"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{NodeName: "node01", Log: agenttest.Logger(t, "node01", true)}, agent.Deps{Probe: probe, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	rep, err := a.For(os.Getuid()).Doctor(context.Background(), api.DoctorRequest{Window: "30d", Ledger: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ledger) != n || rep.Findings.Leases != n || rep.Findings.Queued != n || rep.Findings.WaitMax != time.Minute || rep.Findings.Users != 5 {
		t.Errorf("read %d ledger entries, %d leases, %d queued (max wait %s), %d users; want %d, %d, %d (1m), 5",
			len(rep.Ledger), rep.Findings.Leases, rep.Findings.Queued, rep.Findings.WaitMax, rep.Findings.Users, n, n, n)
	}
	b, _ := json.Marshal(rep.Ledger)
	if len(b) < 2*peer.HistoryPageBytes {
		t.Errorf("the ledger is %d bytes: too small to need pages of %d", len(b), peer.HistoryPageBytes)
	}
}
