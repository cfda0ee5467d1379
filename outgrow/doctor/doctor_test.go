package doctor

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) // a Monday

func gpu(i int, procs ...nodeprobe.Process) nodeprobe.GPU {
	return nodeprobe.GPU{Index: i, Model: "H100", Processes: procs}
}

func TestObserve(t *testing.T) {
	snap := nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{
		gpu(0, nodeprobe.Process{PID: 1, UID: 1000, User: "ana"}), // ana's lease, ana computes: busy
		gpu(1), // ana's lease, quiet: idle
		gpu(2), // free
		gpu(3, nodeprobe.Process{PID: 2, UID: 1001, User: "bo"}), // no lease, bo runs: busy and squatted
		gpu(4, nodeprobe.Process{PID: 3, UID: 1001, User: "bo"}), // cy's lease, bo runs: busy and squatted
		{Index: 5, Error: "GPU is lost"},                         // unknown
		gpu(6),                                                   // a reservation only: free
	}}
	leases := []lease.Lease{
		{ID: "n-1", GPUs: []int{0, 1}, User: "ana", UID: 1000, ExpiresAt: t0.Add(time.Hour)},
		{ID: "n-2", GPUs: []int{4}, User: "cy", UID: 1002, ExpiresAt: t0.Add(time.Hour)},
		{ID: "n-3", GPUs: []int{6}, User: "dee", UID: 1003, ExpiresAt: t0.Add(time.Hour), ReservedUntil: t0.Add(time.Minute)},
	}
	quiet := map[int]time.Time{1: t0, 2: t0, 6: t0}
	got := Observe(snap, leases, quiet, true, t0, lease.DefaultPolicy())
	want := Sample{GPUs: 7, Busy: 3, Idle: 1, Free: 2, Squatted: 2, Unknown: 1, Waiting: true}
	if got != want {
		t.Errorf("Observe = %+v, want %+v", got, want)
	}
}

func TestSeriesAdd(t *testing.T) {
	var s Series
	x := Sample{GPUs: 4, Busy: 2, Idle: 1, Free: 1, Waiting: true}
	s.Add(x, t0)                                                   // first: nothing counted
	s.Add(x, t0.Add(time.Minute))                                  // 60 s
	s.Add(x, t0.Add(2*time.Minute))                                // 60 s
	s.Add(Sample{GPUs: 4, Free: 4}, t0.Add(time.Hour+time.Minute)) // 59 min gap counts MaxGap, next hour
	if len(s.Buckets) != 2 {
		t.Fatalf("buckets %+v, want two hours", s.Buckets)
	}
	b := s.Buckets[0]
	if b.Seconds != 120 || b.BusySec != 240 || b.IdleSec != 120 || b.FreeSec != 120 || b.WaitingSec != 120 || b.WaitingIdleSec != 120 || b.WaitingIdleGPUSec != 120 {
		t.Errorf("first hour %+v", b)
	}
	if b2 := s.Buckets[1]; b2.Seconds != int64(MaxGap/time.Second) || b2.FreeSec != 4*b2.Seconds || b2.WaitingSec != 0 {
		t.Errorf("after a gap the sample counts MaxGap only: %+v", b2)
	}
	for _, b := range s.Buckets {
		if err := b.Validate(); err != nil {
			t.Errorf("valid bucket refused: %v", err)
		}
	}
	if got := s.Since(t0.Add(time.Hour)); len(got) != 1 {
		t.Errorf("Since(10:00) = %d buckets, want the 10:00 one", len(got))
	}
	s.Add(x, t0.Add(Keep+2*time.Hour))
	if s.Buckets[0].Hour.Before(t0.Add(2 * time.Hour)) {
		t.Errorf("buckets older than Keep were kept: first %s", s.Buckets[0].Hour)
	}
	bad := Bucket{Hour: t0.Add(time.Minute), Seconds: 10}
	if bad.Validate() == nil {
		t.Errorf("a bucket off the hour was accepted")
	}
	bad = Bucket{Hour: t0, Seconds: 10, WaitingSec: 20}
	if bad.Validate() == nil {
		t.Errorf("a bucket waiting longer than it lasted was accepted")
	}
}

