package agent_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// TestReleasedWorkStillExitingIsNoSquatter: after a release the lease's
// process takes a moment to exit; within lease.EndGrace the GPU shows it but
// is not flagged squatted and no squatter event is recorded. A process still
// there after the grace is a squatter as before.
func TestReleasedWorkStillExitingIsNoSquatter(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Clock: fake, Sim: "2xL40S"})
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getuid()
	if err := n.Probe.SetLoad(sim.Load{GPUs: map[int]sim.GPULoad{0: {UtilizationPct: 90, Processes: []sim.LoadProcess{{PID: 733, UID: &me, Command: "python3", UsedMemoryMiB: 1000}}}}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the holder's process on GPU 0", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return len(b.Nodes[0].GPUs[0].Processes) == 1
	})
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	squatted := func() bool {
		b, _ := n.Client.Board(ctx(t))
		g := b.Nodes[0].GPUs[0]
		if g.Lease != nil || len(g.Processes) != 1 {
			t.Fatalf("GPU 0 after the release: lease %v, processes %v; want none and the exiting one", g.Lease, g.Processes)
		}
		return slices.Contains(g.Flags, lease.FlagSquatted)
	}
	squatterEvents := func() int {
		l, err := n.Client.Events(ctx(t), api.EventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, e := range l.Events {
			if e.Kind == event.EventSquatter {
				k++
			}
		}
		return k
	}
	// Probe after probe through most of the grace: no flag, no event.
	for range 20 {
		fake.Advance(time.Second)
		poll.Never(t, 50*time.Millisecond, "GPU 0 flagged squatted within the grace", squatted)
	}
	if k := squatterEvents(); k != 0 {
		t.Fatalf("%d squatter events within the grace, want none", k)
	}
	agenttest.Tick(t, fake, time.Second, 5*time.Second, "GPU 0 squatted once the grace is over", squatted)
	agenttest.Eventually(t, 5*time.Second, "a squatter event once the grace is over", func() bool { return squatterEvents() == 1 })
}
