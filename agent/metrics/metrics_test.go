package metrics_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/user"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/metrics"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/service"
)

// scrape GETs /metrics over HTTP and parses it as Prometheus does.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("scrape: %s, content type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series finds the one series of a family whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
	var found *dto.Metric
	n := 0
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		found = m
		n++
	}
	return found, n == 1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// val is the value of the one series matching labels, failing when there
// is none or more than one.
func val(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m, ok := series(fams, name, labels)
	if !ok {
		t.Fatalf("%s%v: want exactly one series; the family has %d", name, labels, len(fams[name].GetMetric()))
	}
	return value(m)
}

func me(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestScrapeShowsGPUsLeasesQueueAndLatency(t *testing.T) {
	t.Parallel()
	p := lease.DefaultPolicy()
	p.IdleAfter = 300 * time.Millisecond
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB", Policy: p, MetricsListen: "127.0.0.1:0", Quiet: true})
	addr := n.Agent.MetricsAddr()
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Fatalf("metrics listen on %q, want 127.0.0.1 as told", addr)
	}
	ctx := context.Background()
	who := me(t)

	// Through the socket, so the front door times them: a grant, a refusal.
	if _, err := n.Client.Claim(ctx, api.ClaimRequest{Count: 2, Note: "train"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Claim(ctx, api.ClaimRequest{GPUs: []int{0}}); err == nil {
		t.Fatal("a claim of a held GPU was granted")
	}
	// Someone's process on GPU 3 without a lease: squatted.
	uid := 4242
	if err := n.Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{
		3: {UtilizationPct: 97, Processes: []sim.LoadProcess{{PID: 777, User: "bob", UID: &uid, Command: "python squat.py", UsedMemoryMiB: 40000}}},
	}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the probe to see bob's process", func() bool {
		return len(n.Board().Nodes[0].GPUs[3].Processes) == 1
	})
	// GPU 2 left; a queued request for 2 waits for it and one more.
	sub, err := n.Client.Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 2}})
	if err != nil {
		t.Fatal(err)
	}

	var fams map[string]*dto.MetricFamily
	agenttest.Eventually(t, 10*time.Second, "GPU 3 squatted and GPUs 0,1 idle on /metrics", func() bool {
		fams = scrape(t, addr)
		sq, ok1 := series(fams, "dibs_gpu_squatted", map[string]string{"gpu": "3"})
		idle, ok2 := series(fams, "dibs_gpu_idle", map[string]string{"gpu": "0"})
		return ok1 && ok2 && value(sq) == 1 && value(idle) == 1
	})

	// The hardware, under dcgm-exporter's labels.
	g0 := map[string]string{"node": "node01", "gpu": "0", "device": "nvidia0", "Hostname": "node01"}
	m, ok := series(fams, "dibs_gpu_memory_total_bytes", g0)
	if !ok {
		t.Fatalf("no memory series for GPU 0: %v", fams["dibs_gpu_memory_total_bytes"])
	}
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	v := n.Agent.Service().View()
	snap := v.Local().Snap
	if labels["UUID"] != snap.GPUs[0].UUID || labels["modelName"] != snap.GPUs[0].Model || labels["UUID"] == "" || labels["pci_bus_id"] != snap.GPUs[0].PCIBusID {
		t.Errorf("GPU 0 labels = %v, want UUID %s and modelName %s from the probe", labels, snap.GPUs[0].UUID, snap.GPUs[0].Model)
	}
	if got, want := value(m), float64(snap.GPUs[0].MemoryTotalMiB)*(1<<20); got != want {
		t.Errorf("dibs_gpu_memory_total_bytes = %v, want %v", got, want)
	}
	if got := val(t, fams, "dibs_gpu_utilization_percent", map[string]string{"gpu": "3"}); got != 97 {
		t.Errorf("GPU 3 utilisation = %v, want 97", got)
	}
	for _, name := range []string{"dibs_gpu_temperature_celsius", "dibs_gpu_power_watts", "dibs_gpu_power_limit_watts", "dibs_gpu_memory_used_bytes", "dibs_gpu_up"} {
		if f := fams[name]; f == nil || len(f.Metric) != 4 {
			t.Errorf("%s: want one series per GPU (4), got %v", name, f)
		}
	}

	// Who holds what: the held GPUs show their holder.
	tests := []struct {
		gpu, user, state string
	}{
		{"0", who, "held"}, {"1", who, "held"}, {"2", "", "free"}, {"3", "bob", "unleased"},
	}
	for _, tc := range tests {
		if got := val(t, fams, "dibs_gpu_lease", map[string]string{"node": "node01", "gpu": tc.gpu}); got != 1 {
			t.Errorf("GPU %s: dibs_gpu_lease = %v, want 1", tc.gpu, got)
		}
		if _, ok := series(fams, "dibs_gpu_lease", map[string]string{"gpu": tc.gpu, "user": tc.user, "state": tc.state}); !ok {
			t.Errorf("GPU %s: no dibs_gpu_lease{user=%q,state=%q}: %v", tc.gpu, tc.user, tc.state, fams["dibs_gpu_lease"])
		}
	}
	if left := val(t, fams, "dibs_gpu_lease_remaining_seconds", map[string]string{"gpu": "0", "user": who}); left < 3*3600 || left > 4*3600 {
		t.Errorf("GPU 0 lease remaining = %vs, want about 4h", left)
	}
	if got := val(t, fams, "dibs_gpu_squatted", map[string]string{"gpu": "2"}); got != 0 {
		t.Errorf("free GPU 2 squatted = %v", got)
	}

	// The front door's latency, by endpoint and status.
	if got := val(t, fams, "dibs_api_request_duration_seconds", map[string]string{"endpoint": "claim", "code": "200"}); got != 1 {
		t.Errorf("claims answered 200 = %v, want 1", got)
	}
	if got := val(t, fams, "dibs_api_request_duration_seconds", map[string]string{"endpoint": "claim", "code": "409"}); got != 1 {
		t.Errorf("claims answered 409 = %v, want 1", got)
	}
	if got := val(t, fams, "dibs_api_request_duration_seconds", map[string]string{"endpoint": "queue/submit", "code": "200"}); got != 1 {
		t.Errorf("submits = %v, want 1", got)
	}

	// The queue: one waits; when GPUs free it starts and its wait is seen.
	if got := val(t, fams, "dibs_queue_entries", map[string]string{"state": "waiting"}); got != 1 {
		t.Errorf("waiting = %v, want 1", got)
	}
	if got := val(t, fams, "dibs_queue_wait_seconds", nil); got != 0 {
		t.Errorf("waits observed before any start = %v", got)
	}
	if _, err := n.Client.Release(ctx, api.ReleaseRequest{All: true}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the queued request to start", func() bool {
		fams = scrape(t, addr)
		m, ok := series(fams, "dibs_queue_entries", map[string]string{"state": "running"})
		return ok && value(m) == 1
	})
	if got := val(t, fams, "dibs_queue_wait_seconds", nil); got != 1 {
		t.Errorf("waits observed after %s started = %v, want 1", sub.ID, got)
	}
	if got := val(t, fams, "dibs_queue_entries", map[string]string{"state": "waiting"}); got != 0 {
		t.Errorf("waiting after the start = %v, want 0", got)
	}
	if got := val(t, fams, "dibs_agent_info", map[string]string{"node": "node01", "backend": "sim"}); got != 1 {
		t.Errorf("dibs_agent_info = %v", got)
	}
	if _, ok := fams["dibs_cluster_members"]; ok {
		t.Errorf("a single node exports cluster members")
	}
	if _, ok := fams["process_start_time_seconds"]; !ok {
		t.Errorf("no process metrics")
	}
}

