package api

import (
	"context"
	"time"
)

// DailyUsageReport is `dibs usage --chart`: GPU-hours per user per day
// over a window, from every node's ledger and running leases, split at
// the agent's local midnights.
type DailyUsageReport struct {
	Since time.Time  `json:"since"`
	Days  []UsageDay `json:"days"`
	// Missing lists nodes that did not answer, or run a dibs too old to
	// split by day; their usage is not counted.
	Missing []string `json:"missing,omitempty"`
}

// UsageDay is one day of DailyUsageReport: from Start (midnight, or the
// window's start for the first day) to the next day's Start, or now.
type UsageDay struct {
	Start    time.Time          `json:"start"`
	GPUHours map[string]float64 `json:"gpu_hours"`
}

// UsageByDay reports GPU-hours per user per day since window ago.
func (c *Client) UsageByDay(ctx context.Context, window string) (DailyUsageReport, error) {
	var u DailyUsageReport
	err := c.do(ctx, "POST", "/v1/usage/daily", map[string]string{"window": window}, &u)
	return u, err
}
