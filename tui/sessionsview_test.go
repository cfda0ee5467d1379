package tui

import (
	"strings"
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

// TestSessionStatesExplained: the sessions view says what its STATE words
// mean — under the list, and at length under `?` — where "quiet" was
// explained nowhere (issue 30).
func TestSessionStatesExplained(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	h.send(BoardMsg(mineIdleBoard()))
	h.keys("4")
	if s := h.screen(); !strings.Contains(s, "quiet: 0% now, not yet idle") {
		t.Errorf("the sessions view does not say what quiet means:\n%s", s)
	}
	h.keys("?")
	if s := h.screen(); !strings.Contains(s, "quiet     nothing runs on them now, not yet for the idle time") {
		t.Errorf("`?` in the sessions view does not explain quiet:\n%s", s)
	}
}
