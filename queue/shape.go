package queue

import (
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// Validate checks a queue entry's shape wherever it comes from: the same
// bounds as a direct request (names, sizes, notes), so an entry another
// agent gossips cannot hold what a person could not submit.
func (e *QueueEntry) Validate() error {
	origin, ok := OriginOfQueueID(e.ID)
	if !ok || origin != e.Origin {
		return refusal.Invalidf("queue entry %s does not belong to node %s", words.QuoteInput(e.ID), words.QuoteInput(e.Origin))
	}
	if !words.ValidUserName(e.User) {
		return refusal.Invalidf("queue entry %s has a bad user %s", e.ID, words.QuoteInput(e.User))
	}
	if e.Nodes < 1 || e.Nodes > words.MaxGangNodes || e.GPUsPerNode < 1 || e.GPUsPerNode > words.MaxGPUsPerNode {
		return refusal.Invalidf("queue entry %s asks for %d×%d GPUs", e.ID, e.Nodes, e.GPUsPerNode)
	}
	if e.Node != "" && words.ValidNodeName(e.Node) != nil {
		return refusal.Invalidf("queue entry %s is pinned to a bad node name", e.ID)
	}
	if e.Duration < 0 || e.Duration > words.MaxDuration {
		return refusal.Invalidf("queue entry %s has a time limit out of range", e.ID)
	}
	if _, err := lease.ParseKind(string(e.Kind)); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if err := words.CheckNote(e.Note); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.Job != nil {
		if err := e.Job.Check(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
		}
	}
	if e.Restarts < 0 || e.MaxRestarts < 0 || e.MaxRestarts > words.MaxRestarts || e.Attempt < 0 {
		return refusal.Invalidf("queue entry %s has restart counts out of range", e.ID)
	}
	if err := e.CheckText(); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.RequestID != "" && !lease.ValidRequestID(e.RequestID) {
		return refusal.Invalidf("queue entry %s has a bad request id", e.ID)
	}
	if len(e.RetryWhy) > MaxRetryWhy {
		return refusal.Invalidf("queue entry %s has a retry reason over %d bytes", e.ID, MaxRetryWhy)
	}
	if e.Placer != "" && !words.ValidToken(e.Placer, 2*words.MaxNameLen) {
		return refusal.Invalidf("queue entry %s has a bad placer", e.ID)
	}
	if len(e.Model) > words.MaxModelLen || strings.ContainsFunc(e.Model, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return refusal.Invalidf("queue entry %s has a bad model filter", e.ID)
	}
	if err := lease.CheckTags(e.Tags); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if err := e.NodeChoice.Check(); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "queue entry %s: %v", e.ID, err)
	}
	if e.MemMiB > words.MaxMemMiB || e.MemMiB > 0 && (e.Nodes != 1 || e.GPUsPerNode != 1) {
		return refusal.Invalidf("queue entry %s asks for a memory budget out of range", e.ID)
	}
	if e.MIG != "" && (!words.ValidToken(e.MIG, words.MaxNameLen) || e.MemMiB > 0 || e.Nodes != 1 || e.GPUsPerNode != 1) {
		return refusal.Invalidf("queue entry %s asks for a bad MIG instance", e.ID)
	}
	return e.checkSweep()
}
