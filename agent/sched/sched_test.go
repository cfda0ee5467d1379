package sched_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/agent/sched"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/queue"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// cluster is a few agents' peer muxes wired to one another in process: the
// scheduler's calls go through the real envelope, encoding and checks of
// the peer protocol, and every node's answer is recorded in arrival order.
type cluster struct {
	muxes map[string]*peer.Mux
	// refuse maps "node phase" to the refusal that node answers.
	refuse map[string]error

	mu    sync.Mutex
	calls []string
	token uint64
}

// Request implements peer.Transport by serving on the named node's mux.
func (c *cluster) Request(ctx context.Context, node, op string, body []byte) ([]byte, refusal.Code, string, error) {
	m, ok := c.muxes[node]
	if !ok {
		return nil, "", "", fmt.Errorf("no node %s", node)
	}
	reply, code, msg := m.Serve(ctx, "node01", op, body)
	return reply, code, msg, nil
}

// Protocols implements peer.Transport: every node speaks this release.
func (c *cluster) Protocols(string) (int, int, bool) { return peer.MinVersion, peer.Version, true }

func (c *cluster) record(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *cluster) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func newCluster(names ...string) *cluster {
	c := &cluster{muxes: map[string]*peer.Mux{}, refuse: map[string]error{}}
	for _, name := range names {
		m := peer.NewMux(name)
		m.SetTransport(c)
		peer.Handle(m, peer.Place, func(_ context.Context, _ string, _ peer.Actor, r peer.PlaceRequest) (peer.PlaceReply, error) {
			c.record(fmt.Sprintf("%s place %s", name, r.Key))
			return peer.PlaceReply{}, c.refuse[name+" place"]
		})
		peer.Handle(m, peer.Start, func(_ context.Context, _ string, who peer.Actor, r peer.StartRequest) (peer.StartReply, error) {
			c.record(fmt.Sprintf("%s %s %s gpus %v rank %d as %s", name, r.Phase, r.Entry.Key(), r.GPUs, r.Rank, who.User))
			if err := c.refuse[name+" "+string(r.Phase)]; err != nil {
				return peer.StartReply{}, err
			}
			c.mu.Lock()
			c.token++
			tok := c.token
			c.mu.Unlock()
			return peer.StartReply{Host: name, Port: 29500, Lease: lease.Lease{
				ID: fmt.Sprintf("%s-%d", name, tok), Node: name, User: r.Entry.User, UID: r.Entry.UID, GPUs: r.GPUs,
				Token: tok, Entry: r.Entry.Key(), StartedAt: t0, ExpiresAt: t0.Add(r.Entry.Duration),
			}}, nil
		})
		peer.Handle(m, peer.Started, func(_ context.Context, _ string, _ peer.Actor, r peer.StartedRequest) (peer.Empty, error) {
			c.record(fmt.Sprintf("%s started %s", name, r.Key))
			return peer.Empty{}, nil
		})
		peer.Handle(m, peer.Release, func(_ context.Context, _ string, who peer.Actor, r peer.ReleaseRequest) (peer.ReleaseReply, error) {
			c.record(fmt.Sprintf("%s release %v as %s", name, r.IDs, who.User))
			return peer.ReleaseReply{}, nil
		})
		peer.Handle(m, peer.Refused, func(_ context.Context, _ string, _ peer.Actor, r peer.RefusedRequest) (peer.Empty, error) {
			c.record(fmt.Sprintf("%s refused %s on %s: %s", name, r.Key, r.Node, r.Reason))
			return peer.Empty{}, nil
		})
		peer.Handle(m, peer.Preempt, func(_ context.Context, _ string, _ peer.Actor, r peer.PreemptRequest) (peer.Empty, error) {
			c.record(fmt.Sprintf("%s preempt %s (%s)", name, r.Lease, r.Reason))
			return peer.Empty{}, nil
		})
		c.muxes[name] = m
	}
	return c
}

