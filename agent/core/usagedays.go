package core

import (
	"context"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// UsageByDay is `dibs usage --chart`: GPU-hours per user per day over the
// window (default 7d, at most peer.MaxUsageDays days), from every node,
// split at this agent's local midnights so every node cuts at the same
// instants.
func (b *Bound) UsageByDay(ctx context.Context, window string) (api.DailyUsageReport, error) {
	s := b.s
	w := 7 * 24 * time.Hour
	if window != "" {
		d, err := words.ParseDuration(window)
		if err != nil {
			return api.DailyUsageReport{}, err
		}
		w = d
	}
	v := s.View()
	cuts := dayCuts(v.Now.Add(-w), v.Now)
	if len(cuts) > peer.MaxUsageDays {
		return api.DailyUsageReport{}, refusal.Invalidf("--window %s spans more than %d days, the most the chart draws: give a shorter --window", window, peer.MaxUsageDays)
	}
	rep := api.DailyUsageReport{Since: cuts[0].Round(0), Days: make([]api.UsageDay, len(cuts))}
	for i, c := range cuts {
		rep.Days[i] = api.UsageDay{Start: c.Round(0), GPUHours: map[string]float64{}}
	}
	add := func(day int, secs map[string]float64) {
		for u, x := range secs {
			rep.Days[day].GPUHours[u] += x / 3600
		}
	}
	mine, err := s.deps.Node.Usage().UsageByDay(cuts)
	if err != nil {
		return rep, err
	}
	for i, d := range mine {
		add(i, d)
	}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Self {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := peer.Call(cctx, s.deps.Peers, n.Name, peer.UsageByDay, peer.As(b.c.User), peer.UsageByDayRequest{Cuts: cuts})
		cancel()
		if err != nil || len(r.Days) != len(cuts) {
			rep.Missing = append(rep.Missing, n.Name)
			continue
		}
		for i, d := range r.Days {
			add(i, d)
		}
	}
	return rep, nil
}

// dayCuts are the instants a window from since to now is split at: since,
// then each local midnight after it up to now.
func dayCuts(since, now time.Time) []time.Time {
	since = since.Round(0) // no monotonic reading: the cuts travel
	cuts := []time.Time{since}
	y, m, d := since.Date()
	for day := time.Date(y, m, d+1, 0, 0, 0, 0, since.Location()); !day.After(now) && len(cuts) <= peer.MaxUsageDays; day = time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, since.Location()) {
		cuts = append(cuts, day)
	}
	return cuts
}

// registerUsageByDay answers another node's UsageByDay from this node's
// ledger and running leases.
func (s *Service) registerUsageByDay() {
	peer.Handle(s.deps.Peers, peer.UsageByDay, func(ctx context.Context, from string, who peer.Actor, r peer.UsageByDayRequest) (peer.UsageByDayReply, error) {
		days, err := s.deps.Node.Usage().UsageByDay(r.Cuts)
		if err != nil {
			return peer.UsageByDayReply{}, err
		}
		out := peer.UsageByDayReply{Days: make([]map[string]float64, len(days))}
		for i, d := range days {
			out.Days[i] = d
		}
		return out, nil
	})
}
