package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/tui"
)

// BenchmarkLeaseChangeToScreen measures, on the demo's four-node cluster,
// the time from a claim decided by node02's agent to node01's board stream
// delivering it and the board rendering the changed cell ("you hold N" in
// the header moves with it). It is the path a person watching the board on
// node01 sees.
func BenchmarkLeaseChangeToScreen(b *testing.B) {
	nodes := agenttest.Cluster(b, agenttest.ClusterOptions{Specs: []string{"8xRTX-PRO-6000", "8xRTX-PRO-6000", "4xRTX-5090", "4xL40S"}, Quiet: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := tui.New(tui.Options{})
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	boards, _ := nodes[0].Client.Watch(ctx)
	show := func(want string) time.Duration {
		t0 := time.Now()
		for {
			select {
			case bd := <-boards:
				m.Update(tui.BoardMsg(bd))
				if strings.Contains(m.View().Content, want) {
					return time.Since(t0)
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("the board never showed %q", want)
			}
		}
	}
	show("4 nodes")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := nodes[1].Client.Claim(ctx, api.ClaimRequest{Count: 1})
		if err != nil {
			b.Fatal(err)
		}
		show("you hold 1")
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		if _, err := nodes[1].Client.Release(ctx, api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
			b.Fatal(err)
		}
		show(fmt.Sprintf("%d free", 24))
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