// nodeView is an alive node of four simulated H100s.
func nodeView(t *testing.T, name string) queue.NodeView {
	t.Helper()
	p, err := sim.New(sim.Options{Spec: "4xH100-80GB", HostName: name, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	snap.Host.Name = name
	return queue.NodeView{Name: name, State: queue.NodeAlive, HasState: true, Snap: snap, Protocol: peer.Version}
}

func entry(id, user string, uid, nodes, gpus int, submitted time.Duration) queue.QueueEntry {
	return queue.QueueEntry{ID: id, Origin: "node01", User: user, UID: uid, SubmittedAt: t0.Add(submitted),
		Nodes: nodes, GPUsPerNode: gpus, Duration: time.Hour, Kind: lease.KindBatch}
}

// TestPass runs one scheduling pass over a cluster view and checks what
// the scheduler asked of which node, in order: calls within one group may
// come in any order (a gang's ranks are reserved at once), groups come one
// after the other.
func TestPass(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		// held are leases already on the nodes.
		held   map[string][]lease.Lease
		queue  []queue.QueueEntry
		usage  map[string]float64
		refuse map[string]error
		// passes is how many passes run (default 1).
		passes int
		// down are nodes memberlist holds dead.
		down []string
		want [][]string
	}{
		{
			name: "one waiting entry starts where it fits", nodes: []string{"node01"},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 2, 0)},
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 start node01-q1#0 gpus [0 1] rank 0 as alice"},
				{"node01 started node01-q1#0"},
			},
		},
		{
			name: "the lighter user goes first when only one fits", nodes: []string{"node01"},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 4, 0), entry("node01-q2", "bob", 1002, 1, 4, time.Minute)},
			usage: map[string]float64{"alice": 500 * 3600},
			want: [][]string{
				{"node01 place node01-q2#0"},
				{"node01 start node01-q2#0 gpus [0 1 2 3] rank 0 as bob"},
				{"node01 started node01-q2#0"},
			},
		},
		{
			name: "nothing starts on GPUs someone holds", nodes: []string{"node01"},
			held:  map[string][]lease.Lease{"node01": {{ID: "node01-7", Node: "node01", User: "carol", UID: 1003, GPUs: []int{0, 1, 2}, Token: 7, StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}}},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 2, 0)},
			want:  nil,
		},
		{
			name: "a gang reserves every rank, then commits them together", nodes: []string{"node01", "node02"},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 2, 4, 0)},
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 reserve node01-q1#0 gpus [0 1 2 3] rank 0 as alice", "node02 reserve node01-q1#0 gpus [0 1 2 3] rank 1 as alice"},
				{"node01 commit node01-q1#0 gpus [0 1 2 3] rank 0 as alice", "node02 commit node01-q1#0 gpus [0 1 2 3] rank 1 as alice"},
				{"node01 started node01-q1#0"},
			},
		},
		{
			name: "a rank refused gives back the others and tells the origin why", nodes: []string{"node01", "node02"},
			queue:  []queue.QueueEntry{entry("node01-q1", "alice", 1001, 2, 4, 0)},
			refuse: map[string]error{"node02 reserve": &refusal.Error{Code: refusal.CodeForbidden, Msg: "alice has no account on node02, so no session can run as them there"}},
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 reserve node01-q1#0 gpus [0 1 2 3] rank 0 as alice", "node02 reserve node01-q1#0 gpus [0 1 2 3] rank 1 as alice"},
				{"node01 release [node01-1] as alice"},
				{"node01 refused node01-q1#0 on node02: reserve rank on node02: alice has no account on node02, so no session can run as them there"},
			},
		},
		{
			name: "a start whose answer was lost is not tried again elsewhere", nodes: []string{"node01", "node02"},
			queue:  []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 4, 0)},
			refuse: map[string]error{"node01 start": &refusal.Error{Code: refusal.CodeNoAnswer, Msg: "node01 did not answer in time"}},
			passes: 3,
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 start node01-q1#0 gpus [0 1 2 3] rank 0 as alice"},
			},
		},
		{
			// A restarting origin: nothing was sent to a node, so nothing
			// is held in flight and the next pass asks again.
			name: "an origin that did not answer a place is asked again", nodes: []string{"node01"},
			queue:  []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 4, 0)},
			refuse: map[string]error{"node01 place": &refusal.Error{Code: refusal.CodeNoAnswer, Msg: "node01 did not answer in time"}},
			passes: 2,
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 place node01-q1#0"},
			},
		},
		{
			name: "a start refused for now is tried again", nodes: []string{"node01"},
			queue:  []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 4, 0)},
			refuse: map[string]error{"node01 start": &refusal.Error{Code: refusal.CodeConflict, Msg: "GPU 0 is held by carol"}},
			passes: 2,
			want: [][]string{
				{"node01 place node01-q1#0"},
				{"node01 start node01-q1#0 gpus [0 1 2 3] rank 0 as alice"},
				{"node01 place node01-q1#0"},
				{"node01 start node01-q1#0 gpus [0 1 2 3] rank 0 as alice"},
			},
		},
		{
			name: "no gang is placed on a node that is down", nodes: []string{"node01", "node02"},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 2, 4, 0)},
			down:  []string{"node02"},
			want:  nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// In a bubble, synctest.Wait returns once the pass has run and
			// every start it sent has been answered and taken in.
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(tt.nodes...)
				for k, v := range tt.refuse {
					c.refuse[k] = v
				}
				var views []queue.NodeView
				for _, name := range tt.nodes {
					nv := nodeView(t, name)
					nv.Leases = tt.held[name]
					if slices.Contains(tt.down, name) {
						nv.State = queue.NodeDead
					}
					if name == "node01" {
						nv.Queue, nv.Usage = tt.queue, tt.usage
					}
					views = append(views, nv)
				}
				clk := clock.NewFake(t0)
				view := func() queue.ClusterView {
					return queue.NewClusterView(views[0], views[1:], clk.Now())
				}
				s := sched.New("node01", queue.SchedConfig{}, sched.Deps{View: view, Peers: c.muxes["node01"], Clock: clk})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { s.Run(ctx); close(done) }()
				var flat []string
				for _, g := range tt.want {
					flat = append(flat, g...)
				}
				for range max(tt.passes, 1) {
					s.Kick()
					// The pass has run and made its calls, and its starts'
					// answers are taken in, before the next is asked for;
					// nothing more can happen until the next kick.
					synctest.Wait()
				}
				cancel()
				<-done
				got := c.seen()
				if len(got) != len(flat) {
					t.Fatalf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(flat, "\n  "))
				}
				i := 0
				for _, g := range tt.want {
					part := slices.Clone(got[i : i+len(g)])
					slices.Sort(part)
					want := slices.Clone(g)
					slices.Sort(want)
					if !slices.Equal(part, want) {
						t.Errorf("calls %d..%d:\n  %s\nwant (any order):\n  %s", i, i+len(g)-1, strings.Join(part, "\n  "), strings.Join(want, "\n  "))
					}
					i += len(g)
				}
			})
		})
	}
}

