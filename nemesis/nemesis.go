package nemesis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// between is a random duration in [lo, hi].
func (h *harness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)+1))
}

// fault injects one fault of kind, holds it, heals it, and measures how
// long the boards take to agree again.
func (h *harness) fault(kind FaultKind) {
	m := h.members[h.rng.IntN(len(h.members))]
	f := Fault{Kind: kind, Nodes: []string{m.name}, Start: h.rec.now()}
	hold := h.between(time.Second, 6*time.Second)
	var heal func()
	switch kind {
	case FaultKill:
		hold = h.between(time.Second, 8*time.Second)
		heal = h.kill(m)
	case FaultRestart:
		// Mostly back within the grace (5 s), as a restart is; sometimes
		// past it, as a slow upgrade may be.
		hold = h.between(500*time.Millisecond, 7*time.Second)
		heal = h.restart(m)
	case FaultReboot, FaultPowerCut:
		// A reboot takes a while; the grace (5 s) may pass or not.
		hold = h.between(time.Second, 8*time.Second)
		heal = h.reboot(m, kind == FaultPowerCut)
		f.Off = h.rec.now()
	case FaultPause:
		// Longer than the failure detector takes to call it dead.
		hold = h.between(4*time.Second, 9*time.Second)
		m.clock.Pause()
		h.net.isolate(m.name, true)
		heal = func() {
			h.net.isolate(m.name, false)
			m.clock.Resume()
		}
	case FaultPartition:
		var side, all []string
		for _, o := range h.members {
			all = append(all, o.name)
		}
		perm := h.rng.Perm(len(all))
		for _, i := range perm[:1+h.rng.IntN(len(all)-1)] {
			side = append(side, all[i])
		}
		h.partitions++
		if grace := h.sched.LostAfter; h.partitions%2 == 1 {
			// Every other partition (the first among them) lasts past
			// the grace, long enough for the side cut off to fence its
			// services' replicas (5 s unheard before it stops touching
			// its heartbeat, then the watchdog's grace in whole seconds
			// and one more: up to 14 s) and for the other to place them
			// again: cut off the node of a service, when one runs.
			hold = h.between(grace+10*time.Second, grace+13*time.Second)
			f.Detail = fmt.Sprintf("held past the grace (%s)", grace)
			if h.svc != nil {
				if n := h.svc.somewhere(); n != "" {
					side = []string{n}
				}
			}
		}
		slices.Sort(side)
		f.Nodes = side
		h.net.partition(side, all)
		heal = h.net.heal
	case FaultLoss, FaultDelay, FaultDuplicate:
		f.Nodes = nil
		switch kind {
		case FaultLoss:
			h.net.lossy(0.05, 0, 0, 0)
			f.Detail = "5% of packets lost"
		case FaultDelay:
			h.net.lossy(0, 0, 5*time.Millisecond, 80*time.Millisecond)
			f.Detail = "packets and streams 5–80 ms late"
		default:
			h.net.lossy(0, 0.2, 0, 0)
			f.Detail = "20% of packets sent twice"
		}
		heal = h.net.heal
	case FaultClockStep:
		step := h.between(time.Minute, 3*time.Hour)
		if h.rng.IntN(2) == 0 {
			step = -step
		}
		f.Detail = fmt.Sprintf("wall clock %+v", step)
		m.clock.Step(step)
		heal = func() { m.clock.Step(0) }
	case FaultFsync, FaultDiskFull, FaultSlowDisk:
		m.mu.Lock()
		st := m.store.Store
		m.mu.Unlock()
		switch kind {
		case FaultFsync:
			st.SetFault(storetest.SyncError)
		case FaultDiskFull:
			st.SetFault(storetest.DiskFull)
		default:
			d := h.between(50*time.Millisecond, 400*time.Millisecond)
			f.Detail = fmt.Sprintf("every write takes %s", d)
			st.SetDelay(d)
		}
		heal = func() {
			st.SetFault(storetest.NoFault)
			st.SetDelay(0)
		}
	}
	if kind == FaultLoss {
		h.watchFalseDead(hold)
	} else {
		time.Sleep(hold)
	}
	heal()
	f.Healed = h.rec.now()
	h.rec.fault(f)
	h.converge(kind)
	time.Sleep(h.between(500*time.Millisecond, 2*time.Second))
}

// watchFalseDead watches every board for d while only packets are lost:
// no member may be called dead.
func (h *harness) watchFalseDead(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for _, v := range h.members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			b, err := v.client.WithoutRetry().Board(ctx)
			cancel()
			if err != nil {
				continue
			}
			for _, n := range b.Nodes {
				if n.State == api.NodeDead || n.State == api.NodeLeft || n.State == api.NodeRestarting {
					h.rec.falseDead(Membership{At: h.rec.now(), Observer: v.name, Member: n.Name, State: n.State})
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// converge measures how long after a heal every agent's board agrees with
// the owners' own: every node alive, no lease its owner held throughout the
// look missing, and no lease its owner had already ended still shown.
// Clients go on while it looks, so a lease that began or ended during a
// look is held against nobody.
func (h *harness) converge(kind FaultKind) {
	at := h.rec.now()
	start := time.Now()
	for time.Since(start) < 3*ConvergeWithin {
		if h.agree() {
			h.rec.heal(Heal{Fault: kind, At: at, Took: time.Since(start), Converged: true})
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.rec.heal(Heal{Fault: kind, At: at, Took: time.Since(start), Converged: false})
}

// truth is every node's leases as its own agent has them, nil while any
// agent does not answer.
func (h *harness) truth() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, m := range h.members {
		b, ok := h.board(m)
		if !ok {
			return nil
		}
		out[m.name] = leaseIDs(b, m.name)
	}
	return out
}

// agree looks once: the owners' truth, every agent's board, the owners'
// truth again.
func (h *harness) agree() bool {
	began := h.rec.now()
	before := h.truth()
	if before == nil {
		return false
	}
	views := map[string]api.Board{}
	for _, v := range h.members {
		b, ok := h.board(v)
		if !ok {
			return false
		}
		views[v.name] = b
	}
	after := h.truth()
	if after == nil {
		return false
	}
	for viewer, b := range views {
		for _, o := range h.members {
			if state(b, o.name) != api.NodeAlive {
				return false
			}
			if o.name == viewer {
				continue // an agent's own GPUs are the truth
			}
			view := leaseIDs(b, o.name)
			for id := range before[o.name] {
				if after[o.name][id] && !view[id] {
					return false // held all along, not shown
				}
			}
			for id := range view {
				if !before[o.name][id] && !after[o.name][id] && h.rec.endedBefore(o.name, id, began) {
					return false // over before the look began, still shown
				}
			}
		}
	}
	return true
}

func (h *harness) board(m *member) (api.Board, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := m.client.WithoutRetry().Board(ctx)
	return b, err == nil
}

func state(b api.Board, node string) string {
	for _, n := range b.Nodes {
		if n.Name == node {
			return n.State
		}
	}
	return ""
}

// leaseIDs are the leases a board shows on node's GPUs.
func leaseIDs(b api.Board, node string) map[string]bool {
	ids := map[string]bool{}
	for _, g := range holders(b, node) {
		if g != "" {
			ids[g] = true
		}
	}
	return ids
}
