package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// splitNode is a node whose GPU 0 is split 3g.40gb+2g.20gb+1g.10gb (of 80
// GiB) and GPU 1 is whole, with leases; a lease whose MIG is a profile
// holds that instance.
func splitNode(name string, leases ...lease.Lease) lease.SchedNode {
	n := snode(name, 2)
	g := &n.Snap.GPUs[0]
	g.MIG, g.MemoryTotalMiB = nodeprobe.MIGEnabled, 80<<10
	n.Snap.GPUs[1].MemoryTotalMiB = 80 << 10
	for k, p := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
		g.MIGDevices = append(g.MIGDevices, nodeprobe.MIGDevice{Index: k, UUID: fmt.Sprintf("MIG-%s-%d", name, k), Profile: p, MemoryTotalMiB: uint64(40>>k) << 10})
	}
	for i := range leases {
		l := &leases[i]
		l.Node, l.ID = name, lease.LeaseID(name, l.Token)
		for _, d := range g.MIGDevices {
			if l.MIG == d.Profile {
				l.MIG, l.Share = d.UUID, float64(d.MemoryTotalMiB)/float64(g.MemoryTotalMiB)
			}
		}
	}
	n.Leases = leases
	return n
}

func askMIG(id string, c lease.Caller, sel string, at time.Time) queue.QueueEntry {
	e := ask(id, c, 1, 1, time.Hour, at)
	e.MIG = sel
	return e
}

func onMIG(token uint64, c lease.Caller, profile string, start, end time.Time) lease.Lease {
	l := on(token, c, []int{0}, start, end)
	l.MIG = profile
	return l
}

func TestScheduleMIG(t *testing.T) {
	idle := lease.IdleTrackerFrom(map[int]time.Time{0: t0.Add(-2 * time.Hour)})
	withIdle := func(n lease.SchedNode) lease.SchedNode { n.Idle = idle; return n }
	for _, tt := range []struct {
		name    string
		nodes   []lease.SchedNode
		entries []queue.QueueEntry
		cfg     queue.SchedConfig
		// starts are "entry@instance UUID", reclaims "lease:reason"; waiting
		// the start of each waiting entry's reason.
		starts, reclaims []string
		waiting          map[string]string
	}{
		{
			name:    "a free instance starts, a held one waits, the whole GPU is not its",
			nodes:   []lease.SchedNode{splitNode("gpu-01", onMIG(1, bob, "3g.40gb", t0.Add(-time.Hour), t0.Add(time.Hour)))},
			entries: []queue.QueueEntry{askMIG("q1", alice, "3g.40gb", t0), askMIG("q2", alice, "1g.10gb", t0.Add(time.Second)), ask("q3", carol, 1, 1, time.Hour, t0.Add(2*time.Second))},
			starts:  []string{"q2@MIG-gpu-01-2", "q3@gpu-01/1"},
			waiting: map[string]string{"q1": "needs a MIG instance 3g.40gb, none free"},
		},
		{
			name:    "two for one instance: the first gets it",
			nodes:   []lease.SchedNode{splitNode("gpu-01")},
			entries: []queue.QueueEntry{askMIG("q1", alice, "2g.20gb", t0), askMIG("q2", bob, "0:1", t0.Add(time.Second))},
			starts:  []string{"q1@MIG-gpu-01-1"},
			waiting: map[string]string{"q2": "needs a MIG instance 0:1, none free"},
		},
		{
			name:     "an idle instance is reclaimed once, for the first that waits",
			nodes:    []lease.SchedNode{withIdle(splitNode("gpu-01", onMIG(1, bob, "3g.40gb", t0.Add(-2*time.Hour), t0.Add(3*time.Hour))))},
			entries:  []queue.QueueEntry{askMIG("q1", alice, "3g.40gb", t0), askMIG("q2", carol, "3g.40gb", t0.Add(time.Second))},
			reclaims: []string{"gpu-01-1:idle"},
			waiting:  map[string]string{"q1": "next to start: reclaiming a MIG instance 3g.40gb (idle)", "q2": "needs a MIG instance 3g.40gb, none free"},
		},
		{
			name: "a borrowed instance is reclaimed for someone within quota, not for a borrower",
			nodes: []lease.SchedNode{splitNode("gpu-01", func() lease.Lease {
				l := onMIG(1, bob, "3g.40gb", t0.Add(-time.Hour), t0.Add(3*time.Hour))
				l.Borrowed = true
				return l
			}())},
			entries:  []queue.QueueEntry{askMIG("q1", carol, "3g.40gb", t0), askMIG("q2", alice, "3g.40gb", t0.Add(time.Second))},
			cfg:      queue.SchedConfig{Quotas: map[string]int{"alice": 1}},
			reclaims: []string{"gpu-01-1:quota"},
			waiting:  map[string]string{"q1": "needs a MIG instance 3g.40gb, none free", "q2": "next to start: reclaiming a MIG instance 3g.40gb (quota)"},
		},
		{
			name: "a pool's max_gpus counts the instance's share",
			nodes: []lease.SchedNode{func() lease.SchedNode {
				n := splitNode("gpu-01", onMIG(1, alice, "3g.40gb", t0, t0.Add(time.Hour)))
				n.Snap.Host.Tags = []string{"a100"}
				return n
			}()},
			entries: []queue.QueueEntry{askMIG("q1", alice, "2g.20gb", t0), ask("q2", alice, 1, 1, time.Hour, t0.Add(time.Second))},
			cfg:     queue.SchedConfig{Pools: lease.Pools{"a100": {MaxGPUs: 1}}},
			starts:  []string{"q1@MIG-gpu-01-1"},
			waiting: map[string]string{"q2": "no node that is up has 1 working GPU (pool limits keep it off gpu-01: pool a100 allows 1 GPU per person and alice holds 0.75 there)"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule(tt.entries, tt.nodes, nil, t0, tt.cfg)
			var starts, reclaims []string
			for _, s := range p.Start {
				what := s.Ranks[0].Node + "/" + fmt.Sprint(s.Ranks[0].GPUs[0])
				if s.Entry.MIG != "" {
					for _, d := range tt.nodes[0].Snap.GPUs[0].MIGDevices {
						if strings.EqualFold(d.Profile, s.Entry.MIG) || s.Entry.MIG == fmt.Sprintf("0:%d", d.Index) {
							what = d.UUID
						}
					}
				}
				starts = append(starts, s.Entry.ID+"@"+what)
			}
			for _, r := range p.Reclaim {
				reclaims = append(reclaims, r.Lease.ID+":"+r.Reason)
			}
			if fmt.Sprint(starts) != fmt.Sprint(tt.starts) || fmt.Sprint(reclaims) != fmt.Sprint(tt.reclaims) {
				t.Errorf("starts %v, reclaims %v; want %v, %v", starts, reclaims, tt.starts, tt.reclaims)
			}
			for _, r := range p.Order {
				if want, ok := tt.waiting[r.Entry.ID]; ok && !strings.HasPrefix(r.Waiting, want) {
					t.Errorf("%s waits for %q, want %q", r.Entry.ID, r.Waiting, want)
				}
			}
		})
	}
}

