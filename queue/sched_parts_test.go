package queue_test

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// booked is a booking of c on gpus from start until end on node name.
func booked(name string, token uint64, c lease.Caller, gpus []int, start, end time.Time) lease.Lease {
	b := on(token, c, gpus, start, end)
	b.Node, b.ID, b.Booked = name, lease.LeaseID(name, token), true
	return b
}

// Backfill plans around a booking: a run that would overlap it waits until
// it ends; one that ends before it starts now.
func TestScheduleAroundBooking(t *testing.T) {
	n := snode("gpu-01", 4)
	n.Bookings = []lease.Lease{booked("gpu-01", 9, carol, gpus(0, 3), t0.Add(2*time.Hour), t0.Add(5*time.Hour))}
	entries := []queue.QueueEntry{
		ask("gpu-01-q1", alice, 1, 2, 4*time.Hour, t0),
		ask("gpu-01-q2", bob, 1, 2, time.Hour, t0.Add(time.Minute)),
	}
	p := queue.Schedule(entries, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	// The 4h run is the head: it keeps GPUs 0,1 for when the booking ends.
	checkList(t, "starts", started(p), []string{"gpu-01-q2@gpu-01:[2 3] backfill"})
	if r := ranked(t, p, "gpu-01-q1"); !r.EstStart.Equal(t0.Add(5 * time.Hour)) {
		t.Errorf("the 4h run is estimated to start %s, want when the booking ends (%s)", r.EstStart, t0.Add(5*time.Hour))
	}
	// A booking on two GPUs leaves the others to anyone.
	n.Bookings = []lease.Lease{booked("gpu-01", 9, carol, gpus(0, 1), t0.Add(2*time.Hour), t0.Add(5*time.Hour))}
	p = queue.Schedule(entries[:1], []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	checkList(t, "starts beside a booking", started(p), []string{"gpu-01-q1@gpu-01:[2 3]"})
	// A booking whose time has come holds its GPUs until it ends.
	n.Bookings = []lease.Lease{booked("gpu-01", 9, carol, gpus(0, 3), t0.Add(-time.Minute), t0.Add(time.Hour))}
	p = queue.Schedule(entries[1:], []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	checkList(t, "starts while a booking runs", started(p), nil)
	if r := ranked(t, p, "gpu-01-q2"); !r.EstStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("estimated start %s, want the booking's end", r.EstStart)
	}
}

// sharedEntry is c's queued request for a budget of mib.
func sharedEntry(id string, c lease.Caller, mib uint64, at time.Time) queue.QueueEntry {
	e := ask(id, c, 1, 1, time.Hour, at)
	e.MemMiB = mib
	return e
}

func TestScheduleShared(t *testing.T) {
	n := snode("gpu-01", 2, on(1, carol, []int{1}, t0, t0.Add(2*time.Hour)))
	entries := []queue.QueueEntry{
		sharedEntry("gpu-01-q1", alice, 40<<10, t0),
		sharedEntry("gpu-01-q2", bob, 30<<10, t0.Add(time.Second)),
		sharedEntry("gpu-01-q3", alice, 20<<10, t0.Add(2*time.Second)),
		ask("gpu-01-q4", bob, 1, 1, time.Hour, t0.Add(3*time.Second)),
	}
	p := queue.Schedule(entries, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	// The two first budgets pack on GPU 0; the third does not fit beside
	// them (81559 MiB), nor does the whole-GPU run: GPU 1 is carol's.
	checkList(t, "starts", started(p), []string{"gpu-01-q1@gpu-01:[0]", "gpu-01-q2@gpu-01:[0]"})
	r := ranked(t, p, "gpu-01-q3")
	if r.Waiting != "needs 20 GiB on one GPU, at most 9.6 GiB free on any" || !r.EstStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("the third budget waits %q from %s, want to say what is free and to start when the first two end", r.Waiting, r.EstStart)
	}
	// A budget fits beside shared leases already running.
	a := on(2, alice, []int{0}, t0, t0.Add(time.Hour))
	a.MemMiB, a.Share = 40<<10, 0.5
	n = snode("gpu-01", 2, on(1, carol, []int{1}, t0, t0.Add(2*time.Hour)), a)
	p = queue.Schedule(entries[1:2], []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	checkList(t, "beside a running budget", started(p), []string{"gpu-01-q2@gpu-01:[0]"})
	p = queue.Schedule(entries[3:], []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
	checkList(t, "a whole GPU never takes a shared one", started(p), nil)
}

// MIG GPUs are not whole GPUs; tags and pools choose the node.
func TestScheduleMIGAndPools(t *testing.T) {
	a := snode("a", 2)
	a.Snap.GPUs[0].MIG = nodeprobe.MIGEnabled
	a.Snap.Host.Tags = []string{"h100"}
	b := snode("b", 2)
	b.Snap.Host.Tags = []string{"l40s"}
	e := ask("a-q1", alice, 1, 2, time.Hour, t0)
	e.Origin = "a"
	p := queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b}, nil, t0, queue.SchedConfig{})
	checkList(t, "2 GPUs where one is MIG", started(p), []string{"a-q1@b:[0 1]"})
	e.GPUsPerNode, e.Tags = 1, []string{"h100"}
	p = queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b}, nil, t0, queue.SchedConfig{})
	checkList(t, "--pool h100", started(p), []string{"a-q1@a:[1]"})
	cfg := queue.SchedConfig{Pools: lease.Pools{"h100": {Users: []string{"bob"}}}}
	p = queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b}, nil, t0, cfg)
	if len(p.Start) != 0 || p.Order[0].Waiting == "" {
		t.Errorf("a pool closed to alice: starts %v, waiting %q; want it to wait, saying why", started(p), p.Order[0].Waiting)
	}
	e.Tags = nil
	p = queue.Schedule([]queue.QueueEntry{e}, []lease.SchedNode{a, b}, nil, t0, cfg)
	checkList(t, "alice outside the closed pool", started(p), []string{"a-q1@b:[0]"})
	if err := queue.CheckFeasible(queue.QueueEntry{Nodes: 1, GPUsPerNode: 1, Tags: []string{"a100"}}, []lease.SchedNode{a, b}, "", nil); err == nil ||
		err.Error() != "no node is in pool a100 (the pools are h100, l40s): ask for one of those, or leave --pool out" {
		t.Errorf("feasibility of an unknown pool: %v", err)
	}
}