// history is three weeks of a small team: ana and bo every week, cy in
// the second; a gang of two ranks that waited two hours for its second
// rank; a lease that ran over its limit; an idle reclaim; one entry still
// waiting; samples of one node for a day.
func history() History {
	now := t0.Add(21 * 24 * time.Hour)
	var ledger []lease.LedgerEntry
	for w := 0; w < 3; w++ {
		d := t0.Add(time.Duration(w) * 7 * 24 * time.Hour)
		ledger = append(ledger,
			lease.LedgerEntry{LeaseID: "n1-" + string(rune('a'+w)), Node: "n1", User: "ana", GPUs: []int{0, 1}, Start: d, End: d.Add(4 * time.Hour), Limit: 4 * time.Hour, Reason: "released"},
			lease.LedgerEntry{LeaseID: "n2-" + string(rune('a'+w)), Node: "n2", User: "bo", GPUs: []int{0}, Start: d.Add(time.Hour), End: d.Add(3 * time.Hour), Limit: time.Hour, Reason: "released"},
		)
	}
	ledger = append(ledger,
		lease.LedgerEntry{LeaseID: "n1-x", Node: "n1", User: "cy", GPUs: []int{2, 3}, Start: t0.Add(8 * 24 * time.Hour), End: t0.Add(8*24*time.Hour + 2*time.Hour),
			Entry: "n1-q1#0", Gang: "n1-q1-0", QueuedAt: t0.Add(8*24*time.Hour - time.Hour), Limit: 3 * time.Hour, Reason: "exit-0"},
		lease.LedgerEntry{LeaseID: "n2-x", Node: "n2", User: "cy", GPUs: []int{2, 3}, Start: t0.Add(8*24*time.Hour + time.Hour), End: t0.Add(8*24*time.Hour + 2*time.Hour),
			Entry: "n1-q1#0", Gang: "n1-q1-0", Rank: 1, QueuedAt: t0.Add(8*24*time.Hour - time.Hour), Limit: 3 * time.Hour, Reason: "exit-0"},
		lease.LedgerEntry{LeaseID: "n1-y", Node: "n1", User: "ana", GPUs: []int{4}, Start: t0.Add(9 * 24 * time.Hour), End: t0.Add(9*24*time.Hour + time.Hour),
			Entry: "n1-q2#0", QueuedAt: t0.Add(9*24*time.Hour - 30*time.Minute), Limit: 2 * time.Hour, Reason: "preempted-idle"},
		lease.LedgerEntry{LeaseID: "n1-old", Node: "n1", User: "zed", GPUs: []int{0}, Start: t0.Add(-40 * 24 * time.Hour), End: t0.Add(-39 * 24 * time.Hour)},
	)
	buckets := map[string][]Bucket{"n1": {
		{Hour: now.Add(-2 * time.Hour).Truncate(time.Hour), Seconds: 3600, BusySec: 3600 * 4, IdleSec: 3600 * 2, FreeSec: 3600 * 2, SquattedSec: 1800, WaitingSec: 1800, WaitingIdleSec: 900, WaitingIdleGPUSec: 1800},
	}}
	return History{
		Now: now, Window: 30 * 24 * time.Hour, Nodes: 2, GPUs: 16, Ledger: ledger, Buckets: buckets,
		Running: []lease.Lease{{ID: "n2-9", Node: "n2", User: "bo", GPUs: []int{5, 6}, StartedAt: now.Add(-time.Hour), Entry: "n2-q4#0", QueuedAt: now.Add(-3 * time.Hour)}},
		Waiting: []queue.QueueEntry{{ID: "n2-q5", User: "ana", Nodes: 1, GPUsPerNode: 8, SubmittedAt: now.Add(-5 * time.Hour)}},
	}
}

