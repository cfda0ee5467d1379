package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/nemesis/powercut"
	"github.com/dibs-gpu/dibs/queue"
)

// TestPowerCutKeepsEveryAcknowledgedLease runs a real agent process with its
// data directory on the power-cut file system (nemesis/powercut: what was
// not fsynced is lost) and cuts the power at random moments while clients
// claim and release GPUs, submit queued requests and arrays, cancel them,
// and book GPUs ahead: the file system freezes (nothing more reaches the
// disk), the agent is killed, what was not durable is dropped — all of it,
// or in a third of the cuts a random prefix of it (torn) — and the agent
// starts again on the remounted directory. After every cut: the agent
// starts (a store that failed to open would stop it with its one-line
// refusal, which fails the test), every lease a client was told "granted"
// and did not release is on the board at its GPUs, no GPU is held by a
// lease no client was told of (a grant lost and its token given again), no
// lease id is acknowledged for two different claims, every acknowledged
// queued request not cancelled is still held by its origin, and every
// acknowledged booking is still booked. Before that, a tenth as many torn
// cuts land while a new agent makes its store, and the next start on that
// directory must come up. The figures count both. DIBS_POWERCUT_FIRST
// sets the number of first-start cuts (default a tenth of the others).
//
// DIBS_POWERCUT_CUTS sets the number of cuts (default 60; the figures in
// docs/reliability.md come from the long run):
//
//	DIBS_POWERCUT_CUTS=300 go test ./cmd/dibs -run TestPowerCutKeepsEveryAcknowledgedLease -v -timeout 30m
func TestPowerCutKeepsEveryAcknowledgedLease(t *testing.T) {
	cuts := 60
	if s := os.Getenv("DIBS_POWERCUT_CUTS"); s != "" {
		var err error
		if cuts, err = strconv.Atoi(s); err != nil || cuts < 1 {
			t.Fatalf("DIBS_POWERCUT_CUTS=%q: want a number of cuts, like 300", s)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	fs := powercut.Mount(t, powercut.Options{Seed: seed})
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	dir := agenttest.PublicDir(t)
	p := &proc{socket: filepath.Join(dir, "dibs.sock"), data: filepath.Join(fs.Dir(), "data"), args: []string{"--sim", "16xH100-80GB"}}
	t.Cleanup(func() {
		if t.Failed() && p.log != nil {
			t.Logf("the agent's last log:\n%s", p.log.String())
		}
	})

	// First starts: the power goes out while a new agent makes its store
	// (a torn cut keeps part of what it wrote); the next start on that
	// directory must come up, with an empty store or a whole one.
	rng := rand.New(rand.NewPCG(seed, 99))
	firstCuts := max(3, cuts/10)
	if s := os.Getenv("DIBS_POWERCUT_FIRST"); s != "" {
		var err error
		if firstCuts, err = strconv.Atoi(s); err != nil || firstCuts < 0 {
			t.Fatalf("DIBS_POWERCUT_FIRST=%q: want a number of cuts at first start, like 100", s)
		}
	}
	for k := range firstCuts {
		first := &proc{socket: p.socket, data: filepath.Join(fs.Dir(), fmt.Sprintf("first-%d", k)), args: p.args}
		cmd := exec.Command(dibsdBin, "agent", "--node-name", "node01", "--data-dir", first.data, "--socket", first.socket, "--sim", "16xH100-80GB")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The cut lands while the store is made: once its data dir has a
		// file, within a few milliseconds.
		poll.WaitEvery(time.Millisecond, 10*time.Second, func() bool {
			ents, _ := os.ReadDir(first.data)
			return len(ents) > 0
		})
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond) // load window: a random point of the store's making
		fs.Freeze()
		cmd.Process.Kill()
		cmd.Wait()
		if err := fs.CutTorn(); err != nil {
			t.Fatalf("first-start cut %d: %v", k+1, err)
		}
		up := false
		t.Cleanup(func() {
			if t.Failed() && !up && first.log != nil {
				t.Logf("first start %d: the agent's log:\n%s\nits data dir: %s", k+1, first.log.String(), listDir(first.data))
			}
		})
		first.start(t)
		up = true
		first.kill9(t)
	}

	p.start(t)
	ctx := context.Background()
	cl := api.NewClient(p.socket).WithoutRetry()

	// retry calls f until the agent answers (it is down while the power
	// is out), as a real client retries with the same request id.
	retry := func(f func() error) error {
		_, err := untilAnswered(15*time.Second, f)
		return err
	}

	// The root every queued request waits for: a queued claim that holds
	// one GPU for the whole test, so what the clients queue stays queued
	// (it waits for the root to end) and stays checkable.
	var root api.Submitted
	if err := retry(func() (err error) {
		root, err = cl.Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "24h", RequestID: api.NewRequestID()}})
		return err
	}); err != nil {
		t.Fatalf("queue the root claim: %v", err)
	}

	var (
		gate        sync.RWMutex // clients hold it shared per operation; checks hold it alone
		mu          sync.Mutex
		held        = map[string]api.ClaimResponse{} // acknowledged, not released
		everSeen    = map[string]string{}            // every lease id acknowledged, with its request id
		unknown     = map[string]bool{}              // releases and cancels whose answer was lost
		queued      = map[string]bool{}              // acknowledged submissions not cancelled
		booked      = map[string]bool{}              // acknowledged bookings not released
		failures    []string
		stop        = make(chan struct{})
		wg          sync.WaitGroup
		stats       struct{ claims, releases, submits, arrays, cancels, bookings atomic.Int64 }
		rootLease   string
		refusedOnce sync.Once
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	agenttest.Eventually(t, 20*time.Second, "the root claim to hold its GPU", func() bool {
		b, err := cl.Board(ctx)
		if err != nil {
			return false
		}
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				rootLease = g.Lease.ID
				held[rootLease] = api.ClaimResponse{ID: rootLease, GPUs: []int{g.Index}}
				everSeen[rootLease] = "root"
				return true
			}
		}
		return false
	})

	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var mine, myEntries, myBookings []string
			for {
				select {
				case <-stop:
					return
				default:
				}
				gate.RLock()
				switch x := rng.IntN(100); {
				case x < 55 || len(mine) > 3: // claim, and release most
					if len(mine) > 3 || rng.IntN(2) == 0 && len(mine) > 0 {
						id := mine[0]
						mine = mine[1:]
						err := retry(func() error {
							_, err := cl.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
							return err
						})
						mu.Lock()
						if err == nil {
							stats.releases.Add(1)
						} else {
							// Refused as the power went, or its answer lost:
							// it may be released or not.
							unknown[id] = true
						}
						delete(held, id)
						mu.Unlock()
						break
					}
					req := api.ClaimRequest{Count: 1 + rng.IntN(2), Duration: "1h", RequestID: api.NewRequestID()}
					if rng.IntN(5) == 0 {
						// A run: a tmux session, and a kept run written
						// when it starts (agent/node/keptruns.go).
						req.Run = &api.RunSpec{Command: []string{"sleep", "3600"}, Dir: "/tmp"}
					}
					var r api.ClaimResponse
					err := retry(func() (err error) { r, err = cl.Claim(ctx, req); return err })
					if err != nil {
						break // refused (the node is full, or the store failed as the power went)
					}
					mu.Lock()
					if prev, ok := everSeen[r.ID]; ok && prev != req.RequestID {
						failures = append(failures, fmt.Sprintf("lease id %s acknowledged for two different claims: a grant was lost in a cut and its token given again", r.ID))
					}
					everSeen[r.ID] = req.RequestID
					held[r.ID] = r
					mu.Unlock()
					stats.claims.Add(1)
					mine = append(mine, r.ID)
				case x < 80 && len(myEntries) < 4: // queue a request (some arrays) behind the root
					req := api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", RequestID: api.NewRequestID()}, After: []string{root.ID}}
					if rng.IntN(3) == 0 {
						req.Array = "0-3%2"
						req.Claim.Run = &api.RunSpec{Command: []string{"sleep", "3600"}, Dir: "/tmp"}
					}
					var s api.Submitted
					if err := retry(func() (err error) { s, err = cl.Submit(ctx, req); return err }); err != nil {
						refusedOnce.Do(func() { t.Logf("a submission refused (as the power went, or by a cap): %v", err) })
						break
					}
					mu.Lock()
					queued[s.ID] = true
					mu.Unlock()
					stats.submits.Add(1)
					if req.Array != "" {
						stats.arrays.Add(1)
					}
					myEntries = append(myEntries, s.ID)
				case x < 90 && len(myEntries) > 0: // cancel the oldest
					id := myEntries[0]
					myEntries = myEntries[1:]
					err := retry(func() error { return cl.Cancel(ctx, id) })
					mu.Lock()
					if err != nil {
						unknown[id] = true
					} else {
						stats.cancels.Add(1)
					}
					delete(queued, id)
					mu.Unlock()
				default: // book a GPU two days ahead, or give the oldest booking back
					if len(myBookings) >= 2 {
						id := myBookings[0]
						myBookings = myBookings[1:]
						err := retry(func() error {
							_, err := cl.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
							return err
						})
						mu.Lock()
						if err != nil {
							unknown[id] = true
						}
						delete(booked, id)
						mu.Unlock()
						break
					}
					req := api.BookRequest{Count: 1, Start: time.Now().Add(48*time.Hour + time.Duration(rng.IntN(240))*time.Hour).Truncate(time.Minute), Duration: "1h", RequestID: api.NewRequestID()}
					var l struct{ ID string }
					if err := retry(func() error {
						b, err := cl.Book(ctx, req)
						l.ID = b.ID
						return err
					}); err != nil {
						break
					}
					mu.Lock()
					booked[l.ID] = true
					mu.Unlock()
					stats.bookings.Add(1)
					myBookings = append(myBookings, l.ID)
				}
				gate.RUnlock()
			}
		}(w)
	}

	check := func(when string) {
		b, err := cl.Board(ctx)
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
		bk, err := cl.Bookings(ctx)
		if err != nil {
			fail("%s: bookings: %v", when, err)
			return
		}
		bookings := map[string]bool{}
		for _, l := range bk.Bookings {
			bookings[l.ID] = true
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
				failures = append(failures, fmt.Sprintf("%s: GPU %d is held by %s, which no client was told of", when, g, id))
			}
		}
		for id := range queued {
			s, err := cl.EntryStatus(ctx, id)
			if err != nil || s.State == queue.EntryUnknown || s.State == queue.EntryCancelled {
				failures = append(failures, fmt.Sprintf("%s: acknowledged queued request %s is gone (state %q, err %v)", when, id, s.State, err))
			}
		}
		for id := range booked {
			if !bookings[id] {
				failures = append(failures, fmt.Sprintf("%s: acknowledged booking %s is gone", when, id))
			}
		}
	}

	start := time.Now()
	done := 0
	for k := 0; k < cuts; k++ {
		agentLife(rng)
		fs.Freeze()
		p.kill9(t)
		torn := k%3 == 2
		var err error
		if torn {
			err = fs.CutTorn()
		} else {
			err = fs.Cut()
		}
		if err != nil {
			t.Fatalf("cut %d: %v", k+1, err)
		}
		p.start(t)
		gate.Lock()
		check(fmt.Sprintf("after cut %d (torn %v)", k+1, torn))
		gate.Unlock()
		done++
		mu.Lock()
		n := len(failures)
		mu.Unlock()
		if n > 0 {
			break
		}
	}
	close(stop)
	wg.Wait()
	st := fs.Stats()
	t.Logf("%d power cuts (%d torn) in %s: %d unsynced operations dropped, %d kept by torn cuts; %d fsyncs, %d directory fsyncs; %d claims acknowledged, %d released; %d queued requests acknowledged (%d arrays), %d cancelled; %d bookings acknowledged; %d failures",
		st.Cuts, st.TornCuts, time.Since(start).Round(time.Second), st.Dropped, st.Kept, st.Syncs, st.DirSyncs,
		stats.claims.Load(), stats.releases.Load(), stats.submits.Load(), stats.arrays.Load(), stats.cancels.Load(), stats.bookings.Load(), len(failures))
	for _, f := range failures {
		t.Error(f)
	}
	if stats.claims.Load() == 0 || stats.submits.Load() == 0 {
		t.Fatal("no claim or no submission was acknowledged: the cuts proved nothing")
	}
}

// listDir names the files in dir with their sizes, for a failure's message.
func listDir(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "%s (%d bytes) ", e.Name(), fi.Size())
		}
	}
	return b.String()
}
