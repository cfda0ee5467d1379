package tui

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
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

// TestClaimFormOpensOnWhatIsTypedFirst: the claim form opens on the note
// and the run form on the command, so words typed at once land there (the
// form opened on the duration: issue 30); the duration keeps its default.
func TestClaimFormOpensOnWhatIsTypedFirst(t *testing.T) {
	for _, tc := range []struct {
		name, key, text string
		got             func(api.ClaimRequest) string
	}{
		{"claim", "c", "ablation sweep", func(r api.ClaimRequest) string { return r.Note }},
		{"run", "r", "python3 train.py", func(r api.ClaimRequest) string {
			if r.Run == nil {
				return ""
			}
			return strings.Join(r.Run.Command, " ")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 80, 24, Options{})
			h.keys(tc.key)
			h.typeText(tc.text)
			h.keys("enter")
			if len(h.be.claims) != 1 {
				t.Fatalf("%d claims sent, want 1 (screen:\n%s)", len(h.be.claims), h.screen())
			}
			r := h.be.claims[0]
			if got := tc.got(r); got != tc.text {
				t.Errorf("typed %q at once: it went to the request as %q (duration %q), want it in the first words field", tc.text, got, r.Duration)
			}
			if r.Duration != "" {
				t.Errorf("duration %q, want the default (empty)", r.Duration)
			}
		})
	}
}
