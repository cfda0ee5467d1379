package doctor

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// The thresholds of the verdict. docs/doctor.md says where each comes from
// and what would move it; they are judgement, not measurement.
const (
	// ScaleGPUs and ScaleUsers are the rule of thumb: around 16 GPUs and 8
	// people a batch scheduler starts to pay for the hours it costs to run.
	ScaleGPUs  = 16
	ScaleUsers = 8
	// Pressure dibs cannot relieve by tuning. Oversubscribed: the GPUs
	// compute BusyHigh of the time and queued work still waits WaitHigh
	// (p95). Enforcement: SquatHigh of GPU-time has someone's process
	// without a lease — dibs shows it, cgroups would prevent it. Gangs:
	// multi-node runs hold GangShareHigh of the GPU-hours and wait
	// GangWaitHigh (median) for all their ranks.
	BusyHigh      = 0.80
	WaitHigh      = 4 * time.Hour
	SquatHigh     = 0.05
	GangShareHigh = 0.25
	GangWaitHigh  = 2 * time.Hour
	// What a setting of dibs fixes. Idle: GPUs held but idle IdleHigh of
	// the time, or work waited while GPUs sat held and idle WaitingIdleHigh
	// of the time. Overdue: OverdueHigh of leases ended past their limit.
	// Fragmentation: queued work waits WaitSome (p95) while FreeSome of the
	// GPU-time is free. Dominance: one person holds TopShareHigh of the
	// GPU-hours of three or more while work waits WaitSome.
	IdleHigh        = 0.20
	WaitingIdleHigh = 0.05
	OverdueHigh     = 0.10
	WaitSome        = time.Hour
	FreeSome        = 0.30
	TopShareHigh    = 0.50
	// ServiceShareHigh: services (always on) hold this share of the GPUs
	// or more: the cluster is mostly a serving fleet.
	ServiceShareHigh = 0.50
	SquatSome        = 0.01
	// The data the verdict wants before it is sure: samples over half the
	// window, and a week of history.
	MinCoverage = 0.5
	MinHistory  = 7 * 24 * time.Hour
)

// The verdicts.
const (
	CallStay  = "stay"
	CallTune  = "tune"
	CallSLURM = "slurm"
)

// Setting is one change to the agents' config the verdict suggests.
type Setting struct {
	// Key is the config key (docs/operations.md), Value what to set it to.
	Key   string `json:"key"`
	Value string `json:"value"`
	Why   string `json:"why"`
}

// Verdict answers "have we outgrown dibs?".
type Verdict struct {
	Call string `json:"call"`
	// Summary is the answer in one line.
	Summary string `json:"summary"`
	// Reasons are the findings that decided it, each with its threshold.
	Reasons  []string  `json:"reasons"`
	Settings []Setting `json:"settings,omitempty"`
	// Caveats say what the data could not cover.
	Caveats []string `json:"caveats,omitempty"`
}