func TestAnalyze(t *testing.T) {
	f := Analyze(history())
	if f.Users != 3 || f.UsersMaxWeek != 3 || len(f.UsersPerWeek) != 4 {
		t.Errorf("users %d, max a week %d, weeks %+v; want 3, 3 and four weeks (the last holds bo's running lease)", f.Users, f.UsersMaxWeek, f.UsersPerWeek)
	}
	if f.UsersPerWeek[0].Users != 2 || !f.UsersPerWeek[0].Week.Equal(t0.Truncate(24*time.Hour)) {
		t.Errorf("first week %+v, want 2 users from Monday %s", f.UsersPerWeek[0], t0.Format(time.DateOnly))
	}
	// 3×(ana 8 + bo 2) + cy 4 + 2 + ana 1 + bo running 2 = 39 GPU-hours; zed's is before the window.
	if math.Abs(f.HeldGPUHours-39) > 1e-9 || f.Leases != 10 {
		t.Errorf("held %.2f GPU-hours in %d leases, want 39 in 10", f.HeldGPUHours, f.Leases)
	}
	if f.TopUser != "ana" || math.Abs(f.TopUserShare-25.0/39) > 1e-9 {
		t.Errorf("top user %s with %.3f, want ana with 25/39", f.TopUser, f.TopUserShare)
	}
	// Waits: the gang 2h (its last rank), the reclaimed run 30m, bo's running 2h, ana's waiting 5h.
	if f.Queued != 4 || f.WaitP50 != 2*time.Hour || f.WaitP95 != 5*time.Hour || f.WaitMax != 5*time.Hour {
		t.Errorf("queued %d, waits p50 %s p95 %s max %s; want 4, 2h, 5h, 5h", f.Queued, f.WaitP50, f.WaitP95, f.WaitMax)
	}
	if f.Gangs != 1 || f.GangWaitP50 != 2*time.Hour || math.Abs(f.GangGPUShare-6.0/39) > 1e-9 {
		t.Errorf("gangs %d waiting %s holding %.3f, want 1, 2h, 6/39", f.Gangs, f.GangWaitP50, f.GangGPUShare)
	}
	if f.Preemptions["idle"] != 1 || f.Overdue != 3 {
		t.Errorf("preemptions %v, overdue %d; want one idle reclaim and bo's three overdue leases", f.Preemptions, f.Overdue)
	}
	if math.Abs(f.BusyShare-0.5) > 1e-9 || math.Abs(f.HeldIdleShare-0.25) > 1e-9 || math.Abs(f.SquattedGPUHours-0.5) > 1e-9 ||
		math.Abs(f.WaitingShare-0.5) > 1e-9 || math.Abs(f.WaitingIdleShare-0.25) > 1e-9 || math.Abs(f.WaitingIdleGPUHours-0.5) > 1e-9 {
		t.Errorf("samples: %+v", f)
	}
	if f.Sampled != time.Hour || math.Abs(f.Coverage-1.0/720) > 1e-9 {
		t.Errorf("sampled %s (coverage %.4f), want an hour of 30 days", f.Sampled, f.Coverage)
	}
}

