package agent

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/gossip"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// The fence of services (issue 33). A replica's session runs under a
// watchdog (node.Fence) that stops it when the heartbeat file below is
// older than the grace. The agent touches it every second while it is in
// touch with the cluster: while another member is alive, or while it is
// alone by design (never saw another member and joins none, or every
// other member left for good) — then the file's time is set a century
// ahead, so a single-node cluster never fences. A killed agent touches
// nothing, and one cut off from every other member stops touching: on
// either side of a partition, the copy the other side cannot see stops
// itself about a grace later, when the other side places it again.

// heartbeatEvery is how often the heartbeat is touched.
const heartbeatEvery = time.Second

// aloneAhead is how far ahead an agent alone by design sets the
// heartbeat's time: never stale.
const aloneAhead = 100 * 365 * 24 * time.Hour

// fence is the watchdog's settings: a heartbeat beside the socket (whose
// directory every user reaches), and the grace. A node in no cluster, or
// serving no socket, fences nothing.
func (a *Agent) fence() node.Fence {
	if a.cfg.Cluster == nil || a.cfg.Socket == "" {
		return node.Fence{}
	}
	return node.Fence{File: filepath.Join(filepath.Dir(a.cfg.Socket), "heartbeat"), After: a.cfg.Sched.LostAfter}
}

// startHeartbeat touches the heartbeat once (so replicas started now arm
// their watchdog) and then every heartbeatEvery until the agent stops.
func (a *Agent) startHeartbeat() {
	f := a.fence()
	if f.File == "" {
		return
	}
	a.beat(f.File)
	a.armHeartbeat(f.File)
	a.beatDone = make(chan struct{})
	go func() {
		defer close(a.beatDone)
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-a.ctx.Done():
				return
			case <-t.C:
				a.beat(f.File)
			}
		}
	}()
}

// armHeartbeat makes the heartbeat, dated now, when there is none yet
// (the node's first start; the agent not yet in touch, so beat made
// none): a replica arms its watchdog only when the file exists as it
// starts (node.Fence), and one started before the agent is first in
// touch with the cluster would otherwise never fence itself. A heartbeat
// the agent's last run left keeps its time: a restart within the grace
// keeps its replicas, one past it fences them.
func (a *Agent) armHeartbeat(file string) {
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		return
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		a.log.Warn("service fence: make heartbeat", "file", file, "err", err)
	}
}

// beat touches the heartbeat when this agent is in touch with the
// cluster. The file's time is the wall clock's, as the watchdog's `date`
// reads it, never a test's fake clock.
func (a *Agent) beat(file string) {
	alone, inTouch := a.touch(a.fenceView())
	if !inTouch {
		return
	}
	at := time.Now()
	if alone {
		at = at.Add(aloneAhead)
	}
	if err := os.Chtimes(file, at, at); err != nil {
		if !os.IsNotExist(err) {
			a.log.Warn("service fence: touch heartbeat", "file", file, "err", err)
			return
		}
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			a.log.Warn("service fence: make heartbeat", "file", file, "err", err)
			return
		}
		os.Chtimes(file, at, at)
	}
}

// touch says whether this agent is alone by design (no other member ever
// seen and none to join, or all it saw left for good) and whether it is
// in touch with the cluster: it sees a majority of the members it has
// seen (itself among them, those that left for good not counted), or
// exactly half of them with the lowest-named member on its side. So of
// the two sides of any partition at most one is in touch: the other
// fences its replicas and moves none, and in a cluster of two the
// lowest-named node keeps serving (and takes the other's services)
// while the other is cut off.
func (a *Agent) touch(v queue.ClusterView) (alone, inTouch bool) {
	if a.cfg.Cluster == nil {
		return true, true
	}
	a.seen.mu.Lock()
	defer a.seen.mu.Unlock()
	if a.seen.names == nil {
		a.seen.names = map[string]bool{}
	}
	shown := map[string]*queue.NodeView{}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Self {
			continue
		}
		shown[n.Name] = n
		a.seen.names[n.Name] = true
	}
	total, alive := 1, 1
	lowest, lowestAlive := v.Self, true
	for name := range a.seen.names {
		n := shown[name]
		if n != nil && n.State == queue.NodeLeft {
			continue
		}
		total++
		up := n != nil && n.Alive()
		if up {
			alive++
		}
		if name < lowest {
			lowest, lowestAlive = name, up
		}
	}
	if total == 1 {
		return len(a.seen.names) > 0 || len(a.cfg.Cluster.Join) == 0, len(a.seen.names) > 0 || len(a.cfg.Cluster.Join) == 0
	}
	return false, 2*alive > total || 2*alive == total && lowestAlive
}

