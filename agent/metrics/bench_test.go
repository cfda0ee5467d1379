package metrics_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// BenchmarkScrape is one Prometheus scrape of an 8-GPU agent holding four
// leases, over HTTP, body read (what a scrape costs the agent):
//
//	go test ./agent/metrics -run '^$' -bench Scrape -benchtime 2000x
func BenchmarkScrape(b *testing.B) {
	n := agenttest.Start(b, agenttest.Options{Sim: "8xH100-80GB", MetricsListen: "127.0.0.1:0", Quiet: true})
	for range 4 {
		if _, err := n.Client.Claim(context.Background(), api.ClaimRequest{Count: 2}); err != nil {
			b.Fatal(err)
		}
	}
	url := "http://" + n.Agent.MetricsAddr() + "/metrics"
	size := 0
	b.ResetTimer()
	for range b.N {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(body)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
