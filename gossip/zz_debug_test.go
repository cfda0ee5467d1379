package gossip

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDebugLoss(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	nodes := make([]*tnode, 0, 32)
	var first string
	start := time.Now()
	for i := range 32 {
		cfg := testConfig(t, fmt.Sprintf("node%02d", i))
		name := cfg.NodeName
		cfg.Logf = func(f string, a ...any) {
			s := fmt.Sprintf(f, a...)
			if strings.Contains(s, "failed") || strings.Contains(s, "Suspect") || strings.Contains(s, "Refut") || strings.Contains(s, "join") {
				mu.Lock()
				lines = append(lines, fmt.Sprintf("%6.2fs %s: %s", time.Since(start).Seconds(), name, s))
				mu.Unlock()
			}
		}
		cfg.testPacketLoss = 0.05
		if first != "" {
			cfg.Join = []string{first}
		}
		nd := startNode(t, cfg)
		if first == "" {
			first = nd.LocalAddr()
		}
		nodes = append(nodes, nd)
	}
	t.Logf("started in %v", time.Since(start))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		bad := 0
		for _, a := range nodes {
			for _, b := range nodes {
				if p, _ := a.Peer(b.cfg.NodeName); p.State != StateAlive {
					bad++
				}
			}
		}
		if bad == 0 {
			t.Logf("converged after %v", time.Since(start))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	for _, l := range lines {
		t.Log(l)
	}
	mu.Unlock()
}
