package queue

import (
	"strings"

	"github.com/dibs-gpu/dibs/lease"
)

// Validate checks a queue entry's shape wherever it comes from: the same
// bounds as a direct request (names, sizes, notes), so an entry another
// agent gossips cannot hold what a person could not submit.
func (e *QueueEntry) Validate() error {
	origin, ok := OriginOfQueueID(e.ID)
	if !ok || origin != e.Origin {
		return lease.Invalidf("queue entry %s does not belong to node %s", lease.QuoteInput(e.ID), lease.QuoteInput(e.Origin))
	}
	if !lease.ValidUserName(e.User) {
		return lease.Invalidf("queue entry %s has a bad user %s", e.ID, lease.QuoteInput(e.User))
	}
	if e.Nodes < 1 || e.Nodes > lease.MaxGangNodes || e.GPUsPerNode < 1 || e.GPUsPerNode > lease.MaxGPUsPerNode {
		return lease.Invalidf("queue entry %s asks for %d×%d GPUs", e.ID, e.Nodes, e.GPUsPerNode)
	}
	if e.Node != "" && lease.ValidNodeName(e.Node) != nil {
		return lease.Invalidf("queue entry %s is pinned to a bad node name", e.ID)
	}
	if e.Duration < 0 || e.Duration > lease.MaxDuration {
		return lease.Invalidf("queue entry %s has a time limit out of range", e.ID)
	}
	if _, err := lease.ParseKind(string(e.Kind)); err != nil {
		return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if err := lease.CheckNote(e.Note); err != nil {
		return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.Job != nil {
		if err := e.Job.Check(); err != nil {
			return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
		}
	}
	if e.Restarts < 0 || e.MaxRestarts < 0 || e.MaxRestarts > lease.MaxRestarts || e.Attempt < 0 {
		return lease.Invalidf("queue entry %s has restart counts out of range", e.ID)
	}
	if err := e.CheckText(); err != nil {
		return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.RequestID != "" && !lease.ValidRequestID(e.RequestID) {
		return lease.Invalidf("queue entry %s has a bad request id", e.ID)
	}
	if len(e.RetryWhy) > MaxRetryWhy {
		return lease.Invalidf("queue entry %s has a retry reason over %d bytes", e.ID, MaxRetryWhy)
	}
	if e.Placer != "" && !lease.ValidToken(e.Placer, 2*lease.MaxNameLen) {
		return lease.Invalidf("queue entry %s has a bad placer", e.ID)
	}
	if len(e.Model) > lease.MaxModelLen || strings.ContainsFunc(e.Model, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return lease.Invalidf("queue entry %s has a bad model filter", e.ID)
	}
	if err := lease.CheckTags(e.Tags); err != nil {
		return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if err := e.NodeChoice.Check(); err != nil {
		return lease.Wrapf(lease.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.MemMiB > lease.MaxMemMiB || e.MemMiB > 0 && (e.Nodes != 1 || e.GPUsPerNode != 1) {
		return lease.Invalidf("queue entry %s asks for a memory budget out of range", e.ID)
	}
	if e.MIG != "" && (!lease.ValidToken(e.MIG, lease.MaxNameLen) || e.MemMiB > 0 || e.Nodes != 1 || e.GPUsPerNode != 1) {
		return lease.Invalidf("queue entry %s asks for a bad MIG instance", e.ID)
	}
	return e.checkSweep()
}
