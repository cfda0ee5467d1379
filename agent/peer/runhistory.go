package peer

import (
	"encoding/json"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// RunHistorySince is the first protocol whose agents answer RunHistory and
// GPUSamples.
const RunHistorySince = 8

// RunHistoryFeature is `dibs history` asked of other nodes: an agent
// before it does not know the request, so it is asked only of nodes that
// speak RunHistorySince (the others are named as not asked).
var RunHistoryFeature = Feature{Name: "dibs history of other nodes", Since: RunHistorySince}

// RunHistory asks a node for the ended leases of its ledger that a filter
// matches: the filter travels and is applied where the ledger is, so only
// matching rows cross the network (`dibs history`, SLURM's sacct). The
// older History endpoint pages a node's whole ledger for doctor.
var RunHistory = Endpoint[RunHistoryRequest, RunHistoryReply]{Name: "run-history"}

// RunHistoryRequest carries the filter.
type RunHistoryRequest struct {
	Filter lease.HistoryFilter `json:"filter"`
	// Series asks for each run's utilization series too (one run's
	// efficiency); a list leaves them out to stay small.
	Series bool `json:"series,omitempty"`
}

// Validate implements Message.
func (r RunHistoryRequest) Validate() error {
	if r.Filter.Since.IsZero() {
		return refusal.Invalidf("a history request names its start")
	}
	return r.Filter.Validate()
}

// RunHistoryReply is the newest matching rows, in end order; More says
// older ones matched too but did not fit.
type RunHistoryReply struct {
	Entries []lease.LedgerEntry `json:"entries,omitempty"`
	More    bool                `json:"more,omitempty"`
}

// Validate implements Message.
func (r RunHistoryReply) Validate() error {
	if len(r.Entries) > lease.MaxHistoryRows {
		return refusal.Invalidf("%d history rows, over %d", len(r.Entries), lease.MaxHistoryRows)
	}
	for i := range r.Entries {
		if err := r.Entries[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// FitHistory is the newest of rows (in end order) that fit one reply with
// room for the envelope, series dropped unless series; more is true when
// some were left out.
func FitHistory(rows []lease.LedgerEntry, series bool) (fit []lease.LedgerEntry, more bool) {
	size := 0
	start := len(rows)
	for start > 0 {
		e := rows[start-1]
		if !series && e.Figures != nil {
			f := *e.Figures
			f.GPUs = append(f.GPUs[:0:0], f.GPUs...)
			for i := range f.GPUs {
				f.GPUs[i].Series = nil
			}
			e.Figures = &f
		}
		b, _ := json.Marshal(e)
		if size+len(b)+1 > HistoryPageBytes {
			more = true
			break
		}
		size += len(b) + 1
		rows[start-1] = e
		start--
	}
	return rows[start:], more
}