func TestDecide(t *testing.T) {
	base := Findings{GPUs: 8, Nodes: 1, Users: 4, UsersMaxWeek: 4, Leases: 100, BusyShare: 0.5, FreeShare: 0.4, HeldIdleShare: 0.1, Coverage: 1, Window: DefaultWindow}
	tests := []struct {
		name     string
		change   func(f *Findings)
		call     string
		settings []string
		reason   string
	}{
		{"a small quiet team stays", func(f *Findings) {}, CallStay, nil, "under every threshold"},
		{"size alone stays", func(f *Findings) { f.GPUs = 32 }, CallStay, nil, "size alone"},
		{"idle GPUs while work waits: reclaim sooner", func(f *Findings) { f.WaitingIdleShare = 0.08; f.WaitingIdleGPUHours = 120 }, CallTune,
			[]string{"[queue] idle_reclaim_after", "[leases] idle_after"}, ""},
		{"overdue leases: signal", func(f *Findings) { f.Overdue = 20 }, CallTune, []string{"[leases] end_action"}, ""},
		{"waits with free GPUs: shorter batch limits", func(f *Findings) { f.WaitP95 = 3 * time.Hour }, CallTune, []string{"[leases] default_batch"}, ""},
		{"one person holds most: a quota", func(f *Findings) {
			f.WaitP95 = 2 * time.Hour
			f.FreeShare = 0.1
			f.TopUser = "dee"
			f.TopUserShare = 0.7
		}, CallTune, []string{"[queue] quotas"}, ""},
		{"one person a week", func(f *Findings) { f.UsersMaxWeek = 1 }, CallStay, nil, "at most 1 person a week"},
		{"both halves of the rule of thumb", func(f *Findings) { f.GPUs = 16; f.UsersMaxWeek = 8 }, CallSLURM, nil, "8 people in one week"},
		{"size and squatting", func(f *Findings) { f.GPUs = 24; f.SquattedShare = 0.06 }, CallSLURM, nil, "cgroups prevent it"},
		{"small but oversubscribed and gang-bound", func(f *Findings) {
			f.BusyShare, f.FreeShare, f.WaitP95, f.GangGPUShare, f.GangWaitP50 = 0.9, 0.05, 6*time.Hour, 0.4, 3*time.Hour
		}, CallSLURM, nil, "oversubscribed"},
		{"services hold most GPUs: told so", func(f *Findings) { f.Services, f.ServiceGPUs = 3, 5 }, CallStay, nil, "services hold 5 of the 8 GPUs (3 services"},
		{"one pressure on a small cluster stays", func(f *Findings) { f.BusyShare, f.WaitP95, f.FreeShare = 0.9, 6*time.Hour, 0.05 }, CallStay, nil, "oversubscribed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			tc.change(&f)
			v := Decide(f, lease.DefaultPolicy(), queue.SchedConfig{})
			if v.Call != tc.call {
				t.Errorf("call %s, want %s: %+v", v.Call, tc.call, v)
			}
			var keys []string
			for _, s := range v.Settings {
				keys = append(keys, s.Key)
			}
			if strings.Join(keys, ",") != strings.Join(tc.settings, ",") {
				t.Errorf("settings %v, want %v", keys, tc.settings)
			}
			if tc.reason != "" && !strings.Contains(strings.Join(v.Reasons, "\n"), tc.reason) {
				t.Errorf("reasons %q lack %q", v.Reasons, tc.reason)
			}
		})
	}
}

