package tui

import (
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

// A lease of part of a GPU is named by its part: a MIG lease by its
// instance (it was "MIG on GPU 0", or "GPU 0" in the claim's status), a
// budget by its size.
func TestLeaseWhatNamesTheInstance(t *testing.T) {
	b := unitsBoard()
	tests := []struct {
		name string
		l    lease.Lease
		want string
	}{
		{"MIG instance", lease.Lease{Node: "gpu-a", GPUs: []int{0}, MIG: "MIG-bbbb"}, "MIG 2g.20gb (0:1) of GPU 0"},
		{"MIG instance the board does not know", lease.Lease{Node: "gpu-a", GPUs: []int{0}, MIG: "MIG-zzzz"}, "a MIG instance of GPU 0"},
		{"budget", lease.Lease{Node: "gpu-a", GPUs: []int{1}, MemMiB: 20 << 10}, "20.0 GiB of GPU 1"},
		{"whole GPUs", lease.Lease{Node: "gpu-b", GPUs: []int{0, 1}}, "GPUs 0,1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leaseWhat(&tt.l, &b); got != tt.want {
				t.Errorf("leaseWhat = %q, want %q", got, tt.want)
			}
		})
	}
}
