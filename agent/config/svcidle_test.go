package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// TestServiceIdleAfter: [leases] service_idle_after defaults to a day,
// takes a duration, and "0" turns the idle flag off; a word that is not
// a duration is refused naming the key.
func TestServiceIdleAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"", lease.DefaultServiceIdleAfter, ""},
		{"2h", 2 * time.Hour, ""},
		{"3d", 72 * time.Hour, ""},
		{"0", 0, ""},
		{"soon", 0, "leases.service_idle_after"},
		{"-1h", 0, "leases.service_idle_after"},
	} {
		p, err := LeaseSection{ServiceIdleAfter: tc.in}.Policy(lease.DefaultPolicy())
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one naming %s", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || p.ServiceIdleAfter != tc.want):
			t.Errorf("%q: %s (%v), want %s", tc.in, p.ServiceIdleAfter, err, tc.want)
		}
	}
}
