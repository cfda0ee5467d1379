package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// TestDurabilityDrill kills the agent with SIGKILL at random points while
// several clients claim and release, restarts it each time, and checks what
// the store promises: every lease a client heard "granted" for (and did not
// release) is there after every restart, no GPU is ever held by two leases,
// tokens never repeat, and a claim whose answer was lost is found by the
// client's retry (same request id) instead of holding GPUs nobody knows of.
//
// DIBS_DRILL_KILLS sets the number of kills (default 40; the figures in
// docs/reliability.md come from 600):
//
//	DIBS_DRILL_KILLS=600 go test ./cmd/dibs -run TestDurabilityDrill -v -timeout 30m
func TestDurabilityDrill(t *testing.T) {
	kills := 40
	if s := os.Getenv("DIBS_DRILL_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "16xH100-80GB")

	var (
		mu       sync.Mutex
		held     = map[string]api.ClaimResponse{} // acknowledged, not released
		everSeen = map[string]string{}            // every lease id ever acknowledged, with its request id
		unknown  = map[string]bool{}              // releases whose answer was lost
		stats    struct{ acked, released, found, retried, lostRelease atomic.Int64 }
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	cl := api.NewClient(p.socket).WithoutRetry()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var mine []string // this worker's leases, oldest first
			release := func(id string) {
				_, err := cl.Release(context.Background(), api.ReleaseRequest{IDs: []string{id}})
				mu.Lock()
				defer mu.Unlock()
				var ae *api.Error
				switch {
				case err == nil:
					stats.released.Add(1)
				case errors.As(err, &ae):
					failures = append(failures, fmt.Sprintf("release of %s refused: %v", id, err))
				default:
					unknown[id] = true // the answer was lost: it may or may not be gone
					stats.lostRelease.Add(1)
				}
				delete(held, id)
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				// One claim, retried with its request id until the agent
				// answers, as api.Client does.
				req := api.ClaimRequest{Count: 1 + rng.IntN(2), Duration: "1h", RequestID: api.NewRequestID()}
				var r api.ClaimResponse
				var sent time.Time
				tries, err := untilAnswered(15*time.Second, func() (err error) {
					sent = time.Now()
					r, err = cl.Claim(context.Background(), req)
					return err
				})
				if err == nil && tries > 1 {
					stats.retried.Add(1)
					if r.ExpiresAt.Add(-time.Hour).Before(sent.Add(-10 * time.Millisecond)) {
						stats.found.Add(1) // granted by an earlier try whose answer was lost
					}
				}
				if err != nil {
					// Refused (the node is full): give back our oldest lease.
					if len(mine) > 0 {
						release(mine[0])
						mine = mine[1:]
					}
					continue
				}
				mu.Lock()
				if prev, ok := everSeen[r.ID]; ok && prev != req.RequestID {
					failures = append(failures, fmt.Sprintf("lease id %s acknowledged for two different claims: a token was reused", r.ID))
				}
				everSeen[r.ID] = req.RequestID
				held[r.ID] = r
				mu.Unlock()
				stats.acked.Add(1)
				mine = append(mine, r.ID)
				if rng.IntN(3) > 0 {
					release(r.ID)
					mine = mine[:len(mine)-1]
				}
			}
		}(w)
	}

	check := func(when string) {
		b, err := api.NewClient(p.socket).Board(context.Background())
		if err != nil {
			fail("%s: board: %v", when, err)
			return
		}
		cells := map[int]string{}
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				cells[g.Index] = g.Lease.ID
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id, r := range held {
			for _, g := range r.GPUs {
				if cells[g] != id {
					failures = append(failures, fmt.Sprintf("%s: acknowledged lease %s holds GPU %d, but the board shows %q there", when, id, g, cells[g]))
				}
			}
		}
		for g, id := range cells {
			if _, ok := everSeen[id]; !ok && !unknown[id] {
				// Committed but never acknowledged, and not found by a retry.
				failures = append(failures, fmt.Sprintf("%s: GPU %d is held by %s, which no client was ever told of", when, g, id))
			}
		}
	}

	rng := rand.New(rand.NewPCG(7, 7))
	start := time.Now()
	for k := 0; k < kills; k++ {
		agentLife(rng)
		p.kill9(t)
		p.start(t)
		mu.Lock()
		done := len(failures)
		mu.Unlock()
		if done > 0 {
			break
		}
	}
	close(stop)
	wg.Wait()
	check("after the drill")
	t.Logf("%d SIGKILLs in %s: %d claims acknowledged, %d released, %d retried (%d of them granted before their answer was lost and found by the retry), %d releases whose answer was lost",
		kills, time.Since(start).Round(time.Second), stats.acked.Load(), stats.released.Load(), stats.retried.Load(), stats.found.Load(), stats.lostRelease.Load())
	for _, f := range failures {
		t.Error(f)
	}
	if stats.acked.Load() == 0 {
		t.Fatal("no claim was acknowledged: the drill proved nothing")
	}
}
