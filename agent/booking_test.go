package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// A booking caps the claims that would overlap it, survives an agent
// restart, is honoured by the queue's backfill, and becomes its holder's
// lease at its time, ending a lease left on its GPUs past its end.
func TestBookingLifecycle(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	users := agenttest.Users{"alice": 2201, "bob": 2202}
	alice, bob := lease.Caller{UID: 2201, User: "alice"}, lease.Caller{UID: 2202, User: "bob"}
	n := agenttest.Start(t, agenttest.Options{Sim: "2xH100-80GB", Clock: fake, Users: users})
	start := fake.Now().Add(2 * time.Hour)
	bk, err := n.As(bob).Book(ctx(t), api.BookRequest{Count: 2, Start: start, Duration: "3h", Note: "deadline run"})
	if err != nil {
		t.Fatal(err)
	}
	if !bk.Booked || len(bk.GPUs) != 2 || !bk.StartedAt.Equal(start.Round(0)) {
		t.Fatalf("booking %+v, want both GPUs from %s", bk, start)
	}
	// A claim now ends when the booking begins, and says so.
	r, err := n.As(alice).Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ExpiresAt.Equal(bk.StartedAt) || !strings.Contains(r.Notice, "bob's booking "+bk.ID) {
		t.Errorf("claim until %s with notice %q, want it to end at %s because of bob's booking", r.ExpiresAt, r.Notice, bk.StartedAt)
	}
	_, err = n.As(alice).Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "3h"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "booked by bob") {
		t.Errorf("a 3h claim across the booking: %v, want a refusal naming it", err)
	}
	if _, err := n.As(alice).Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}

	n.Restart()
	bs, err := n.Client.Bookings(ctx(t))
	if err != nil || len(bs.Bookings) != 1 || bs.Bookings[0].ID != bk.ID || bs.Bookings[0].Note != "deadline run" {
		t.Fatalf("bookings after a restart: %+v, %v; want %s", bs.Bookings, err, bk.ID)
	}
	if b := n.Board(); len(b.Nodes[0].Bookings) != 1 || b.Nodes[0].GPUs[0].Lease != nil {
		t.Errorf("the board shows bookings %v and GPU 0 held by %v; want the booking listed and the GPU free", b.Nodes[0].Bookings, b.Nodes[0].GPUs[0].Lease)
	}

	// Backfill: a 4h run waits for the booking to end; a 1h run starts now.
	long, err := n.As(alice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "4h"}})
	if err != nil {
		t.Fatal(err)
	}
	short, err := n.As(alice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	var shortLease string
	agenttest.Eventually(t, 5*time.Second, "the 1h run to start before the booking", func() bool {
		for _, g := range n.Board().Nodes[0].GPUs {
			if g.Lease != nil && strings.HasPrefix(g.Lease.Entry, short.ID+"#") {
				shortLease = g.Lease.ID
				return true
			}
		}
		return false
	})
	for _, e := range n.Queue().Entries {
		if e.ID == long.ID && (e.Running || !e.EstStart.Equal(bk.ExpiresAt)) {
			t.Errorf("the 4h run: running %v, estimated start %s; want it waiting until the booking ends (%s)", e.Running, e.EstStart, bk.ExpiresAt)
		}
	}

	// At its time the booking becomes bob's lease; alice's 1h run, past
	// its end by then (end action warn keeps it), gives way.
	fake.Advance(2 * time.Hour)
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the booking to become bob's lease", func() bool {
		l := leaseOn(n.Board(), "node01", 0)
		return l != nil && l.ID == bk.ID && !l.Booked && l.User == "bob"
	})
	b := n.Board()
	if l := leaseOn(b, "node01", 1); l == nil || l.ID != bk.ID || len(b.Nodes[0].Bookings) != 0 {
		t.Errorf("GPU 1 held by %v, bookings %v; want bob's lease on both GPUs and no booking left", l, b.Nodes[0].Bookings)
	}
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "bob to hear his booking "+bk.ID+" began", func() bool {
		return strings.Contains(strings.Join(n.BoardAs(bob).Notices, "\n"), "your booking "+bk.ID+" has begun: GPUs 0,1 on node01")
	})
	// Her run's origin tells her it finished, and why: the booking (the
	// lease's own end is not told apart, so she hears of it once).
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "alice to hear her run "+short.ID+" (lease "+shortLease+") ended for the booking", func() bool {
		return strings.Contains(strings.Join(n.BoardAs(alice).Notices, "\n"), short.ID+" finished (ended because a booking of its GPUs began")
	})
}

// `dibs run --at` starts its command under the lease at the booked time.
func TestBookedRunStartsAtItsTime(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "1xH100-80GB", Clock: fake})
	out := filepath.Join(agenttest.PublicDir(t), "ran")
	bk, err := n.Client.Book(ctx(t), api.BookRequest{Count: 1, Start: fake.Now().Add(time.Hour), Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", "echo $CUDA_VISIBLE_DEVICES $DIBS_LEASE_ID > " + out + "; sleep 60"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the booked command ran before its time")
	}
	n.Restart() // the job is kept with the booking
	fake.Advance(time.Hour)
	agenttest.Tick(t, fake, 100*time.Millisecond, 5*time.Second, "the booked command to run", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.TrimSpace(string(b)) == "0 "+bk.ID
	})
	if l := leaseOn(n.Board(), "node01", 0); l == nil || l.Session == "" || l.Job != nil {
		t.Errorf("lease %+v, want the booking's lease with its session", l)
	}
	if err := n.Client.Unbook(ctx(t), bk.ID); err == nil || !strings.Contains(err.Error(), "is a lease now") {
		t.Errorf("unbooking a booking that began: %v, want a refusal saying to release it", err)
	}
}

func TestUnbook(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "1xH100-80GB"})
	bk, err := n.Client.Book(ctx(t), api.BookRequest{Count: 1, Start: time.Now().Add(time.Hour), Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Client.Unbook(ctx(t), bk.ID); err != nil {
		t.Fatal(err)
	}
	if bs, _ := n.Client.Bookings(ctx(t)); len(bs.Bookings) != 0 {
		t.Errorf("bookings after unbook: %v", bs.Bookings)
	}
	if err := n.Client.Unbook(ctx(t), bk.ID); apiCode(err) != "not_found" {
		t.Errorf("unbooking twice: %v, want not_found", err)
	}
	if _, err := n.Client.Book(ctx(t), api.BookRequest{Count: 1, Start: time.Now().Add(-time.Hour), Duration: "1h"}); apiCode(err) != "invalid" || !strings.Contains(err.Error(), "not in the future") {
		t.Errorf("booking the past: %v, want invalid", err)
	}
}
