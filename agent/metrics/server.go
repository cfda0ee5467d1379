package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves /metrics over plain HTTP on the address the operator
// chose. It is off unless asked for: the metrics name the people holding
// GPUs (docs/operations.md says so).
type Server struct {
	ln   *boundedListener
	http *http.Server
	done chan struct{}
}

// Listen serves m at http://addr/metrics. addr is HOST:PORT as net.Listen
// reads it (port 0 picks a free one; Addr says which).
func Listen(addr string, m *Metrics, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (choose another --metrics-listen or [metrics] listen)", addr, err)
	}
	ln := newBoundedListener(tcp, MaxConns)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler(log))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "dibs agent: Prometheus metrics are at /metrics")
	})
	s := &Server{ln: ln, done: make(chan struct{}), http: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is where the server listens, HOST:PORT.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving; a scrape under way gets a second to finish.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	s.http.Close()
	<-s.done
}
