package lease_test

import (
	"errors"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// The shipped helpers keep a refusal's chain (base/refusal's
// TestRefusalKeepsItsCause): CheckGPUs's refusal unwraps.
func TestCheckGPUsKeepsItsCause(t *testing.T) {
	if err := lease.CheckGPUs([]int{1, 1}); refusal.CodeOf(err) != refusal.CodeInvalid || errors.Unwrap(err) == nil {
		t.Errorf("CheckGPUs([1 1]) = %v (code %q, unwraps to %v), want an invalid refusal with its cause", err, refusal.CodeOf(err), errors.Unwrap(err))
	}
}
