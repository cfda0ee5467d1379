package sockapi_test

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/sockapi"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A uid reconnecting in a loop over its cap writes one refusal line per
// interval, not one per connection (the front door's share of broken 6 of
// the third round).
func TestRefusedConnectionsLogRarely(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	path := filepath.Join(agenttest.PublicDir(t), "sock", "dibs.sock")
	srv, err := sockapi.Listen(path, nil, sockapi.Limits{PerUID: 2}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	refused := 0
	for until := time.Now().Add(time.Second); time.Now().Before(until); {
		c, err := net.Dial("unix", path)
		if err != nil {
			continue
		}
		if closedByServer(c, time.Second) {
			refused++
		}
		c.Close()
	}
	lines := strings.Count(logs.String(), "refusing connections over the per-user cap")
	if refused < 20 || lines != 1 {
		t.Fatalf("%d refused connections wrote %d log lines, want 1:\n%s", refused, lines, logs.String())
	}
}
