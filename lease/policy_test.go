package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

const day = 24 * time.Hour

func TestPolicyValidate(t *testing.T) {
	if err := lease.DefaultPolicy().Validate(); err != nil {
		t.Fatalf("DefaultPolicy is invalid: %v", err)
	}
	tests := []struct {
		name string
		edit func(*lease.Policy)
		msg  string
	}{
		{"zero default", func(p *lease.Policy) { p.DefaultInteractive = 0 }, "default_interactive must be positive"},
		{"negative batch default", func(p *lease.Policy) { p.DefaultBatch = -time.Hour }, "default_batch must be positive"},
		{"zero max", func(p *lease.Policy) { p.MaxInteractive = 0 }, "max_interactive must be positive"},
		{"zero batch max", func(p *lease.Policy) { p.MaxBatch = 0 }, "max_batch must be positive"},
		{"zero warning", func(p *lease.Policy) { p.WarnBefore = 0 }, "warn_before must be positive"},
		{"zero grace", func(p *lease.Policy) { p.SignalGrace = 0 }, "signal_grace must be positive"},
		{"zero idle", func(p *lease.Policy) { p.IdleAfter = 0 }, "idle_after must be positive"},
		{"default over max", func(p *lease.Policy) { p.DefaultInteractive = 8 * day }, "default_interactive 8d is longer than max_interactive 7d"},
		{"batch default over max", func(p *lease.Policy) { p.MaxBatch = 12 * time.Hour }, "default_batch 1d is longer than max_batch 12h"},
		{"unknown end action", func(p *lease.Policy) { p.EndAction = "kill" }, `end_action "kill" is not one of warn, signal, end`},
		{"empty end action", func(p *lease.Policy) { p.EndAction = "" }, "end_action"},
		{"idle pct over 100", func(p *lease.Policy) { p.IdleUtilPct = 101 }, "idle_util_pct 101 is not between 0 and 100"},
		{"idle pct negative", func(p *lease.Policy) { p.IdleUtilPct = -1 }, "idle_util_pct -1"},
	}
	for _, tt := range tests {
		p := lease.DefaultPolicy()
		tt.edit(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.msg)
		}
	}
	for _, a := range []lease.EndAction{lease.ActionWarn, lease.ActionSignal, lease.ActionEnd} {
		p := lease.DefaultPolicy()
		p.EndAction = a
		if err := p.Validate(); err != nil {
			t.Errorf("end action %s: %v", a, err)
		}
	}
	p := lease.DefaultPolicy()
	p.MaxBatch = 30 * day
	if def, max := p.Limits(lease.KindBatch); def != day || max != 30*day {
		t.Errorf("Limits(batch) = %s, %s; want 24h, 720h", def, max)
	}
	if def, max := p.Limits(lease.KindInteractive); def != 4*time.Hour || max != 7*day {
		t.Errorf("Limits(interactive) = %s, %s; want 4h, 168h", def, max)
	}
}

func TestEnded(t *testing.T) {
	l := held(9, alice, []int{2, 3}, t0, 4*time.Hour)
	e := lease.Ended(l, time.Now(), "released", "")
	if e.End != e.End.Round(0) {
		t.Errorf("ledger end carries a monotonic reading")
	}
	e = lease.Ended(l, t0.Add(90*time.Minute), "admin", "root")
	if e.GPUSeconds != 2*90*60 || e.LeaseID != "gpu-01-9" || e.By != "root" || e.Reason != "admin" {
		t.Errorf("Ended = %+v, want 10800 GPU-seconds for gpu-01-9 ended by root", e)
	}
	if e := lease.Ended(l, t0.Add(-time.Minute), "released", ""); e.GPUSeconds != 0 {
		t.Errorf("an end before the start counts %v GPU-seconds, want 0", e.GPUSeconds)
	}
}
