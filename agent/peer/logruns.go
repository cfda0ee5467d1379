package peer

import (
	"time"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// LogRuns asks a node for the acting user's runs it keeps by a name (a
// lease id, a session name or a queued request's id), where each kept its
// output: what `dibs logs` reads, from each run's own record
// (node.KeptRun) rather than the event log, which stops keeping a
// person's events past their hourly cap and loses those not yet written
// when an agent is killed. Agents before it refuse it; the caller then
// reads their event log as before.
var LogRuns = Endpoint[LogRunsRequest, LogRunsReply]{Name: "log-runs"}

// LogRunsRequest names the runs asked for.
type LogRunsRequest struct {
	Name string `json:"name"`
}

// Validate implements Message.
func (r LogRunsRequest) Validate() error {
	if !words.ValidToken(r.Name, 2*words.MaxNameLen) {
		return refusal.Invalidf("bad run name %q", truncate(r.Name))
	}
	return nil
}

// LogRun is one run a node keeps: its lease, tmux session, log's name,
// queued request (with the attempt after '#') and rank, and when it
// started.
type LogRun struct {
	Lease   string    `json:"lease"`
	Session string    `json:"session"`
	Log     string    `json:"log,omitempty"`
	Entry   string    `json:"entry,omitempty"`
	Rank    int       `json:"rank,omitempty"`
	At      time.Time `json:"at"`
}

// LogRunsReply is the runs a node keeps by that name, oldest first.
type LogRunsReply struct {
	Runs []LogRun `json:"runs,omitempty"`
}

// Validate implements Message.
func (r LogRunsReply) Validate() error {
	if len(r.Runs) > node.MaxKeptRunsPerUser {
		return refusal.Invalidf("%d runs, over %d", len(r.Runs), node.MaxKeptRunsPerUser)
	}
	for _, k := range r.Runs {
		if _, ok := lease.NodeOfID(k.Lease); !ok || len(k.Lease) > 2*words.MaxNameLen {
			return refusal.Invalidf("%q is not a lease id", truncate(k.Lease))
		}
		if launch.CheckName(k.Session) != nil || k.Log != "" && launch.CheckName(k.Log) != nil {
			return refusal.Invalidf("run %s has a bad session or log name", k.Lease)
		}
		if k.Entry != "" && !words.ValidToken(k.Entry, 2*words.MaxNameLen) || k.Rank < 0 || !words.ValidSince(k.At) {
			return refusal.Invalidf("run %s has a bad queued request, rank or time", k.Lease)
		}
	}
	return nil
}