// A whole-GPU head reclaims the budgets on a shared GPU together, by the
// rules for whole leases: every one reclaimable, none of its own user's.
func TestScheduleHeadReclaimsBudgets(t *testing.T) {
	budget := func(token uint64, c lease.Caller, borrowed bool) lease.Lease {
		l := on(token, c, []int{0}, t0.Add(-2*time.Hour), t0.Add(3*time.Hour))
		l.MemMiB, l.Share, l.Borrowed = 20<<10, 0.25, borrowed
		return l
	}
	for _, tt := range []struct {
		name     string
		leases   []lease.Lease
		idle     bool
		cfg      queue.SchedConfig
		reclaims string
		waiting  string
	}{
		{"idle budgets of two people", []lease.Lease{budget(1, bob, false), budget(2, carol, false)}, true, queue.SchedConfig{},
			"[gpu-01-1:idle gpu-01-2:idle]", "next to start: reclaiming 1 GPU (idle)"},
		{"one of them the waiting user's", []lease.Lease{budget(1, bob, false), budget(2, alice, false)}, true, queue.SchedConfig{}, "[]", "next to start: GPU 0 of gpu-01 is held by"},
		{"all borrowed, for someone within quota", []lease.Lease{budget(1, bob, true), budget(2, carol, true)}, false, queue.SchedConfig{Quotas: map[string]int{"alice": 1}},
			"[gpu-01-1:quota gpu-01-2:quota]", "next to start: reclaiming 1 GPU (quota)"},
		{"one not borrowed", []lease.Lease{budget(1, bob, true), budget(2, carol, false)}, false, queue.SchedConfig{Quotas: map[string]int{"alice": 1}}, "[]", "next to start: GPU 0 of gpu-01 is held by"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := snode("gpu-01", 1, tt.leases...)
			n.Snap.GPUs[0].MemoryTotalMiB = 80 << 10
			if tt.idle {
				n.Idle = lease.IdleTrackerFrom(map[int]time.Time{0: t0.Add(-2 * time.Hour)})
			}
			p := queue.Schedule([]queue.QueueEntry{ask("q1", alice, 1, 1, time.Hour, t0)}, []lease.SchedNode{n}, nil, t0, tt.cfg)
			var reclaims []string
			for _, r := range p.Reclaim {
				reclaims = append(reclaims, r.Lease.ID+":"+r.Reason)
			}
			if fmt.Sprint(reclaims) != tt.reclaims || len(p.Start) != 0 || !strings.HasPrefix(p.Order[0].Waiting, tt.waiting) {
				t.Errorf("reclaims %v, %d starts, waiting %q; want %s, none, %q", reclaims, len(p.Start), p.Order[0].Waiting, tt.reclaims, tt.waiting)
			}
		})
	}
}
