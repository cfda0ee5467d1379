package api

import (
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/runrecord"
)

// HistoryRequest is `dibs history`'s question: the filter each node
// applies to its own ledger. A zero Since means the default window
// (lease.DefaultHistoryWindow); one run (ID) is looked for as far back as
// the nodes keep runs one by one.
type HistoryRequest struct {
	Filter lease.HistoryFilter `json:"filter"`
}

// HistoryReport is every ended run and lease that matched, across the
// cluster, oldest first.
type HistoryReport struct {
	Since time.Time    `json:"since"`
	Rows  []HistoryRow `json:"rows"`
	// More says older rows matched than were returned: narrow the filter
	// or raise the limit.
	More bool `json:"more,omitempty"`
	// Missing lists nodes that did not answer; NotAsked those whose dibs
	// is too old to be asked (their runs are not listed).
	Missing  []string `json:"missing,omitempty"`
	NotAsked []string `json:"not_asked,omitempty"`
}

// HistoryRow is one ended lease (a gang's rank, an array's task, a plain
// claim) or, where a node folded a person's many plain claims of a day
// into one, that row with Folded counting them.
type HistoryRow struct {
	ID    string `json:"id"`
	Node  string `json:"node"`
	User  string `json:"user"`
	GPUs  []int  `json:"gpus,omitempty"`
	Model string `json:"model,omitempty"`
	// MIG is the MIG profile held; BudgetMiB the memory budget held.
	MIG       string         `json:"mig,omitempty"`
	BudgetMiB uint64         `json:"budget_mib,omitempty"`
	Kind      lease.Kind     `json:"kind,omitempty"`
	Entry     string         `json:"entry,omitempty"`
	Gang      string         `json:"gang,omitempty"`
	Rank      int            `json:"rank,omitempty"`
	Start     time.Time      `json:"start"`
	End       time.Time      `json:"end"`
	Seconds   float64        `json:"seconds"`
	State     lease.RunState `json:"state"`
	Reason    string         `json:"reason"`
	ExitCode  *int           `json:"exit_code,omitempty"`
	By        string         `json:"by,omitempty"`
	GPUHours  float64        `json:"gpu_hours"`
	IdleHours float64        `json:"idle_gpu_hours,omitempty"`
	// MeanSM is the mean SM utilization over its GPUs, nil when not
	// reported (MIG, budgets) or not recorded (an older dibs ended it).
	MeanSM      *float64 `json:"mean_sm,omitempty"`
	PeakMemMiB  uint64   `json:"peak_mem_mib,omitempty"`
	MemTotalMiB uint64   `json:"mem_total_mib,omitempty"`
	Folded      int      `json:"folded,omitempty"`
	// Figures are its GPUs' figures; their series come only with one
	// run's history.
	Figures *runrecord.Figures `json:"figures,omitempty"`
	// Verdicts are the plain findings of its figures ("used 1 of 4 GPUs").
	Verdicts []string `json:"verdicts,omitempty"`
}

// RowOf is the history row of ledger entry e, on a node whose GPUs are
// of model.
func RowOf(e lease.LedgerEntry, model string) HistoryRow {
	r := HistoryRow{ID: e.LeaseID, Node: e.Node, User: e.User, GPUs: e.GPUs, Model: model, Kind: e.Kind,
		Entry: e.Entry, Gang: e.Gang, Rank: e.Rank, Start: e.Start, End: e.End, Seconds: e.End.Sub(e.Start).Seconds(),
		State: e.State(), Reason: e.Reason, By: e.By, GPUHours: e.GPUSeconds / 3600, IdleHours: e.IdleGPUSeconds / 3600,
		Folded: e.Folded, Figures: e.Figures}
	if code, ok := e.ExitCode(); ok {
		r.ExitCode = &code
	}
	if f := e.Figures; f != nil {
		var sum float64
		n := 0
		for _, g := range f.GPUs {
			if g.MeanSM != nil {
				sum += *g.MeanSM
				n++
			}
			r.PeakMemMiB, r.MemTotalMiB = max(r.PeakMemMiB, g.PeakMemMiB), max(r.MemTotalMiB, g.MemTotalMiB)
			if g.Profile != "" {
				r.MIG = g.Profile
			}
			r.BudgetMiB = max(r.BudgetMiB, g.BudgetMiB)
		}
		if n > 0 && n == len(f.GPUs) {
			mean := sum / float64(n)
			r.MeanSM = &mean
		}
		r.Verdicts = f.Verdicts()
	}
	return r
}

// SamplesReport is one GPU's recent readings (`dibs` board charts,
// scripts): its samples, oldest first, within the node's window.
type SamplesReport struct {
	Node    string             `json:"node"`
	GPU     int                `json:"gpu"`
	Window  time.Duration      `json:"window"`
	Samples []runrecord.Sample `json:"samples"`
}
