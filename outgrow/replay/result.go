package replay

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Result is what one policy cost the team over the trace's window.
type Result struct {
	Policy Policy    `json:"policy"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	GPUs   int       `json:"gpus"`
	// GPU-hours over the window, by what the GPUs did: computing, held by
	// someone but idle, free. They add up to GPUs × the window.
	BusyGPUHours     float64 `json:"busy_gpu_hours"`
	HeldIdleGPUHours float64 `json:"held_idle_gpu_hours"`
	FreeGPUHours     float64 `json:"free_gpu_hours"`
	// Utilisation is BusyGPUHours over all GPU-hours of the window.
	Utilisation float64 `json:"utilisation"`
	// Waits from asking to starting. A request that never started counts
	// with the time it waited until the replay ended (or its owner gave
	// up), so a policy cannot look fast by never starting work.
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP95 time.Duration `json:"wait_p95_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	// Fairness is Jain's index of the GPU-hours of work each user got done
	// in the window (held-but-idle hours do not count: holding a GPU is not
	// using it): 1 when everyone got the same, 1/users when one got all.
	Fairness float64 `json:"jain_fairness"`
	// Served is the share of the GPU-hours of work asked for that ran to
	// its end.
	Served float64 `json:"served"`
	// Requests, Started, NeverStarted count requests; Killed counts work
	// cut short by a time limit, Reclaimed leases taken back idle, Forgot
	// Slack users who did not say they were done.
	Requests     int `json:"requests"`
	Started      int `json:"started"`
	NeverStarted int `json:"never_started"`
	Killed       int `json:"killed_at_limit"`
	Reclaimed    int `json:"reclaimed_idle"`
	Forgot       int `json:"forgot_to_release,omitempty"`
	// PerUser is each user's busy GPU-hours in the window (what Fairness
	// is computed on), HeldPerUser their held GPU-hours.
	PerUser     map[string]float64 `json:"per_user_gpu_hours"`
	HeldPerUser map[string]float64 `json:"per_user_held_gpu_hours"`
	// Steps is the replay's story, in order (for tests); Ledger the
	// leases it ended, as agents would have written them (what `dibs
	// doctor` would read of the replayed week).
	Steps  []Step              `json:"-"`
	Ledger []lease.LedgerEntry `json:"-"`
}

func hours(d time.Duration) float64 { return d.Hours() }

// overlap is the part of [a, b) inside [ws, we).
func overlap(a, b, ws, we time.Time) time.Duration {
	if a.Before(ws) {
		a = ws
	}
	if b.After(we) {
		b = we
	}
	if !b.After(a) {
		return 0
	}
	return b.Sub(a)
}

func (s *sim) result(t Trace, ws, we time.Time) Result {
	res := Result{Policy: s.p, Start: ws, End: we, Requests: len(s.jobs), PerUser: map[string]float64{}, HeldPerUser: map[string]float64{}, Steps: s.steps, Ledger: s.ledger}
	for _, n := range s.nodes {
		res.GPUs += len(n.snap.GPUs)
	}
	capacity := float64(res.GPUs) * hours(we.Sub(ws))
	var waits []time.Duration
	var asked, done float64
	for _, j := range s.jobs {
		res.PerUser[j.r.User] += 0
		res.HeldPerUser[j.r.User] += 0
		work := float64(j.r.Nodes*j.r.GPUs) * hours(j.r.Work)
		asked += work
		if !j.started {
			res.NeverStarted++
			stop := s.horizon
			if j.gaveUp && j.r.At.Add(s.cfg.GiveUpAfter).Before(stop) {
				stop = j.r.At.Add(s.cfg.GiveUpAfter)
			}
			waits = append(waits, max(stop.Sub(j.r.At), 0))
			continue
		}
		res.Started++
		waits = append(waits, j.start.Sub(j.r.At))
		end := j.end
		if !j.ended {
			end = s.horizon
		}
		n := float64(j.r.Nodes * j.r.GPUs)
		busy := n * hours(overlap(j.start, minTime(j.workEnd, end), ws, we))
		held := n * hours(overlap(j.start, end, ws, we))
		res.BusyGPUHours += busy
		res.HeldIdleGPUHours += held - busy
		res.PerUser[j.r.User] += busy
		res.HeldPerUser[j.r.User] += held
		if j.ended && !j.killed {
			done += work
		}
		if j.killed {
			res.Killed++
		}
		if j.reclaimed && j.reclaimWhy == lease.PreemptIdle {
			res.Reclaimed++
		}
		if j.forgot {
			res.Forgot++
		}
	}
	res.FreeGPUHours = max(capacity-res.BusyGPUHours-res.HeldIdleGPUHours, 0)
	if capacity > 0 {
		res.Utilisation = res.BusyGPUHours / capacity
	}
	if asked > 0 {
		res.Served = done / asked
	}
	res.WaitP50, res.WaitP95, res.WaitMax = Percentile(waits, 0.5), Percentile(waits, 0.95), Percentile(waits, 1)
	res.Fairness = Jain(res.PerUser)
	return res
}

// Percentile is the nearest-rank p-quantile of ds (p in (0, 1]); 0 for
// none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one has everything; 1 for none, or when all are zero.
func Jain(xs map[string]float64) float64 {
	keys := slices.SortedFunc(func(yield func(string) bool) {
		for k := range xs {
			if !yield(k) {
				return
			}
		}
	}, cmp.Compare[string])
	var sum, sq float64
	for _, k := range keys {
		sum += xs[k]
		sq += xs[k] * xs[k]
	}
	if len(keys) == 0 || sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(keys)) * sq)
}
