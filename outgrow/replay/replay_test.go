package replay

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

var t0 = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// tiny is the trace worked by hand in TestTinyByHand: one node of two
// GPUs; ana's session computes an hour and sits idle until 5 h; bo queues
// a two-GPU run at 30m; cy a short one-GPU run at 40m.
func tiny() Trace {
	return Trace{
		Nodes: []NodeSpec{{Name: "n1", Spec: "2xL40S"}},
		Start: t0, End: t0.Add(8 * time.Hour),
		Requests: []Request{
			{ID: "r1", At: t0, User: "ana", GPUs: 1, Kind: lease.KindInteractive, Work: time.Hour, Hold: 5 * time.Hour, Limit: 2 * time.Hour},
			{ID: "r2", At: t0.Add(30 * time.Minute), User: "bo", GPUs: 2, Kind: lease.KindBatch, Work: 2 * time.Hour, Limit: 3 * time.Hour, Via: ViaQueue},
			{ID: "r3", At: t0.Add(40 * time.Minute), User: "cy", GPUs: 1, Kind: lease.KindBatch, Work: 30 * time.Minute, Limit: time.Hour, Via: ViaQueue},
		},
	}
}

type want struct {
	starts             map[string]time.Duration // request → start, from t0
	gpus               map[string][]int
	p50, p95, max      time.Duration
	busy, heldIdle     float64
	util, jain, served float64
	reclaimed, killed  int
}

// TestTinyByHand checks every figure of the tiny trace against the
// numbers worked out by hand (docs/doctor.md walks through them).
//
// dibs: r1 claims GPU 0 at once. r2 waits (one GPU free) and is the head,
// its shadow r1's limit at 2h. r3 fits before the shadow (1h ≤ 1h20m) and
// backfills GPU 1 at 40m, done at 1h10m. r1 goes quiet at 1h; at 1h30m it
// has been idle the 30m of idle_reclaim_after while r2 waits, so it is
// reclaimed and ends after the 2m grace; r2 starts at 1h32m on both GPUs.
//
// slurm: r3 backfills the same way; r1 ends at its 2h limit (warn is not
// SLURM's way); r2 starts at 2h.
//
// slack: r3 takes the free GPU when it arrives; r2 looks every 10m and
// finds two free GPUs only when ana lets go at 5h.
func TestTinyByHand(t *testing.T) {
	tests := []struct {
		p Policy
		w want
	}{
		{PolicyDibs, want{
			starts: map[string]time.Duration{"r1": 0, "r2": 92 * time.Minute, "r3": 40 * time.Minute},
			gpus:   map[string][]int{"r1": {0}, "r2": {0, 1}, "r3": {1}},
			p50:    0, p95: 62 * time.Minute, max: 62 * time.Minute,
			busy: 1 + 0.5 + 4, heldIdle: 32.0 / 60,
			util: 5.5 / 16, jain: jain(1, 4, 0.5), served: 1, reclaimed: 1,
		}},
		{PolicySLURM, want{
			starts: map[string]time.Duration{"r1": 0, "r2": 2 * time.Hour, "r3": 40 * time.Minute},
			gpus:   map[string][]int{"r1": {0}, "r2": {0, 1}, "r3": {1}},
			p50:    0, p95: 90 * time.Minute, max: 90 * time.Minute,
			busy: 5.5, heldIdle: 1,
			util: 5.5 / 16, jain: jain(1, 4, 0.5), served: 1,
		}},
		{PolicySlack, want{
			starts: map[string]time.Duration{"r1": 0, "r2": 5 * time.Hour, "r3": 40 * time.Minute},
			gpus:   map[string][]int{"r1": {0}, "r2": {0, 1}, "r3": {1}},
			p50:    0, p95: 270 * time.Minute, max: 270 * time.Minute,
			busy: 5.5, heldIdle: 4,
			util: 5.5 / 16, jain: jain(1, 4, 0.5), served: 1,
		}},
	}
	for _, tc := range tests {
		t.Run(string(tc.p), func(t *testing.T) {
			r, err := Run(tiny(), tc.p, Config{ForgetShare: -1, RetryJitter: -1})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]time.Duration{}
			gotGPUs := map[string][]int{}
			for _, s := range r.Steps {
				if s.Kind == StepStart {
					got[s.Request] = s.At.Sub(t0)
					gotGPUs[s.Request] = s.Ranks[0].GPUs
				}
			}
			for id, w := range tc.w.starts {
				if got[id] != w {
					t.Errorf("%s started at +%s, want +%s", id, got[id], w)
				}
				if g := gotGPUs[id]; !equalInts(g, tc.w.gpus[id]) {
					t.Errorf("%s got GPUs %v, want %v", id, g, tc.w.gpus[id])
				}
			}
			w := tc.w
			if r.WaitP50 != w.p50 || r.WaitP95 != w.p95 || r.WaitMax != w.max {
				t.Errorf("waits p50/p95/max = %s/%s/%s, want %s/%s/%s", r.WaitP50, r.WaitP95, r.WaitMax, w.p50, w.p95, w.max)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"busy GPU-hours", r.BusyGPUHours, w.busy},
				{"held-idle GPU-hours", r.HeldIdleGPUHours, w.heldIdle},
				{"free GPU-hours", r.FreeGPUHours, 16 - w.busy - w.heldIdle},
				{"utilisation", r.Utilisation, w.util},
				{"Jain", r.Fairness, w.jain},
				{"served", r.Served, w.served},
			} {
				if math.Abs(f.got-f.want) > 1e-9 {
					t.Errorf("%s = %.6f, want %.6f", f.name, f.got, f.want)
				}
			}
			if r.Reclaimed != w.reclaimed || r.Killed != w.killed || r.NeverStarted != 0 || r.Started != 3 {
				t.Errorf("reclaimed %d killed %d never %d started %d, want %d %d 0 3", r.Reclaimed, r.Killed, r.NeverStarted, r.Started, w.reclaimed, w.killed)
			}
		})
	}
}