// Decide turns the findings into a verdict, given the config the agents
// run with (for what to tune). Move to SLURM when the team is past both
// halves of the rule of thumb, or past one with pressure that tuning
// cannot relieve, or under two such pressures at any size; else tune dibs
// when a setting would fix what the figures show; else stay.
func Decide(f Findings, p lease.Policy, s queue.SchedConfig) Verdict {
	s = s.WithDefaults()
	var v Verdict
	var size, pressure []string
	if f.GPUs >= ScaleGPUs {
		size = append(size, fmt.Sprintf("%d GPUs (rule of thumb: a scheduler starts to pay around %d)", f.GPUs, ScaleGPUs))
	}
	if f.UsersMaxWeek >= ScaleUsers {
		size = append(size, fmt.Sprintf("%s in one week (rule of thumb: around %d)", people(f.UsersMaxWeek), ScaleUsers))
	}
	if f.BusyShare >= BusyHigh && f.WaitP95 >= WaitHigh {
		pressure = append(pressure, fmt.Sprintf("oversubscribed: GPUs busy %s of the time and queued work waits %s (p95) — over %s and %s; tuning moves work around, it does not add GPUs",
			pct(f.BusyShare), words.FormatDuration(f.WaitP95), pct(BusyHigh), words.FormatDuration(WaitHigh)))
	}
	if f.SquattedShare >= SquatHigh {
		pressure = append(pressure, fmt.Sprintf("squatting: %s of GPU-time (%.0f GPU-hours) had someone's process without a lease, over %s; dibs only shows it, SLURM's cgroups prevent it",
			pct(f.SquattedShare), f.SquattedGPUHours, pct(SquatHigh)))
	}
	if f.GangGPUShare >= GangShareHigh && f.GangWaitP50 >= GangWaitHigh {
		pressure = append(pressure, fmt.Sprintf("gangs: multi-node runs hold %s of the GPU-hours and wait %s (median) for all their ranks, over %s and %s",
			pct(f.GangGPUShare), words.FormatDuration(f.GangWaitP50), pct(GangShareHigh), words.FormatDuration(GangWaitHigh)))
	}

	// What a setting would fix.
	if f.HeldIdleShare >= IdleHigh || f.WaitingIdleShare >= WaitingIdleHigh {
		// Advice only ever moves a setting the way that helps: halve the
		// reclaim delay down to a floor, never raise it (a team at 3m is
		// not told 10m).
		cur := s.WithDefaults().IdleReclaimAfter
		next := max(cur/2, 10*time.Minute)
		if next < cur {
			v.Settings = append(v.Settings, Setting{Key: "[queue] idle_reclaim_after", Value: quote(words.FormatDuration(next)),
				Why: fmt.Sprintf("GPUs sat held but idle %s of the time, %s of it while work waited (%.0f GPU-hours)", pct(f.HeldIdleShare), pct(f.WaitingIdleShare), f.WaitingIdleGPUHours)})
		} else {
			next = cur
		}
		if p.IdleAfter > next {
			v.Settings = append(v.Settings, Setting{Key: "[leases] idle_after", Value: quote(words.FormatDuration(next)), Why: "so the board flags those GPUs as soon as they can be reclaimed"})
		}
	}
	if f.Leases > 0 && float64(f.Overdue)/float64(f.Leases) >= OverdueHigh && p.EndAction == lease.ActionWarn {
		v.Settings = append(v.Settings, Setting{Key: "[leases] end_action", Value: quote(string(lease.ActionSignal)),
			Why: fmt.Sprintf("%d of %d leases ended past their time limit; with warn they end only once someone waits for their GPUs", f.Overdue, f.Leases)})
	}
	if f.WaitP95 >= WaitSome && f.FreeShare >= FreeSome && p.DefaultBatch > 8*time.Hour {
		v.Settings = append(v.Settings, Setting{Key: "[leases] default_batch", Value: quote("8h"),
			Why: fmt.Sprintf("queued work waits %s (p95) while %s of GPU-time is free: shorter limits let the queue backfill around the big requests", words.FormatDuration(f.WaitP95), pct(f.FreeShare))})
	}
	if f.TopUserShare >= TopShareHigh && f.Users >= 3 && f.WaitP95 >= WaitSome && len(s.Quotas) == 0 {
		v.Settings = append(v.Settings, Setting{Key: "[queue] quotas", Value: fmt.Sprintf("{ %s = %d }", f.TopUser, max(f.GPUs/2, 1)),
			Why: fmt.Sprintf("%s held %s of the GPU-hours while others waited %s (p95): a quota lets them borrow the rest, preemptibly", f.TopUser, pct(f.TopUserShare), words.FormatDuration(f.WaitP95))})
	}
	if f.GPUs > 0 && float64(f.ServiceGPUs)/float64(f.GPUs) >= ServiceShareHigh {
		v.Reasons = append(v.Reasons, fmt.Sprintf("services hold %d of the %d GPUs (%d services, %s or more): an always-on serving fleet is what Kubernetes is for — keep dibs for training and move the services there",
			f.ServiceGPUs, f.GPUs, f.Services, pct(ServiceShareHigh)))
	}
	if f.SquattedShare >= SquatSome && f.SquattedShare < SquatHigh {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%s of GPU-time had processes without a lease (%.0f GPU-hours): ask people to claim first, or take a running job into a lease with `dibs adopt PID`", pct(f.SquattedShare), f.SquattedGPUHours))
	}

	switch {
	case len(size) == 2 || len(size) >= 1 && len(pressure) >= 1 || len(pressure) >= 2:
		v.Call = CallSLURM
		v.Summary = "`dibs export slurm` writes its config for this cluster; docs/slurm.md walks through the move"
		v.Reasons = append(append(size, pressure...), v.Reasons...)
	case len(v.Settings) > 0:
		v.Call = CallTune
		v.Summary = fmt.Sprintf("%d setting(s) below would fix what the figures show", len(v.Settings))
		v.Reasons = append(append(size, pressure...), v.Reasons...)
	default:
		v.Call = CallStay
		v.Summary = "dibs fits this team; nothing in the figures needs a scheduler or a setting"
		if len(pressure) > 0 {
			v.Summary = "at this size a scheduler would not relieve what the figures show (below); more GPUs, or shorter holds, would"
		}
		if f.Leases == 0 && f.Coverage < MinCoverage {
			v.Summary = "too little history to judge yet: ask again once the team has used dibs for a week or two"
		}
		v.Reasons = append(append(size, pressure...), v.Reasons...)
		if len(size) > 0 {
			v.Reasons = append(v.Reasons, "size alone does not call for a scheduler: nothing shows the pressure it would relieve")
		}
	}
	if len(v.Reasons) == 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d GPUs, at most %s a week, busy %s, queue wait %s (p95): under every threshold", f.GPUs, people(f.UsersMaxWeek), pct(f.BusyShare), words.FormatDuration(f.WaitP95)))
	}
	if f.Coverage < MinCoverage {
		v.Caveats = append(v.Caveats, fmt.Sprintf("the agents' samples cover %s of the window (%s): busy, idle and squatted figures are partial — they start when the agents run a dibs that samples, and stop while agents are down",
			pct(f.Coverage), words.FormatDuration(f.Sampled.Round(time.Minute))))
	}
	if f.Leases == 0 {
		v.Caveats = append(v.Caveats, "the ledger holds no lease in the window: nothing to judge yet")
	} else if f.Window < MinHistory {
		v.Caveats = append(v.Caveats, fmt.Sprintf("a window of %s is under a week: weekly patterns are not in it", words.FormatDuration(f.Window)))
	}
	if len(f.Missing) > 0 {
		v.Caveats = append(v.Caveats, fmt.Sprintf("no history from %v: their leases and samples are left out", f.Missing))
	}
	return v
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func quote(s string) string { return `"` + s + `"` }

// people is "1 person" or "N people".
func people(n int) string {
	if n == 1 {
		return "1 person"
	}
	return fmt.Sprintf("%d people", n)
}