// syncWriter lets the scheduler's goroutines log into one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// passAndWait runs one pass and waits for every call it sent: Run on a
// context already ended returns at once, after waiting for the starts and
// reclaims the pass left in flight.
func passAndWait(s *sched.Scheduler) {
	s.Pass(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Run(ctx)
}

// TestSchedulerHoldsUntilEveryLivePeerIsHeard: a scheduler that has not
// heard a live peer's state yet (it has just started, or the peer is just
// back) starts nothing, retells nothing and reclaims nothing, however
// many passes run: that peer may run the entry the view shows waiting, or
// hold usage the view cannot see. Once the peer is heard, the same pass
// does what it holds back.
func TestSchedulerHoldsUntilEveryLivePeerIsHeard(t *testing.T) {
	overdue := lease.Lease{ID: "node01-7", Node: "node01", User: "carol", UID: 1003, GPUs: []int{0, 1, 2, 3}, Token: 7,
		StartedAt: t0.Add(-2 * time.Hour), ExpiresAt: t0.Add(-time.Hour)}
	busy := lease.Lease{ID: "node02-3", Node: "node02", User: "dave", UID: 1004, GPUs: []int{0, 1, 2, 3}, Token: 3,
		StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	// node02 runs node01-q1 already: a scheduler that restarted before
	// its origin heard the start sees the entry waiting.
	runs := lease.Lease{ID: "node02-4", Node: "node02", User: "alice", UID: 1001, GPUs: []int{0, 1}, Token: 4,
		Entry: "node01-q1#0", StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	tests := []struct {
		name string
		// held are leases on node01 and on node02 (once heard).
		held map[string][]lease.Lease
		// queue is node01's.
		queue []queue.QueueEntry
		want  []string
	}{
		{
			name:  "a waiting entry starts only once the peer is heard",
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 2, 0)},
			want:  []string{"node01 place node01-q1#0", "node01 start node01-q1#0 gpus [0 1] rank 0 as alice", "node01 started node01-q1#0"},
		},
		{
			name:  "an overdue lease is reclaimed only once the peer is heard",
			held:  map[string][]lease.Lease{"node01": {overdue}, "node02": {busy}},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 4, 0)},
			want:  []string{"node01 preempt node01-7 (overdue)"},
		},
		{
			name:  "an entry the peer not yet heard runs is told again, never started twice",
			held:  map[string][]lease.Lease{"node02": {runs}},
			queue: []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 2, 0)},
			want:  []string{"node01 started node01-q1#0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster("node01", "node02")
			clk := clock.NewFake(t0)
			self := nodeView(t, "node01")
			self.Leases, self.Queue = tt.held["node01"], tt.queue
			peerHeard := nodeView(t, "node02")
			peerHeard.Leases = tt.held["node02"]
			// memberlist says node02 is alive; its state has not come.
			unheard := queue.NodeView{Name: "node02", State: queue.NodeAlive, Protocol: peer.Version}
			peerView := unheard
			view := func() queue.ClusterView { return queue.NewClusterView(self, []queue.NodeView{peerView}, clk.Now()) }
			var logged strings.Builder
			log := slog.New(slog.NewTextHandler(&syncWriter{w: &logged}, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := sched.New("node01", queue.SchedConfig{}, sched.Deps{View: view, Peers: c.muxes["node01"], Clock: clk, Log: log})
			for range 3 {
				passAndWait(s)
				clk.Advance(sched.Tick)
			}
			if got := c.seen(); len(got) > 0 {
				t.Fatalf("before node02 was heard the scheduler asked:\n  %s\nwant nothing", strings.Join(got, "\n  "))
			}
			if n := strings.Count(logged.String(), "scheduler holds"); n != 1 || !strings.Contains(logged.String(), "waiting_for=node02") {
				t.Errorf("the hold was logged %d times over 3 passes, want once naming node02:\n%s", n, logged.String())
			}
			peerView = peerHeard
			passAndWait(s)
			if got := c.seen(); !slices.Equal(got, tt.want) {
				t.Fatalf("once node02 was heard the scheduler asked:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestInFlightStartOutlivesAWallClockStep: a start the scheduler has sent
// holds its attempt until the attempt shows in the cluster's state; while
// it does not (gossip is slow, or the answer was lost), passes must not
// start it again. The hold is timed on the monotonic clock: the long
// nemesis run (seed 899324063038558145) found node01-q405#0 started on
// node02 and then again on node01, 137 ms apart, when node01's wall clock
// was stepped back by 1h52m as the start went out and put right before the
// next pass — the old hold, timed on the wall clock, read 1h52m gone and
// let go.
func TestInFlightStartOutlivesAWallClockStep(t *testing.T) {
	start := []string{"node01 place node01-q1#0", "node01 start node01-q1#0 gpus [0 1] rank 0 as alice", "node01 started node01-q1#0"}
	tests := []struct {
		name string
		// between moves the clock between the first pass and the second.
		between func(c *clock.Fake)
		want    []string
	}{
		{"the wall clock steps forward", func(c *clock.Fake) { c.StepWall(2 * time.Hour) }, start},
		{"the wall clock steps back", func(c *clock.Fake) { c.StepWall(-2 * time.Hour) }, start},
		{"a few seconds pass", func(c *clock.Fake) { c.Advance(3 * time.Second) }, start},
		{
			"the start stays unseen past InFlightTimeout: the hold lapses and it is planned again",
			func(c *clock.Fake) { c.Advance(queue.InFlightTimeout + time.Second) },
			append(slices.Clone(start), start...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster("node01")
			clk := clock.NewFake(t0)
			self := nodeView(t, "node01")
			// The view never shows the start: its lease and the origin's
			// "running" have not come back yet.
			self.Queue = []queue.QueueEntry{entry("node01-q1", "alice", 1001, 1, 2, 0)}
			view := func() queue.ClusterView { return queue.NewClusterView(self, nil, clk.Now()) }
			s := sched.New("node01", queue.SchedConfig{}, sched.Deps{View: view, Peers: c.muxes["node01"], Clock: clk})
			passAndWait(s)
			tt.between(clk)
			passAndWait(s)
			if got := c.seen(); !slices.Equal(got, tt.want) {
				t.Fatalf("the scheduler asked:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}
