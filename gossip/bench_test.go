package gossip

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of whole clusters in one process on loopback. They are slow
// (seconds to minutes) and report their own metrics; run them one at a
// time with -benchtime Nx, e.g.
//
//	go test ./gossip -run '^$' -bench 'BenchmarkConvergence/32' -benchtime 200x
//	go test ./gossip -run '^$' -bench 'BenchmarkConvergence/128' -benchtime 100x
//	go test ./gossip -run '^$' -bench BenchmarkRemoteRequest -benchtime 2000x
//	go test ./gossip -run '^$' -bench BenchmarkFailureDetection -benchtime 5x
//	go test ./gossip -run '^$' -bench BenchmarkLossNoFalseDead -benchtime 1x
//	go test ./gossip -run '^$' -bench BenchmarkIdleBandwidth -benchtime 1x
//
// The 128-agent cases run only when -bench names them (they need a minute
// and most of two cores). DIBS_BENCH_WINDOW (a duration) sets the
// observation window of the loss and bandwidth benchmarks (default 60s);
// DIBS_BENCH_GAP (a duration) spaces the convergence trials (default 0:
// back to back, so each trial also carries the gossip of the ones before).

// benchNamed reports whether the -bench pattern names s explicitly.
func benchNamed(s string) bool {
	f := flag.Lookup("test.bench")
	return f != nil && strings.Contains(f.Value.String(), s)
}

func benchGap() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("DIBS_BENCH_GAP"))
	return d
}

func benchWindow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("DIBS_BENCH_WINDOW")); err == nil && d > 0 {
		return d
	}
	return 60 * time.Second
}

// quietCluster starts n agents with logging off (a 128-agent cluster logs
// a lot while it forms).
func quietCluster(b *testing.B, n int, tune func(*Config)) []*tnode {
	b.Helper()
	return startCluster(b, n, func(c *Config) {
		c.Logf = nil
		if tune != nil {
			tune(c)
		}
	})
}