func jain(xs ...float64) float64 {
	var s, q float64
	for _, x := range xs {
		s += x
		q += x * x
	}
	return s * s / (float64(len(xs)) * q)
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSLURMKillsAtLimit: work longer than its limit is cut in SLURM and
// left to run (overdue, end action warn) in dibs.
func TestSLURMKillsAtLimit(t *testing.T) {
	tr := Trace{Nodes: []NodeSpec{{Name: "n1", Spec: "2xL40S"}}, Start: t0, End: t0.Add(6 * time.Hour),
		Requests: []Request{{ID: "long", At: t0, User: "ana", GPUs: 1, Kind: lease.KindInteractive, Work: 3 * time.Hour, Limit: time.Hour}}}
	s, _ := Run(tr, PolicySLURM, Config{})
	d, _ := Run(tr, PolicyDibs, Config{})
	if s.Killed != 1 || s.Served != 0 || math.Abs(s.BusyGPUHours-1) > 1e-9 {
		t.Errorf("slurm: killed %d served %.2f busy %.2f, want 1, 0, 1", s.Killed, s.Served, s.BusyGPUHours)
	}
	if d.Killed != 0 || d.Served != 1 || math.Abs(d.BusyGPUHours-3) > 1e-9 {
		t.Errorf("dibs: killed %d served %.2f busy %.2f, want 0, 1, 3", d.Killed, d.Served, d.BusyGPUHours)
	}
}

// TestSlackGivesUp: a request that never finds its GPUs free is given up
// after GiveUpAfter, counts as never started, and its wait is that long.
func TestSlackGivesUp(t *testing.T) {
	tr := Trace{Nodes: []NodeSpec{{Name: "n1", Spec: "2xL40S"}}, Start: t0, End: t0.Add(48 * time.Hour),
		Requests: []Request{
			{ID: "hog", At: t0, User: "ana", GPUs: 1, Work: time.Hour, Hold: 40 * time.Hour},
			{ID: "both", At: t0.Add(time.Minute), User: "bo", GPUs: 2, Kind: lease.KindBatch, Work: time.Hour},
		}}
	r, err := Run(tr, PolicySlack, Config{ForgetShare: -1, GiveUpAfter: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r.NeverStarted != 1 || r.WaitMax != 6*time.Hour {
		t.Errorf("never started %d, max wait %s; want 1 and 6h", r.NeverStarted, r.WaitMax)
	}
}

// TestDeterministic: the same trace and seed give the same figures.
func TestDeterministic(t *testing.T) {
	w := Week(1)
	a, err := Run(w, PolicySlack, Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(w, PolicySlack, Config{Seed: 7})
	if a.WaitP95 != b.WaitP95 || a.BusyGPUHours != b.BusyGPUHours || a.Forgot != b.Forgot || len(a.Steps) != len(b.Steps) {
		t.Errorf("two replays of the same trace and seed differ: %+v vs %+v", a, b)
	}
}

func TestTraceRoundTrip(t *testing.T) {
	var b bytes.Buffer
	in := tiny()
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(&b)
	if err != nil {
		t.Fatalf("read back: %v\n%s", err, b.String())
	}
	if len(out.Requests) != 3 || out.Requests[0] != in.Requests[0] || out.Requests[1] != in.Requests[1] || !out.End.Equal(in.End) {
		t.Errorf("round trip changed the trace:\n got %+v\nwant %+v", out, in)
	}
}

func TestReadRefusesWithTheLine(t *testing.T) {
	head := `{"trace":{"nodes":[{"name":"n1","spec":"2xL40S"}]}}` + "\n"
	tests := []struct{ name, in, want string }{
		{"no header", `{"id":"a"}`, "line 1: the first line must be"},
		{"bad spec", `{"trace":{"nodes":[{"name":"n1","spec":"9xNOPE"}]}}`, "trace node n1"},
		{"no work", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1}`, "line 2: request \"a\" has no work"},
		{"bad duration", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"work":"soon"}`, "line 2: request \"a\" work"},
		{"unknown field", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"work":"1h","colour":"red"}`, "line 2: json: unknown field"},
		{"duplicate", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"work":"1h"}` + "\n" + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"work":"1h"}`, "line 3: request id \"a\" was already used on line 2"},
		{"hold under work", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"work":"2h","hold":"1h"}`, "holds its GPUs (1h) for less than its work (2h)"},
		{"gang claim", head + `{"id":"a","at":"2026-01-05T09:00:00Z","user":"ana","nodes":2,"gpus":1,"work":"2h","via":"claim"}`, "gangs queue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Read = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWeekTellsThePoliciesApart holds the story docs/doctor.md tells of
// the bundled week: without a tool, GPUs sit held and idle and people wait
// hours; a batch scheduler cuts work at its limits; dibs does neither
// (it ends a run past its limit only when someone waits for its GPUs).
func TestWeekTellsThePoliciesApart(t *testing.T) {
	w := Week(1)
	res := map[Policy]Result{}
	for _, p := range Policies() {
		r, err := Run(w, p, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		res[p] = r
	}
	d, s, q := res[PolicyDibs], res[PolicySlack], res[PolicySLURM]
	if !(s.HeldIdleGPUHours > 5*d.HeldIdleGPUHours) {
		t.Errorf("held-idle GPU-hours: slack %.0f, dibs %.0f; want slack's several times dibs's", s.HeldIdleGPUHours, d.HeldIdleGPUHours)
	}
	if !(s.WaitP95 > 3*d.WaitP95) {
		t.Errorf("p95 wait: slack %s, dibs %s; want slack's several times dibs's", s.WaitP95, d.WaitP95)
	}
	// dibs cuts a run only when it is past its limit and someone waits for
	// its GPUs (issue 23); a batch scheduler cuts every one at its limit.
	if 10*d.Killed > q.Killed || q.Killed == 0 || q.Served >= d.Served {
		t.Errorf("killed at the limit: dibs %d, slurm %d (served %.3f vs %.3f); want slurm to cut ten times the work dibs does", d.Killed, q.Killed, q.Served, d.Served)
	}
	if d.Reclaimed == 0 {
		t.Errorf("dibs reclaimed no idle lease in a week of forgotten sessions")
	}
	if s.Forgot == 0 || s.NeverStarted == 0 {
		t.Errorf("slack: %d forgot, %d never started; the week should show both", s.Forgot, s.NeverStarted)
	}
	for p, r := range res {
		if sum := r.BusyGPUHours + r.HeldIdleGPUHours + r.FreeGPUHours; math.Abs(sum-float64(r.GPUs)*168) > 1e-6 {
			t.Errorf("%s: busy+idle+free = %.3f GPU-hours, want %d GPUs × 168 h", p, sum, r.GPUs)
		}
	}
}

func TestExactDuration(t *testing.T) {
	for _, d := range []time.Duration{90 * time.Minute, 25*time.Hour + 37*time.Minute, time.Hour + 5*time.Second, 45 * time.Second, 7 * 24 * time.Hour} {
		s := exactDuration(d)
		back, err := words.ParseDuration(s)
		if err != nil || back != d {
			t.Errorf("exactDuration(%s) = %q, reads back as %s (%v)", d, s, back, err)
		}
	}
}