// holdService is node.Deps.HoldService: a replica is not started again
// here while the cluster is not heard, while this node is cut off from it
// (its heartbeat is not touched: the watchdog stopped the replica, and
// would stop a new one), or when the service runs on another live node
// under a newer lease (this node was lost and is back; endMovedServices
// ends this copy).
func (a *Agent) holdService(l lease.Lease) bool {
	if a.cfg.Cluster == nil || a.svc == nil {
		return false
	}
	v := a.svc.View()
	if !v.Heard() {
		return true
	}
	if a.fence().File == "" {
		return false
	}
	if _, in := a.touch(a.fenceView()); !in {
		return true
	}
	for i := range v.Nodes {
		if n := &v.Nodes[i]; !n.Self && n.Alive() && newerCopy(n.Leases, l) {
			return true
		}
	}
	return false
}

// heardWithin is how recently a member must have been heard from (it
// answered this agent's probe, or sent newer state) to count as alive for
// the fence. memberlist keeps a member it cannot reach listed through its
// whole suspicion, which a node cut off alone, whose suspicion no other
// member confirms, draws out to SuspicionMaxTimeoutMult times (9 s and
// more, seen in the nemesis) while its own suspect mark lapses and comes
// back: that node went on touching its heartbeat on and off, and its
// replicas outlived the grace by as much. An alive member is probed every
// round (members × the probe interval) and answers at once; twice that,
// and at least 5 s, is a silence no live link keeps. A few seconds of
// silence fence nothing: only a heartbeat untouched for the whole grace
// stops a replica.
func heardWithin(members int) time.Duration {
	return max(5*time.Second, 2*time.Duration(members)*gossip.DefaultProbeInterval)
}

// fenceView is the cluster as the fence judges it: the view, with every
// member not heard from within heardWithin taken for suspect.
func (a *Agent) fenceView() queue.ClusterView { return a.heardView(a.svc.View()) }

// heardView is v with every member not heard from within heardWithin
// taken for suspect: what the fence, and the moves, judge "in touch" by.
func (a *Agent) heardView(v queue.ClusterView) queue.ClusterView {
	cl := a.cluster.Load()
	if cl == nil {
		return v
	}
	heard := map[string]time.Time{}
	for _, p := range cl.c.View() {
		heard[p.Name] = p.HeardAt
	}
	return unheardSuspect(v, heard, time.Now(), heardWithin(len(v.Nodes)))
}

// unheardSuspect is v with every other node that is alive in it but was
// not heard from within d of now (or never) shown suspect.
func unheardSuspect(v queue.ClusterView, heard map[string]time.Time, now time.Time, d time.Duration) queue.ClusterView {
	nodes := slices.Clone(v.Nodes)
	for i := range nodes {
		n := &nodes[i]
		if n.Self || !n.Alive() {
			continue
		}
		if at, ok := heard[n.Name]; !ok || now.Sub(at) > d {
			n.State = queue.NodeSuspect
		}
	}
	v.Nodes = nodes
	return v
}

// seenMembers are the other members an agent has seen since it started:
// a member that vanished from the view (reaped after a partition) still
// counts, so a cut-off agent never takes itself for alone.
type seenMembers struct {
	mu    sync.Mutex
	names map[string]bool
}