// percentile of sorted durations.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(float64(len(d)-1) * p)
	return d[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// trial is one lease change being watched for on every agent.
type trial struct {
	origin    string
	version   uint64
	remaining atomic.Int64
	arrived   []atomic.Bool
	last      atomic.Int64 // unix ns of the latest arrival
	done      chan struct{}
}

// BenchmarkConvergence measures the time from Publish(true) on one agent
// until every other agent's view has the new version, over b.N trials
// (origins rotate). missed counts agents that did not have it within 5 s.
func BenchmarkConvergence(b *testing.B) {
	for _, n := range []int{8, 32, 128} {
		name := strconv.Itoa(n)
		if !subSelected(name) {
			continue
		}
		if n >= 128 && !benchNamed("128") {
			b.Run(name, func(b *testing.B) { b.Skip("128 agents need -bench 'BenchmarkConvergence/128'") })
			continue
		}
		// One cluster for the probe run (b.N = 1) and the real one, shut
		// down before the next size starts.
		nodes := quietCluster(b, n, nil)
		b.Run(name, func(b *testing.B) { benchConvergence(b, nodes) })
		for _, nd := range nodes {
			_ = nd.Shutdown()
		}
	}
}

// subSelected reports whether the sub-benchmark pattern of -bench (after
// the first '/') matches name.
func subSelected(name string) bool {
	f := flag.Lookup("test.bench")
	if f == nil {
		return true
	}
	_, sub, ok := strings.Cut(f.Value.String(), "/")
	if !ok {
		return true
	}
	sub, _, _ = strings.Cut(sub, "/")
	re, err := regexp.Compile(sub)
	return err != nil || re.MatchString(name)
}

func benchConvergence(b *testing.B, nodes []*tnode) {
	n := len(nodes)
	var cur atomic.Pointer[trial]
	for i, nd := range nodes {
		f := func() {
			tr := cur.Load()
			if tr == nil || tr.arrived[i].Load() || nd.cfg.NodeName == tr.origin {
				return
			}
			if p, _ := nd.Peer(tr.origin); p.NodeState.Version >= tr.version && !tr.arrived[i].Swap(true) {
				tr.last.Store(time.Now().UnixNano())
				if tr.remaining.Add(-1) == 0 {
					close(tr.done)
				}
			}
		}
		nd.agent.onChange.Store(&f)
	}
	b.Cleanup(func() {
		for _, nd := range nodes {
			nd.agent.onChange.Store(nil)
		}
	})

	lat := make([]time.Duration, 0, b.N)
	missed, missedTrials := 0, 0
	gap := benchGap()
	b.ResetTimer()
	for t := range b.N {
		if gap > 0 && t > 0 {
			b.StopTimer()
			time.Sleep(gap)
			b.StartTimer()
		}
		src := nodes[(t*7+1)%n]
		tr := &trial{origin: src.cfg.NodeName, arrived: make([]atomic.Bool, n), done: make(chan struct{})}
		tr.remaining.Store(int64(n - 1))
		tr.version = src.agent.setLeases("bench-user", "benchmark run "+strconv.Itoa(t), t%8)
		cur.Store(tr)
		start := time.Now()
		src.Publish(true)
		select {
		case <-tr.done:
			lat = append(lat, time.Unix(0, tr.last.Load()).Sub(start))
			if d := lat[len(lat)-1]; d > 50*time.Millisecond {
				b.Logf("trial %d from %s: %v", t, tr.origin, d)
			}
		case <-time.After(5 * time.Second):
			m := int(tr.remaining.Load())
			missed += m
			missedTrials++
			b.Logf("trial %d from %s: %d agents without the change after 5s", t, tr.origin, m)
			lat = append(lat, 5*time.Second)
		}
		cur.Store(nil)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(float64(missed), "missed")
	b.ReportMetric(float64(missedTrials), "missed-trials")
	b.ReportMetric(0, "ns/op")
	var dropped, dup uint64
	for _, nd := range nodes {
		s := nd.Stats()
		dropped += s.Dropped
		dup += s.Duplicates
	}
	b.Logf("%d agents, %d trials: p50 %v p99 %v max %v, missed %d; dropped %d duplicates %d",
		n, b.N, percentile(lat, 0.5), percentile(lat, 0.99), lat[len(lat)-1], missed, dropped, dup)
}

// BenchmarkRemoteRequest measures the round trip of a small claim-like
// request to another agent.
func BenchmarkRemoteRequest(b *testing.B) {
	nodes := quietCluster(b, 3, nil)
	body := json.RawMessage(`{"count":2,"duration":"4h","note":"benchmark","kind":"interactive"}`)
	nodes[1].agent.mu.Lock()
	nodes[1].agent.handler = func(ctx context.Context, from string, req Request) Response {
		return Response{Body: json.RawMessage(`{"lease":{"id":"node01-42","gpus":[0,1]}}`)}
	}
	nodes[1].agent.mu.Unlock()
	ctx := context.Background()
	for range 20 { // warm up
		if _, err := nodes[0].Request(ctx, "node01", Request{Op: "claim", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	rtt := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := nodes[0].Request(ctx, "node01", Request{Op: "claim", Body: body}); err != nil {
			b.Fatal(err)
		}
		rtt = append(rtt, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(ms(percentile(rtt, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(rtt, 0.99)), "p99-ms")
}

// deathWatch records, for each observer, when it first saw victim suspect
// and dead.
type deathWatch struct {
	victim    string
	dead      []atomic.Int64
	suspect   []atomic.Int64
	remaining atomic.Int64
	done      chan struct{}
}

func watchDeath(nodes []*tnode, victim string) *deathWatch {
	w := &deathWatch{victim: victim, dead: make([]atomic.Int64, len(nodes)), suspect: make([]atomic.Int64, len(nodes)), done: make(chan struct{})}
	w.remaining.Store(int64(len(nodes)))
	for i, nd := range nodes {
		f := func() {
			p, _ := nd.Peer(victim)
			now := time.Now().UnixNano()
			if p.State == StateSuspect {
				w.suspect[i].CompareAndSwap(0, now)
			}
			if p.State == StateDead && w.dead[i].CompareAndSwap(0, now) && w.remaining.Add(-1) == 0 {
				close(w.done)
			}
		}
		nd.agent.onChange.Store(&f)
	}
	return w
}

// BenchmarkFailureDetection kills one agent of 32 per trial (without Leave)
// and measures until every other agent shows it dead.
func BenchmarkFailureDetection(b *testing.B) {
	const n = 32
	if b.N == 1 && !benchNamed("FailureDetection") {
		b.Skip("needs -bench BenchmarkFailureDetection")
	}
	nodes := quietCluster(b, n, nil)
	var all, first, firstSuspect []time.Duration
	for t := range b.N {
		if len(nodes) < 3 {
			break
		}
		vi := 1 + (t*5)%(len(nodes)-1)
		victim := nodes[vi]
		others := slices.Delete(slices.Clone(nodes), vi, vi+1)
		w := watchDeath(others, victim.cfg.NodeName)
		start := time.Now()
		_ = victim.Shutdown()
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			b.Fatalf("trial %d: %d agents still do not show %s dead after 30s", t, w.remaining.Load(), w.victim)
		}
		var lastDead, firstDead, firstSus int64
		for i := range others {
			d := w.dead[i].Load()
			lastDead = max(lastDead, d)
			if firstDead == 0 || d < firstDead {
				firstDead = d
			}
			if s := w.suspect[i].Load(); s != 0 && (firstSus == 0 || s < firstSus) {
				firstSus = s
			}
		}
		all = append(all, time.Unix(0, lastDead).Sub(start))
		first = append(first, time.Unix(0, firstDead).Sub(start))
		if firstSus != 0 {
			firstSuspect = append(firstSuspect, time.Unix(0, firstSus).Sub(start))
		}
		b.Logf("trial %d: %s suspect after %v, dead somewhere after %v, everywhere after %v", t, w.victim,
			time.Unix(0, firstSus).Sub(start).Round(time.Millisecond), first[len(first)-1].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond))
		nodes = others
		for _, nd := range nodes {
			nd.agent.onChange.Store(nil)
		}
	}
	slices.Sort(all)
	slices.Sort(first)
	b.ReportMetric(all[len(all)/2].Seconds(), "all-dead-p50-s")
	b.ReportMetric(all[len(all)-1].Seconds(), "all-dead-max-s")
	b.ReportMetric(first[len(first)/2].Seconds(), "first-dead-p50-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLossNoFalseDead runs 32 agents that each drop 5 % of incoming
// UDP packets for DIBS_BENCH_WINDOW and counts any agent ever shown dead
// (or suspect) by another; then it kills one and measures detection under
// the same loss.
func BenchmarkLossNoFalseDead(b *testing.B) {
	if !benchNamed("LossNoFalseDead") {
		b.Skip("needs -bench BenchmarkLossNoFalseDead")
	}
	if b.N > 1 {
		b.Skip("run with -benchtime 1x")
	}
	const n = 32
	nodes := quietCluster(b, n, func(c *Config) { c.testPacketLoss = 0.05 })
	var falseDead, falseSuspect atomic.Int64
	for _, nd := range nodes {
		seen := make(map[string]string)
		var mu sync.Mutex
		f := func() {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range nd.View() {
				if p.State != seen[p.Name] && p.State != StateAlive {
					if p.State == StateDead || p.State == StateLeft {
						falseDead.Add(1)
					} else {
						falseSuspect.Add(1)
					}
					b.Logf("%s sees %s %s", nd.cfg.NodeName, p.Name, p.State)
				}
				seen[p.Name] = p.State
			}
		}
		nd.agent.onChange.Store(&f)
	}
	window := benchWindow()
	b.Logf("watching %d agents at 5%% loss for %v", n, window)
	time.Sleep(window)
	for _, nd := range nodes {
		nd.agent.onChange.Store(nil)
	}
	victim := nodes[n/2]
	others := slices.Delete(slices.Clone(nodes), n/2, n/2+1)
	w := watchDeath(others, victim.cfg.NodeName)
	start := time.Now()
	_ = victim.Shutdown()
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		b.Fatalf("%d agents do not show the killed agent dead after 60s at 5%% loss", w.remaining.Load())
	}
	var last int64
	for i := range others {
		last = max(last, w.dead[i].Load())
	}
	detect := time.Unix(0, last).Sub(start)
	var drops uint64
	for _, nd := range nodes {
		drops += nd.Stats().Dropped
	}
	b.ReportMetric(float64(falseDead.Load()), "false-dead")
	b.ReportMetric(float64(falseSuspect.Load()), "false-suspect")
	b.ReportMetric(detect.Seconds(), "all-dead-s")
	b.ReportMetric(window.Seconds(), "window-s")
	b.ReportMetric(0, "ns/op")
	b.Logf("false dead %d, false suspect %d over %v; killed agent dead everywhere after %v", falseDead.Load(), falseSuspect.Load(), window, detect)
}

// BenchmarkIdleBandwidth measures the bytes per second one agent sends and
// receives in a 32-agent cluster where nothing changes: each agent holds an
// 8-GPU snapshot and two leases. Probes, push/pull and telemetry refreshes
// are all counted. The busy variant changes every agent's telemetry every
// TelemetryInterval.
func BenchmarkIdleBandwidth(b *testing.B) {
	if !benchNamed("IdleBandwidth") {
		b.Skip("needs -bench BenchmarkIdleBandwidth")
	}
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "telemetry-every-5s"
		}
		b.Run(name, func(b *testing.B) {
			if b.N > 1 {
				b.Skip("run with -benchtime 1x")
			}
			benchBandwidth(b, 32, busy)
		})
	}
}

func benchBandwidth(b *testing.B, n int, busy bool) {
	nodes := quietCluster(b, n, nil)
	for _, nd := range nodes {
		nd.agent.setSnapshot(testSnapshot(b, nd.cfg.NodeName))
		nd.agent.setLeases("alice", "a typical note about a run", 0, 1)
		nd.Publish(true)
		nd.Publish(false)
	}
	// Let every state spread and a push/pull round pass.
	waitFor(b, 30*time.Second, func() (bool, string) {
		for _, nd := range nodes {
			for _, o := range nodes {
				if p, _ := nd.Peer(o.cfg.NodeName); len(p.NodeState.Snapshot.GPUs) != 8 {
					return false, fmt.Sprintf("%s lacks %s's telemetry", nd.cfg.NodeName, o.cfg.NodeName)
				}
			}
		}
		return true, ""
	})
	time.Sleep(5 * time.Second)
	stop := make(chan struct{})
	if busy {
		go func() {
			r := rand.New(rand.NewPCG(7, 8))
			t := time.NewTicker(DefaultTelemetryInterval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					for _, nd := range nodes {
						nd.agent.mu.Lock()
						s := nd.agent.state.Snapshot
						gpus := slices.Clone(s.GPUs)
						for i := range gpus {
							u := r.IntN(101)
							gpus[i].UtilizationPct = &u
							gpus[i].MemoryUsedMiB = uint64(r.IntN(80000))
						}
						s.GPUs = gpus
						nd.agent.state.Snapshot = s
						nd.agent.state.Version++
						nd.agent.mu.Unlock()
						nd.Publish(false)
					}
				}
			}
		}()
	}
	before := make([]Stats, n)
	for i, nd := range nodes {
		before[i] = nd.Stats()
	}
	window := benchWindow()
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start).Seconds()
	close(stop)
	var outs, ins []float64
	for i, nd := range nodes {
		s := nd.Stats()
		outs = append(outs, float64(s.BytesOut-before[i].BytesOut)/elapsed)
		ins = append(ins, float64(s.BytesIn-before[i].BytesIn)/elapsed)
	}
	mean := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	b.ReportMetric(mean(outs), "out-B/s/agent")
	b.ReportMetric(slices.Max(outs), "out-max-B/s")
	b.ReportMetric(mean(ins), "in-B/s/agent")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d agents over %.0fs: out %.0f B/s (max %.0f), in %.0f B/s per agent", n, elapsed, mean(outs), slices.Max(outs), mean(ins))
}
