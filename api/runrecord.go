package api

import (
	"context"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Run states.
const (
	RunQueued   = "queued"
	RunRunning  = "running"
	RunFinished = "finished"
)

// RunRecord is what dibs knows of one run, by queue id or lease id, for
// `dibs export sbatch`: its queue entry while the entry lives (queued or
// running), its leases while they run, its ledger entries once they ended.
type RunRecord struct {
	ID    string              `json:"id"`
	State string              `json:"state"`
	Entry *queue.QueueEntry   `json:"entry,omitempty"`
	Lease []lease.Lease       `json:"leases,omitempty"`
	Ended []lease.LedgerEntry `json:"ended,omitempty"`
	// Job is the command a run that is not (or no longer) a queue entry
	// was started with, as its node kept it: only for its holder and
	// admins, and nil when the node kept none (a bare claim, a run older
	// than the node's bounds or its last restart).
	Job *job.Job `json:"job,omitempty"`
}

// Run looks a run up by its queue id (node01-q7) or lease id (node01-42).
func (c *Client) Run(ctx context.Context, id string) (RunRecord, error) {
	var r RunRecord
	err := c.do(ctx, "POST", "/v1/run", map[string]string{"id": id}, &r)
	return r, err
}
