package node

import (
	"errors"
	"syscall"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// ExplainDiskFailure turns a write the disk failed (EIO, from the write or
// its fsync) into a refusal a person can act on, where it reaches them:
// the store keeps nothing of a write that failed, so nothing changed and
// trying again is safe. Other errors pass through unchanged.
func ExplainDiskFailure(err error) error {
	if err == nil || refusal.CodeOf(err) != "" || !errors.Is(err, syscall.EIO) {
		return err
	}
	return refusal.Wrapf(refusal.CodeUnavailable, err, "%v: the agent's disk failed to save it, so nothing changed; try again, and if it keeps failing check the disk (dmesg) and run `dibs doctor`", err)
}