// Advice never moves a setting the wrong way: a team whose idle reclaim is
// already under the floor is not told to raise it (doctor suggested
// idle_reclaim_after = "10m" to a team at 3m).
func TestDecideNeverRaisesIdleReclaim(t *testing.T) {
	f := Findings{GPUs: 8, Nodes: 1, Users: 4, UsersMaxWeek: 4, Leases: 100, BusyShare: 0.5, FreeShare: 0.4, HeldIdleShare: 0.1, Coverage: 1, Window: DefaultWindow,
		WaitingIdleShare: 0.08, WaitingIdleGPUHours: 120}
	tests := []struct {
		name string
		now  time.Duration
		want string // "" when no idle_reclaim_after advice is due
	}{
		{"default 30m halves", 0, `"15m"`},
		{"1h halves", time.Hour, `"30m"`},
		{"15m stops at the floor", 15 * time.Minute, `"10m"`},
		{"10m is at the floor", 10 * time.Minute, ""},
		{"3m is under it", 3 * time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(f, lease.DefaultPolicy(), queue.SchedConfig{IdleReclaimAfter: tt.now})
			got := ""
			for _, s := range v.Settings {
				if s.Key == "[queue] idle_reclaim_after" {
					got = s.Value
				}
			}
			if got != tt.want {
				t.Errorf("idle_reclaim_after advice %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecideCaveats(t *testing.T) {
	v := Decide(Findings{Window: 3 * 24 * time.Hour, Leases: 3, Coverage: 0.1, Missing: []string{"n3"}}, lease.DefaultPolicy(), queue.SchedConfig{})
	all := strings.Join(v.Caveats, "\n")
	for _, want := range []string{"cover 10% of the window", "under a week", "no history from [n3]"} {
		if !strings.Contains(all, want) {
			t.Errorf("caveats %q lack %q", v.Caveats, want)
		}
	}
}

func healthy(name string) NodeHealth {
	return NodeHealth{Node: name, State: queue.NodeAlive, Reached: true, RTT: time.Millisecond, Report: &Report{
		Node: name, Version: "v1", Protocol: 2, Wall: t0, Cluster: ClusterFacts{Name: "lab", Encrypted: true, KeyID: "k1", GossipAddr: "10.0.0.1:7946"},
		Tmux: "/usr/bin/tmux", Backend: "nvml", DataDir: "/var/lib/dibs", DiskFree: 50 << 30, DiskTotal: 100 << 30,
	}}
}

// TestChecksFindEachFault plants one fault at a time and reads the line a
// person would see.
func TestChecksFindEachFault(t *testing.T) {
	tests := []struct {
		name   string
		fault  func(ns []NodeHealth)
		check  string
		status string
		detail string
		fix    string
	}{
		{"agent down", func(ns []NodeHealth) {
			ns[2] = NodeHealth{Node: "n3", State: queue.NodeDead, Since: t0.Add(-time.Hour)}
		}, "agents", Fail, "n3 is dead since", "start its agent on n3"},
		{"agent restarting", func(ns []NodeHealth) {
			ns[2] = NodeHealth{Node: "n3", State: queue.NodeRestarting, Since: t0.Add(-time.Minute)}
		}, "agents", Warn, "n3 is restarting since", "nothing, if it is being restarted or upgraded"},
		{"agent mute", func(ns []NodeHealth) {
			ns[2].Reached, ns[2].Report, ns[2].Error = false, nil, "n3 did not answer in time"
		}, "agents", Fail, "n3 is a member but did not answer", "gossip port is open"},
		{"older agent", func(ns []NodeHealth) {
			ns[1].Reached, ns[1].Report, ns[1].Error = false, nil, `unknown request "health" from n1: is it running another dibs version?`
		}, "agents", Fail, "n2 answers but not to `dibs doctor`", "install the same dibs on n2"},
		{"version skew", func(ns []NodeHealth) { ns[1].Report.Version = "v0.9" }, "version", Warn, "v0.9 (protocol 2) on n2", "install the same dibs"},
		{"clock ahead", func(ns []NodeHealth) { ns[2].Skew = 5 * time.Minute }, "clock", Fail, "n3's clock is 5m0s ahead of", "chrony"},
		{"clock a little behind", func(ns []NodeHealth) { ns[1].Skew = -3 * time.Second }, "clock", Warn, "3s behind", "NTP"},
		{"insecure", func(ns []NodeHealth) { ns[0].Report.Cluster.Encrypted = false }, "cluster", Warn, "without encryption", "dibs keygen"},
		{"another key", func(ns []NodeHealth) { ns[1].Report.Cluster.DecryptFailures = 12 }, "cluster", Warn, "dropped 12 gossip messages", "same /etc/dibs/cluster.key"},
		{"loopback advertised", func(ns []NodeHealth) { ns[0].Report.Cluster.GossipAddr = "127.0.0.1:7946" }, "ports", Fail, "n1 advertise a loopback", "advertise"},
		{"ssh on one node", func(ns []NodeHealth) { ns[0].Report.SSHAddr = ":2222" }, "ports", Warn, "SSH board is on for n1", "[ssh] listen"},
		{"no tmux", func(ns []NodeHealth) { ns[1].Report.Tmux, ns[1].Report.TmuxError = "", "tmux not found in PATH" }, "tmux", Fail, "n2 has no tmux", "apt-get install tmux"},
		{"nvidia-smi", func(ns []NodeHealth) { ns[2].Report.Backend = "nvidia-smi" }, "probe", Warn, "reads its GPUs with nvidia-smi", "NVML"},
		{"no local cores", func(ns []NodeHealth) { ns[1].Report.NoLocalCPUs = true }, "probe", Warn,
			"n2's GPUs report no local CPUs (via nvml): its sessions run on any core, and --cpus-per-gpu is refused there", "numactl -H"},
		{"sim", func(ns []NodeHealth) {
			ns[1].Report.Backend = "sim"
			ns[2].Report.Backend, ns[2].Report.BackendWhy = "sim", "--sim 4xH100"
		}, "probe", Warn, "the GPUs of n2, n3 are simulated (--sim 4xH100)", "drop --sim"},
		{"disk full", func(ns []NodeHealth) { ns[0].Report.DiskFree = 50 << 20 }, "disk", Fail, "n1 has 50 MiB free", "free space"},
		{"overdue", func(ns []NodeHealth) {
			ns[0].Report.Overdue = []LeaseFact{{Lease: "n1-7", User: "ana", GPUs: []int{0, 1}, For: 3 * time.Hour}}
		}, "leases", Warn, "lease n1-7 of ana (GPUs 0,1) is 3h past its end", "dibs release n1-7"},
		{"squatter", func(ns []NodeHealth) {
			ns[1].Report.Squatted = []SquatFact{{GPU: 3, Users: []string{"bo"}, PIDs: []int{4242}, For: 2 * time.Hour}}
		}, "leases", Warn, "GPU 3 on n2 (with no lease) has been squatted for 2h by bo (pid 4242)", "dibs adopt 4242"},
		{"stray session", func(ns []NodeHealth) {
			ns[2].Report.StraySessions = []SessionFact{{User: "cy", Session: "dibs-n3-4"}}
		}, "sessions", Warn, "cy's tmux session dibs-n3-4 on n3 runs without a lease", "tmux kill-session -t dibs-n3-4"},
		{"lost session", func(ns []NodeHealth) {
			ns[2].Report.Sessionless = []LeaseFact{{Lease: "n3-5", User: "cy", GPUs: []int{1}, Session: "dibs-n3-5"}}
		}, "sessions", Warn, "lease n3-5 of cy on n3 lost its session", "dibs release n3-5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := []NodeHealth{healthy("n1"), healthy("n2"), healthy("n3")}
			ns[0].Self = true
			tc.fault(ns)
			checks := Checks(ns, t0)
			var found bool
			for _, c := range checks {
				if c.Name == tc.check && c.Status == tc.status && strings.Contains(c.Detail, tc.detail) {
					found = true
					if !strings.Contains(c.Fix, tc.fix) {
						t.Errorf("fix %q lacks %q", c.Fix, tc.fix)
					}
				} else if c.Status != OK && c.Name != tc.check {
					t.Errorf("unrelated check %s %s: %s", c.Name, c.Status, c.Detail)
				}
			}
			if !found {
				t.Errorf("no %s %s check saying %q in %+v", tc.status, tc.check, tc.detail, checks)
			}
		})
	}
}

func TestChecksAllGood(t *testing.T) {
	checks := Checks([]NodeHealth{healthy("n1"), healthy("n2")}, t0)
	var names []string
	for _, c := range checks {
		if c.Status != OK {
			t.Errorf("healthy cluster: %+v", c)
		}
		names = append(names, c.Name)
	}
	if strings.Join(names, " ") != strings.Join(CheckNames, " ") {
		t.Errorf("checks %v, want one of each of %v in order", names, CheckNames)
	}
}

func TestReportValidate(t *testing.T) {
	r := *healthy("n1").Report
	if err := r.Validate(); err != nil {
		t.Fatalf("a good report refused: %v", err)
	}
	for name, bad := range map[string]func(r *Report){
		"control character":  func(r *Report) { r.Version = "v1\x1b[2J" },
		"long field":         func(r *Report) { r.BackendWhy = strings.Repeat("x", 600) },
		"bad lease":          func(r *Report) { r.Overdue = []LeaseFact{{Lease: "nope", User: "ana"}} },
		"bad squatter gpu":   func(r *Report) { r.Squatted = []SquatFact{{GPU: -1}} },
		"bad session user":   func(r *Report) { r.StraySessions = []SessionFact{{User: "-rf", Session: "x"}} },
		"bad node name":      func(r *Report) { r.Node = "../x" },
		"too many squatters": func(r *Report) { r.Squatted = make([]SquatFact, maxFacts+1) },
	} {
		x := r
		bad(&x)
		if x.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
