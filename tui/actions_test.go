package tui

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

// The claim's status line says what the grant means: a lease that borrows
// beyond the caller's quota, a time cut short by a booking.
func TestClaimStatusSaysBorrowedOrCut(t *testing.T) {
	tests := []struct {
		name    string
		claimed func(*api.ClaimResponse)
		want    string
	}{
		{"borrowed", func(r *api.ClaimResponse) { r.Borrowed = true }, "claimed node02-50: GPU 3 until 18:40 — CUDA_VISIBLE_DEVICES=3 · borrowed beyond your quota: may be preempted"},
		{"cut by a booking", func(r *api.ClaimResponse) { r.CutBy = "node02-9" }, "· cut short: booking node02-9 begins then"},
		{"plain", nil, "claimed node02-50: GPU 3 until 18:40 — CUDA_VISIBLE_DEVICES=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 160, 48, Options{})
			h.be.claimed = tt.claimed
			h.moveTo("node02", 3)
			h.keys("c", "enter")
			if !strings.Contains(h.m.status, tt.want) {
				t.Errorf("status %q, want %q", h.m.status, tt.want)
			}
			if tt.claimed == nil && strings.Contains(h.m.status, "·") {
				t.Errorf("a plain claim's status %q says more", h.m.status)
			}
		})
	}
}
