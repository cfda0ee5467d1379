package lease

import (
	"fmt"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
)

// Validate checks a lease's shape (not the rules: who may hold it is the
// table's business): ids, GPUs, names, sizes, the note.
func (l *Lease) Validate() error {
	if !words.ValidToken(l.ID, 2*words.MaxNameLen) {
		return refusal.Invalidf("a lease has a bad id %s", words.QuoteInput(l.ID))
	}
	if node, ok := NodeOfID(l.ID); !ok || node != l.Node {
		return refusal.Invalidf("lease %s does not belong to node %s", words.QuoteInput(l.ID), words.QuoteInput(l.Node))
	}
	// A service may hold no GPU (dibs serve -g 0).
	if err := checkGPUs(l.GPUs, !l.IsService()); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if !words.ValidUserName(l.User) && l.User != "" {
		return refusal.Invalidf("lease %s has a bad user %s", l.ID, words.QuoteInput(l.User))
	}
	if l.Kind != "" {
		if err := checkKind(l.Kind); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
		}
	}
	if l.Session != "" && !words.ValidToken(l.Session, words.MaxNameLen) {
		return refusal.Invalidf("lease %s has a bad session name %s", l.ID, words.QuoteInput(l.Session))
	}
	for _, s := range []string{l.Entry, l.Gang, l.PreemptReason, l.RequestID} {
		if s != "" && !words.ValidToken(s, 2*words.MaxNameLen) {
			return refusal.Invalidf("lease %s has a bad field %s", l.ID, words.QuoteInput(s))
		}
	}
	if err := words.CheckNote(l.Note); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if err := l.checkCPUs(); err != nil {
		return err
	}
	if err := l.CheckText(); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	return l.validateParts()
}

// validateParts checks what the MIG, shared and booking fields may hold: a
// MIG or shared lease is on exactly one GPU and counts for a share of it,
// and only a booking (or a service: its definition, held by every node)
// carries a job.
func (l *Lease) validateParts() error {
	if l.MIG != "" && (!words.ValidToken(l.MIG, words.MaxNameLen) || !strings.HasPrefix(l.MIG, "MIG-")) {
		return refusal.Invalidf("lease %s names a bad MIG instance %s", l.ID, words.QuoteInput(l.MIG))
	}
	switch {
	case l.MIG != "" && l.MemMiB > 0:
		return refusal.Invalidf("lease %s holds both a MIG instance and a memory budget", l.ID)
	case l.Partial() && len(l.GPUs) != 1:
		return refusal.Invalidf("lease %s holds part of %d GPUs; a MIG or shared lease is on one", l.ID, len(l.GPUs))
	case l.Partial() && !(l.Share > 0 && l.Share <= 1), !l.Partial() && l.Share != 0:
		return refusal.Invalidf("lease %s counts for a share %g of its GPU", l.ID, l.Share)
	case l.MemMiB > words.MaxMemMiB:
		return refusal.Invalidf("lease %s has a budget of %d MiB", l.ID, l.MemMiB)
	case l.Job != nil && !l.Booked && !l.IsService():
		return refusal.Invalidf("lease %s carries a job but is not a booking", l.ID)
	}
	if err := job.CheckContainers(l.Containers); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if l.Job != nil {
		if err := l.Job.Check(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
		}
	}
	if l.Service != nil {
		// Every node holds a service's placement: bounded as a claim's.
		if err := l.Service.Place.Check(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "lease %s: %v", l.ID, err)
		}
	}
	return nil
}

func checkGPUs(gpus []int, need bool) error {
	if need && len(gpus) == 0 {
		return fmt.Errorf("no GPUs")
	}
	if len(gpus) > words.MaxGPUsPerNode {
		return fmt.Errorf("%d GPUs, over %d", len(gpus), words.MaxGPUsPerNode)
	}
	seen := make(map[int]bool, len(gpus))
	for _, g := range gpus {
		if g < 0 || g >= words.MaxGPUIndex {
			return fmt.Errorf("GPU index %d is out of range", g)
		}
		if seen[g] {
			return fmt.Errorf("GPU %d appears twice", g)
		}
		seen[g] = true
	}
	return nil
}

// CheckGPUs refuses a list of GPU indices that is out of range or repeats
// one.
func CheckGPUs(gpus []int) error {
	if err := checkGPUs(gpus, false); err != nil {
		return refusal.Wrap(refusal.CodeInvalid, err)
	}
	return nil
}

// Validate checks an ended run's shape.
func (x *EndedRun) Validate() error {
	if !words.ValidToken(x.Entry, 2*words.MaxNameLen) || !words.ValidToken(x.Lease, 2*words.MaxNameLen) || !words.ValidToken(string(x.Reason), words.MaxNameLen) {
		return refusal.Invalidf("an ended run has a bad entry, lease or reason")
	}
	if x.Gang != "" && !words.ValidToken(x.Gang, 2*words.MaxNameLen) {
		return refusal.Invalidf("ended run %s has a bad gang", x.Lease)
	}
	return nil
}
