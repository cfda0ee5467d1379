package api

import (
	"context"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// DoctorRequest asks for `dibs doctor`: the health checks and, unless
// SkipHistory, the figures and verdict over Window (default 30d). With
// Ledger the report carries every node's ledger entries and the running
// leases too, for `dibs replay` of the cluster's own history.
type DoctorRequest struct {
	Window      string `json:"window,omitempty"`
	SkipHistory bool   `json:"skip_history,omitempty"`
	Ledger      bool   `json:"ledger,omitempty"`
}

// DoctorReport is `dibs doctor --json`.
type DoctorReport struct {
	// Self is the node whose agent gathered it.
	Self        string    `json:"self"`
	GeneratedAt time.Time `json:"generated_at"`
	// Nodes are every node as the doctor found it; Checks the health
	// checks, in doctor.CheckNames order.
	Nodes  []doctor.NodeHealth `json:"nodes"`
	Checks []doctor.Check      `json:"checks"`
	// Findings and Verdict answer "have we outgrown dibs?" (absent with
	// skip_history).
	Findings *doctor.Findings `json:"findings,omitempty"`
	Verdict  *doctor.Verdict  `json:"verdict,omitempty"`
	// Config is the answering agent's lease and queue settings, what the
	// verdict tunes and `dibs export slurm` carries over.
	Config DoctorConfig `json:"config"`
	// Ledger and Running are there when the request asked for the ledger.
	Ledger  []lease.LedgerEntry `json:"ledger,omitempty"`
	Running []lease.Lease       `json:"running,omitempty"`
}

// DoctorConfig is an agent's lease policy and queue settings. Durations
// are in nanoseconds, as elsewhere in this API.
type DoctorConfig struct {
	DefaultInteractive time.Duration      `json:"default_interactive_ns"`
	DefaultBatch       time.Duration      `json:"default_batch_ns"`
	MaxInteractive     time.Duration      `json:"max_interactive_ns"`
	MaxBatch           time.Duration      `json:"max_batch_ns"`
	EndAction          lease.EndAction    `json:"end_action"`
	SignalGrace        time.Duration      `json:"signal_grace_ns"`
	IdleAfter          time.Duration      `json:"idle_after_ns"`
	IdleUtilPct        int                `json:"idle_util_pct"`
	PreemptGrace       time.Duration      `json:"preempt_grace_ns"`
	HalfLife           time.Duration      `json:"half_life_ns"`
	WeightFairShare    float64            `json:"weight_fair_share"`
	WeightAge          float64            `json:"weight_age"`
	MaxAge             time.Duration      `json:"max_age_ns"`
	IdleReclaimAfter   time.Duration      `json:"idle_reclaim_after_ns"`
	Shares             map[string]float64 `json:"shares,omitempty"`
	Quotas             map[string]int     `json:"quotas,omitempty"`
	// Pools are the limits of the pools that have any, by tag: what
	// `dibs export slurm` turns into partitions.
	Pools map[string]PoolConfig `json:"pools,omitempty"`
}

// PoolConfig is one pool's limits (lease.PoolLimits) on the wire.
type PoolConfig struct {
	MaxTime time.Duration `json:"max_time_ns,omitempty"`
	Users   []string      `json:"users,omitempty"`
	MaxGPUs int           `json:"max_gpus,omitempty"`
}

// ConfigOf is the API's view of a policy and queue settings.
func ConfigOf(p lease.Policy, s queue.SchedConfig) DoctorConfig {
	s = s.WithDefaults()
	return DoctorConfig{
		DefaultInteractive: p.DefaultInteractive, DefaultBatch: p.DefaultBatch, MaxInteractive: p.MaxInteractive, MaxBatch: p.MaxBatch,
		EndAction: p.EndAction, SignalGrace: p.SignalGrace, IdleAfter: p.IdleAfter, IdleUtilPct: p.IdleUtilPct, PreemptGrace: p.PreemptGrace,
		HalfLife: s.HalfLife, WeightFairShare: s.WeightFairShare, WeightAge: s.WeightAge, MaxAge: s.MaxAge, IdleReclaimAfter: s.IdleReclaimAfter,
		Shares: s.Shares, Quotas: s.Quotas, Pools: poolsOf(p.Pools),
	}
}

func poolsOf(p lease.Pools) map[string]PoolConfig {
	if len(p) == 0 {
		return nil
	}
	out := make(map[string]PoolConfig, len(p))
	for t, pl := range p {
		out[t] = PoolConfig{MaxTime: pl.MaxTime, Users: pl.Users, MaxGPUs: pl.MaxGPUs}
	}
	return out
}

// Policy is the lease policy back (what the agent enforces; a report
// from an older agent without it gives lease.DefaultPolicy).
func (c DoctorConfig) Policy() lease.Policy {
	p := lease.Policy{
		DefaultInteractive: c.DefaultInteractive, DefaultBatch: c.DefaultBatch, MaxInteractive: c.MaxInteractive, MaxBatch: c.MaxBatch,
		EndAction: c.EndAction, SignalGrace: c.SignalGrace, IdleAfter: c.IdleAfter, IdleUtilPct: c.IdleUtilPct, PreemptGrace: c.PreemptGrace,
	}
	for t, pc := range c.Pools {
		if p.Pools == nil {
			p.Pools = lease.Pools{}
		}
		p.Pools[t] = lease.PoolLimits{MaxTime: pc.MaxTime, Users: pc.Users, MaxGPUs: pc.MaxGPUs}
	}
	if p.Validate() != nil {
		d := lease.DefaultPolicy()
		d.Pools = p.Pools
		return d
	}
	return p
}

// Sched is the queue settings back.
func (c DoctorConfig) Sched() queue.SchedConfig {
	return queue.SchedConfig{
		HalfLife: c.HalfLife, WeightFairShare: c.WeightFairShare, WeightAge: c.WeightAge, MaxAge: c.MaxAge,
		IdleReclaimAfter: c.IdleReclaimAfter, PreemptGrace: c.PreemptGrace, Shares: c.Shares, Quotas: c.Quotas,
	}.WithDefaults()
}

// Doctor asks the agent for `dibs doctor`.
func (c *Client) Doctor(ctx context.Context, req DoctorRequest) (DoctorReport, error) {
	var r DoctorReport
	err := c.do(ctx, "POST", "/v1/doctor", req, &r)
	return r, err
}