// A pool's MaxGPUs counts what the user holds there and starts in the pass.
func TestSchedulePoolMaxGPUs(t *testing.T) {
	a := snode("a", 4, on(1, alice, []int{0}, t0, t0.Add(time.Hour)))
	a.Snap.Host.Tags = []string{"h100"}
	b := snode("b", 4)
	cfg := queue.SchedConfig{Pools: lease.Pools{"h100": {MaxGPUs: 2}}}
	e1, e2 := ask("a-q1", alice, 1, 1, time.Hour, t0), ask("a-q2", alice, 1, 1, time.Hour, t0.Add(time.Second))
	e1.Tags, e2.Tags = []string{"h100"}, []string{"h100"}
	e1.Origin, e2.Origin = "a", "a"
	p := queue.Schedule([]queue.QueueEntry{e1, e2}, []lease.SchedNode{a, b}, nil, t0, cfg)
	checkList(t, "starts within the pool's 2 GPUs per person", started(p), []string{"a-q1@a:[1]"})
	if r := ranked(t, p, "a-q2"); r.Waiting != "no node that is up has 1 working GPU in pool h100 (pool limits keep it off a: pool h100 allows 2 GPUs per person and alice holds 2 there)" {
		t.Errorf("the second waits %q, want it to say why", r.Waiting)
	}
}

// Quotas count the share of a GPU a budget holds: alice, with a quota of
// one GPU and half a GPU in a running budget, starts a quarter-GPU budget
// within her quota, and the pass counts it so (a whole GPU after it would
// borrow). Before, every part counted as a whole GPU.
func TestScheduleQuotasCountShares(t *testing.T) {
	a := on(2, alice, []int{0}, t0, t0.Add(time.Hour))
	a.MemMiB, a.Share = 40<<10, 0.5
	n := snode("gpu-01", 2, a)
	cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 1}}
	tests := []struct {
		name     string
		entry    queue.QueueEntry
		borrowed bool
	}{
		{"a quarter-GPU budget beside half a GPU", sharedEntry("gpu-01-q1", alice, 20<<10, t0), false},
		{"a whole GPU beside half a GPU", ask("gpu-01-q2", alice, 1, 1, time.Hour, t0), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule([]queue.QueueEntry{tt.entry}, []lease.SchedNode{n}, nil, t0, cfg)
			if len(p.Start) != 1 || p.Start[0].Borrowed != tt.borrowed {
				t.Fatalf("starts %+v; want one, borrowed %v", p.Start, tt.borrowed)
			}
		})
	}
	used, _ := cfg.QuotaUse("alice", []lease.Lease{a, a})
	if used != 1 {
		t.Errorf("two half-GPU budgets count %v GPUs, want 1", used)
	}
}
