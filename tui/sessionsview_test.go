package tui

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// The sessions view's STATE says what a lease's GPUs do: "busy" only when
// they work, "quiet" at 0 % before the idle judgement, and "borrowed"
// beside whatever else is true of a lease beyond its holder's quota.
func TestSessionStateWords(t *testing.T) {
	preempted := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		x    myLease
		want string
	}{
		{"working", myLease{l: &lease.Lease{}, util: 87}, "busy"},
		{"0 % utilisation", myLease{l: &lease.Lease{}, util: 0}, "quiet"},
		{"utilisation unknown", myLease{l: &lease.Lease{}, util: -1}, "running"},
		{"judged idle", myLease{l: &lease.Lease{}, util: 0, flags: []lease.Flag{lease.FlagIdle}}, "idle"},
		{"borrowed and working", myLease{l: &lease.Lease{Borrowed: true}, util: 50}, "borrowed,busy"},
		{"reclaimed", myLease{l: &lease.Lease{PreemptedAt: preempted}, util: 0, flags: []lease.Flag{lease.FlagIdle}}, "idle,reclaimed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stateWords(tt.x); got != tt.want {
				t.Errorf("stateWords = %q, want %q", got, tt.want)
			}
		})
	}
}
