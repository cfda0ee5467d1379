package node

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkServiceHealthCheck times one health check of a service against
// a real HTTP server on the loopback (what dibs_service_health_seconds
// observes): a TCP connect alone, and an HTTP GET of --health answered
// 200. docs/benchmarks.md ("Services") has the figures.
func BenchmarkServiceHealthCheck(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.Write([]byte("ok\n"))
			return
		}
		http.NotFound(w, r)
	}))
	b.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	ctx := context.Background()
	for _, c := range []struct{ name, path string }{{"tcp", ""}, {"http", "/health"}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if ok, _ := answers(ctx, port, c.path); !ok {
					b.Fatalf("the check of %s failed", c.name)
				}
			}
		})
	}
}