func TestClusterMetricsCountMembersAndGossip(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, MetricsListen: "127.0.0.1:0", Quiet: true})
	var fams map[string]*dto.MetricFamily
	agenttest.Eventually(t, 10*time.Second, "gossip traffic counted", func() bool {
		fams = scrape(t, nodes[0].Agent.MetricsAddr())
		in, ok := series(fams, "dibs_gossip_messages_total", map[string]string{"direction": "in"})
		return ok && value(in) > 0
	})
	for state, want := range map[string]float64{"alive": 2, "suspect": 0, "dead": 0, "left": 0} {
		if got := val(t, fams, "dibs_cluster_members", map[string]string{"state": state}); got != want {
			t.Errorf("members %s = %v, want %v", state, got, want)
		}
	}
	if got := val(t, fams, "dibs_gossip_decrypt_failures_total", nil); got != 0 {
		t.Errorf("decrypt failures = %v with one key", got)
	}
	heard := val(t, fams, "dibs_cluster_member_last_heard_timestamp_seconds", map[string]string{"member": "node02"})
	if age := time.Since(time.Unix(0, int64(heard*1e9))); age < 0 || age > 5*time.Second {
		t.Errorf("node02 last heard %v ago, want seconds", age)
	}
	// Each agent exports only its own GPUs: summing agents counts each once.
	if f := fams["dibs_gpu_lease"]; len(f.GetMetric()) != 1 {
		t.Errorf("node01 exports %d GPU lease series, want its one GPU: %v", len(f.GetMetric()), f)
	}
	for _, m := range fams["dibs_gpu_lease"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "node" && l.GetValue() != "node01" {
				t.Errorf("node01 exports %s's GPU", l.GetValue())
			}
		}
	}
}

func TestMetricsAreOffUnlessAsked(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Quiet: true})
	if addr := n.Agent.MetricsAddr(); addr != "" {
		t.Errorf("metrics served at %s without being asked", addr)
	}
}

func TestMetricsListenErrorSaysWhat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	probe, err := sim.New(sim.Options{Spec: "1xL40S", HostName: "node01"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{NodeName: "node01", DataDir: t.TempDir(), MetricsListen: ln.Addr().String(),
		Log: agenttest.Logger(t, "node01", true)}, agent.Deps{Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start(context.Background())
	if err == nil {
		a.Stop()
		t.Fatal("the agent started on a metrics port already taken")
	}
	if !strings.Contains(err.Error(), "metrics: listen on "+ln.Addr().String()) || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("start with a taken metrics port: %v", err)
	}
}

// openFDs counts this process's open file descriptors: the agent runs in
// the test's process, so its sockets are among them.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count descriptors in: %v", err)
	}
	return len(ents)
}

// TestStrangersHoldingTheMetricsPortAreBounded: a stranger who opens many
// idle connections to the metrics port (and reopens them as the header
// timeout closes them) holds at most metrics.MaxConns of the root agent's
// file descriptors, and a scrape still answers while they are held.
func TestStrangersHoldingTheMetricsPortAreBounded(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", MetricsListen: "127.0.0.1:0", Quiet: true})
	addr := n.Agent.MetricsAddr()
	before := openFDs(t)
	const strangers = 4 * metrics.MaxConns
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range strangers {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial the metrics port: %v", err)
		}
		held = append(held, c)
	}
	// The listener accepts in order, so a scrape that answers comes after
	// every stranger's connection was taken.
	if fams := scrape(t, addr); len(fams) == 0 {
		t.Fatal("a scrape during the flood answered nothing")
	}
	// Each connection the stranger holds is one descriptor on its side
	// (and the scrape's kept-alive one two); the agent's side is what the
	// bound is for. Measured at once: the header timeout (5 s) would close
	// the idle ones by itself later.
	if got := openFDs(t) - before - len(held); got > metrics.MaxConns+8 {
		t.Errorf("the agent holds %d descriptors for %d idle stranger connections, want at most about %d", got, strangers, metrics.MaxConns)
	}
}

// TestServiceMetrics: a service of the node is up (1) once healthy, with
// its restarts, under its name and owner.
func TestServiceMetrics(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", MetricsListen: "127.0.0.1:0", Quiet: true})
	if _, err := n.Client.Claim(context.Background(), api.ClaimRequest{Run: &api.RunSpec{Command: []string{"sleep", "600"}},
		Service: &service.Spec{Name: "dash"}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node": "node01", "service": "dash", "user": me(t)}
	agenttest.Eventually(t, 15*time.Second, "dibs_service_up 1 for dash", func() bool {
		m, ok := series(scrape(t, n.Agent.MetricsAddr()), "dibs_service_up", want)
		return ok && value(m) == 1
	})
	if got := val(t, scrape(t, n.Agent.MetricsAddr()), "dibs_service_restarts_total", want); got != 0 {
		t.Errorf("dibs_service_restarts_total = %v, want 0", got)
	}
}

// TestScrapeShowsRunningLeaseEfficiency: a running lease's mean SM, idle
// share and peak memory so far are on /metrics, labelled with the lease
// and its holder, so a dashboard finds held-but-idle GPUs while they are.
func TestScrapeShowsRunningLeaseEfficiency(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "2xH100-80GB", MetricsListen: "127.0.0.1:0", Quiet: true})
	used := uint64(20000)
	if err := n.Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationPct: 80, MemoryUsedMiB: &used}}}); err != nil {
		t.Fatal(err)
	}
	l, err := n.Client.Claim(context.Background(), api.ClaimRequest{GPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"lease": l.ID, "user": me(t)}
	agenttest.Eventually(t, 10*time.Second, "the lease's figures on /metrics", func() bool {
		fams := scrape(t, n.Agent.MetricsAddr())
		sm, ok1 := series(fams, "dibs_lease_sm_mean_percent", want)
		idle, ok2 := series(fams, "dibs_lease_idle_percent", want)
		mem, ok3 := series(fams, "dibs_lease_peak_memory_bytes", want)
		return ok1 && ok2 && ok3 && value(sm) == 80 && value(idle) == 0 && value(mem) == float64(used)*(1<<20)
	})
}
