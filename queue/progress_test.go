package queue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// gangView builds a three-node view where entry node01-q1#0 has rank leases
// on the nodes given, in the states given.
func gangView(now time.Time, nodes ...queue.NodeView) queue.ClusterView {
	return queue.NewClusterView(nodes[0], nodes[1:], now)
}

func rank(node string, token uint64, r int, key string) lease.Lease {
	return lease.Lease{ID: lease.LeaseID(node, token), Node: node, GPUs: []int{0}, User: "alice", UID: 1001, Token: token, Entry: key, Gang: "g", Rank: r, StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
}

func TestJudgeRunning(t *testing.T) {
	const lost = 30 * time.Second
	now := t0.Add(time.Minute)
	gang := queue.QueueEntry{ID: "n1-q1", Origin: "n1", User: "alice", Nodes: 2, GPUsPerNode: 1, Requeue: true, MaxRestarts: 2, Running: true, Job: &job.Job{Command: []string{"train"}}}
	single := gang
	single.Nodes = 1
	key := gang.Key()
	alive := func(name string, ls ...lease.Lease) queue.NodeView {
		return queue.NodeView{Name: name, State: queue.NodeAlive, HasState: true, Leases: ls}
	}
	down := func(name string, since time.Duration, ls ...lease.Lease) queue.NodeView {
		return queue.NodeView{Name: name, State: queue.NodeDead, HasState: true, Since: now.Add(-since), Leases: ls}
	}
	suspect := func(name string, ls ...lease.Lease) queue.NodeView {
		return queue.NodeView{Name: name, State: queue.NodeSuspect, HasState: true, Leases: ls}
	}
	left := func(name string, ls ...lease.Lease) queue.NodeView {
		return queue.NodeView{Name: name, State: queue.NodeLeft, HasState: true, Since: now.Add(-time.Second), Leases: ls}
	}
	ended := func(n queue.NodeView, reason lease.EndReason) queue.NodeView {
		n.Ended = append(n.Ended, lease.EndedRun{Entry: key, Lease: lease.LeaseID(n.Name, 9), Reason: reason, At: now})
		return n
	}
	tests := []struct {
		name   string
		e      queue.QueueEntry
		v      queue.ClusterView
		action queue.RunAction
		failed bool
		stop   []string
		whyHas string
	}{
		{"both ranks run", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), alive("n2", rank("n2", 1, 1, key))), queue.RunWait, false, nil, ""},
		{"a rank failed: stop the other", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), ended(alive("n2"), lease.ExitReason(1))), queue.RunStopRanks, true, []string{"n1-1"}, "exit-1"},
		// An agent's restart is not its node's death: within the grace
		// the rank on it holds, and so does the gang.
		{"a rank's node just went away (restarting): the gang holds", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), down("n2", time.Second, rank("n2", 1, 1, key))), queue.RunWait, false, nil, ""},
		{"a rank's node away just under the grace: the gang holds", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), down("n2", lost-time.Second, rank("n2", 1, 1, key))), queue.RunWait, false, nil, ""},
		{"a rank's node suspect: the gang holds", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), suspect("n2", rank("n2", 1, 1, key))), queue.RunWait, false, nil, ""},
		{"a rank's node alive but not heard since this agent started: the gang holds", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), queue.NodeView{Name: "n2", State: queue.NodeAlive}), queue.RunWait, false, nil, ""},
		{"a rank finished well while the other's node restarts: wait for that one", gang, gangView(now, ended(alive("n1"), lease.ExitReason(0)), down("n2", time.Second, rank("n2", 1, 1, key))), queue.RunWait, false, nil, ""},
		{"a rank's node silent past the grace: stop the survivor", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), down("n2", lost, rank("n2", 1, 1, key))), queue.RunStopRanks, true, []string{"n1-1"}, "n2 has been silent since"},
		{"a rank's node left for good: stop the survivor at once", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), left("n2", rank("n2", 1, 1, key))), queue.RunStopRanks, true, []string{"n1-1"}, "n2 left the cluster"},
		{"survivor stopped, dead node not yet lost: done, failed", gang, gangView(now, ended(alive("n1"), lease.PreemptedReason("gang")), down("n2", time.Second, rank("n2", 1, 1, key))), queue.RunDone, true, nil, ""},
		{"every rank on a dead node, not yet lost: wait", gang, gangView(now, alive("n1"), down("n2", time.Second, rank("n2", 1, 0, key), rank("n2", 2, 1, key))), queue.RunWait, false, nil, ""},
		{"every rank on a node dead past the bound: done, failed", gang, gangView(now, alive("n1"), down("n2", lost, rank("n2", 1, 0, key), rank("n2", 2, 1, key))), queue.RunDone, true, nil, "lost"},
		{"single run on a node just down: its lease may come back", single, gangView(now, alive("n1"), down("n2", time.Second, rank("n2", 1, 0, key))), queue.RunWait, false, nil, ""},
		{"single run on a node down past the bound: lost", single, gangView(now, alive("n1"), down("n2", time.Minute, rank("n2", 1, 0, key))), queue.RunDone, true, nil, "lost"},
		// Issue 30: the survivor, stopped for the lost rank, ends with
		// SIGTERM's status; the requeue names the lost node, not that.
		{"survivor stopped for a node lost past the grace: the node is the cause", gang, gangView(now, alive("n0"), down("n1", lost, rank("n1", 1, 1, key)), ended(alive("n2"), lease.ExitReason(143))), queue.RunDone, true, nil, "node n1 has been silent since " + now.Add(-lost).Local().Format("15:04:05") + ", past the 30s grace: rank 1 (lease n1-1) is lost"},
		{"survivor stopped for a node that left: the node is the cause", gang, gangView(now, alive("n0"), left("n1", rank("n1", 1, 1, key)), ended(alive("n2"), lease.ExitReason(143))), queue.RunDone, true, nil, "node n1 left the cluster"},
		{"finished: exit 0 on both", gang, gangView(now, ended(alive("n1"), lease.ExitReason(0)), ended(alive("n2"), lease.ExitReason(0))), queue.RunDone, false, nil, ""},
		{"not seen ending yet", gang, gangView(now, alive("n1"), alive("n2")), queue.RunWait, false, nil, ""},
		{"interactive shell left: not a failure", queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Running: true}, gangView(now, ended(alive("n1"), lease.EndSessionEnded), alive("n2")), queue.RunDone, false, nil, ""},
		{"batch session ended without a status: failure", single, gangView(now, ended(alive("n1"), lease.EndSessionEnded), alive("n2")), queue.RunDone, true, nil, "session-ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.v.JudgeRunning(tt.e, lost)
			var stop []string
			for _, l := range got.Stop {
				stop = append(stop, l.ID)
			}
			if got.Action != tt.action || got.Failed != tt.failed || !slices.Equal(stop, tt.stop) || !strings.Contains(got.Why, tt.whyHas) {
				t.Errorf("JudgeRunning = action %d failed %v stop %v why %q; want action %d failed %v stop %v why containing %q",
					got.Action, got.Failed, stop, got.Why, tt.action, tt.failed, tt.stop, tt.whyHas)
			}
		})
	}
}

func TestNodeShownRestartingWithinTheGrace(t *testing.T) {
	const grace = 5 * time.Minute
	now := t0.Add(time.Hour)
	tests := []struct {
		name string
		n    queue.NodeView
		want string
		lost bool
	}{
		{"alive", queue.NodeView{Name: "n2", State: queue.NodeAlive, HasState: true}, queue.NodeAlive, false},
		{"stepped out a second ago", queue.NodeView{Name: "n2", State: queue.NodeDead, HasState: true, Since: now.Add(-time.Second)}, queue.NodeRestarting, false},
		{"silent just under the grace", queue.NodeView{Name: "n2", State: queue.NodeDead, HasState: true, Since: now.Add(-grace + time.Second)}, queue.NodeRestarting, false},
		{"silent for the grace", queue.NodeView{Name: "n2", State: queue.NodeDead, HasState: true, Since: now.Add(-grace)}, queue.NodeDead, true},
		{"left for good", queue.NodeView{Name: "n2", State: queue.NodeLeft, HasState: true, Since: now.Add(-time.Second)}, queue.NodeLeft, true},
		{"suspect", queue.NodeView{Name: "n2", State: queue.NodeSuspect, HasState: true}, queue.NodeSuspect, false},
		{"this node", queue.NodeView{Name: "n1", Self: true, State: queue.NodeAlive}, queue.NodeAlive, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.n.Shown(now, grace); got != tt.want {
				t.Errorf("Shown = %q, want %q", got, tt.want)
			}
			if got := tt.n.Lost(now, grace); got != tt.lost {
				t.Errorf("Lost = %v, want %v", got, tt.lost)
			}
		})
	}
}

func TestHeardWaitsForEveryLivePeersState(t *testing.T) {
	self := queue.NodeView{Name: "n1"}
	tests := []struct {
		name  string
		peers []queue.NodeView
		want  bool
	}{
		{"alone", nil, true},
		{"every live peer heard", []queue.NodeView{{Name: "n2", State: queue.NodeAlive, HasState: true}}, true},
		{"a live peer not heard yet", []queue.NodeView{{Name: "n2", State: queue.NodeAlive}}, false},
		{"a dead peer never heard does not hold it", []queue.NodeView{{Name: "n2", State: queue.NodeDead}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queue.NewClusterView(self, tt.peers, t0).Heard(); got != tt.want {
				t.Errorf("Heard = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRequeueDelayGrowsWithJitter(t *testing.T) {
	const base, limit = 10 * time.Second, 5 * time.Minute
	tests := []struct {
		restart int
		rnd     float64
		want    time.Duration
	}{
		{1, 0.5, 10 * time.Second},
		{2, 0.5, 20 * time.Second},
		{3, 0.5, 40 * time.Second},
		{1, 0, 7500 * time.Millisecond},
		{1, 0.999999, 12499990 * time.Microsecond},
		{6, 0.5, 5 * time.Minute},
		{40, 0.5, 5 * time.Minute},
	}
	for _, tt := range tests {
		got := queue.RequeueDelay(tt.restart, base, limit, tt.rnd)
		if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("RequeueDelay(%d, rnd %v) = %s, want %s", tt.restart, tt.rnd, got, tt.want)
		}
	}
}

func TestWaitingSkipsARequeuedEntryUntilItsRetry(t *testing.T) {
	e := queue.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Requeue: true, MaxRestarts: 3, Restarts: 1, Attempt: 1,
		RetryAt: t0.Add(10 * time.Second), RetryWhy: "lease n2-1 ended: exit-1"}
	for _, tt := range []struct {
		at    time.Time
		want  int
		state queue.EntryState
	}{
		{t0, 0, queue.EntryBackoff},
		{t0.Add(9 * time.Second), 0, queue.EntryBackoff},
		{t0.Add(10 * time.Second), 1, queue.EntryWaiting},
	} {
		v := queue.NewClusterView(queue.NodeView{Name: "n1", Queue: []queue.QueueEntry{e}}, nil, tt.at)
		if waiting, _ := v.Waiting(v.Progress()); len(waiting) != tt.want {
			t.Errorf("at +%s: %d waiting, want %d", tt.at.Sub(t0), len(waiting), tt.want)
		}
		if st := e.Status(tt.at); st.State != tt.state {
			t.Errorf("at +%s: status %+v, want state %s", tt.at.Sub(t0), st, tt.state)
		}
	}
}

func TestAfterRunRequeuesUpToMaxRestarts(t *testing.T) {
	e := queue.QueueEntry{ID: "n1-q1", Running: true, Requeue: true, MaxRestarts: 2}
	for i := 1; i <= 2; i++ {
		next, requeue := e.AfterRun(true)
		if !requeue || next.Running || next.Restarts != i || next.Attempt != i {
			t.Fatalf("failure %d: requeue %v, entry %+v", i, requeue, next)
		}
		e = next
		e.Running = true
	}
	if _, requeue := e.AfterRun(true); requeue {
		t.Error("a third failure requeued past --max-restarts 2")
	}
	if _, requeue := (queue.QueueEntry{Requeue: true, MaxRestarts: 3}).AfterRun(false); requeue {
		t.Error("a success requeued")
	}
}

func TestProgressWaitingAndOrphans(t *testing.T) {
	now := t0
	mk := func(id string, running bool, attempt int) queue.QueueEntry {
		origin, _ := queue.OriginOfQueueID(id)
		return queue.QueueEntry{ID: id, Origin: origin, Nodes: 1, GPUsPerNode: 1, Running: running, Attempt: attempt}
	}
	q1, q2, q3, q4 := mk("n1-q1", false, 0), mk("n1-q2", false, 0), mk("n1-q3", false, 0), mk("n3-q1", false, 0)
	reserved := rank("n2", 5, 0, q2.Key())
	reserved.ReservedUntil = now.Add(30 * time.Second)
	n1 := queue.NodeView{Name: "n1", Queue: []queue.QueueEntry{q1, q2, q3}, Leases: []lease.Lease{rank("n1", 1, 0, q1.Key()), rank("n1", 2, 0, "n1-q9#0")}}
	n2 := queue.NodeView{Name: "n2", State: queue.NodeAlive, HasState: true, Leases: []lease.Lease{reserved}}
	n3 := queue.NodeView{Name: "n3", State: queue.NodeDead, HasState: true, Queue: []queue.QueueEntry{q4}}
	v := queue.NewClusterView(n1, []queue.NodeView{n2, n3}, now)
	p := v.Progress()
	waiting, retell := v.Waiting(p)
	ids := func(es []queue.QueueEntry) (out []string) {
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	if got := ids(waiting); !slices.Equal(got, []string{"n1-q3"}) {
		t.Errorf("waiting = %v, want only n1-q3 (q1 started, q2 reserving, n3's origin is down)", got)
	}
	if got := ids(retell); !slices.Equal(got, []string{"n1-q1"}) {
		t.Errorf("retell = %v, want n1-q1 (started, origin not told)", got)
	}
	entries := map[string]queue.QueueEntry{"n1-q1": q1, "n1-q2": q2, "n1-q3": q3}
	var orphans []string
	for _, l := range v.Orphans("n1", entries) {
		orphans = append(orphans, l.ID)
	}
	if !slices.Equal(orphans, []string{"n1-2"}) {
		t.Errorf("orphans = %v, want n1-2 (its entry n1-q9 is gone)", orphans)
	}
}

func TestRendezvousAndTorchrun(t *testing.T) {
	e := queue.QueueEntry{ID: "n1-q3", Attempt: 1, Nodes: 2, GPUsPerNode: 4}
	env := queue.RendezvousEnv(e, []string{"10.0.0.1", "10.0.0.2"}, 29500)
	r1 := queue.RankEnv(env, 1)
	// One process per node: env:// sees a world of nodes, this one rank 1.
	want := map[string]string{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "NNODES": "2", "NPROC_PER_NODE": "4",
		"DIBS_GANG_ID": "n1-q3-1", "DIBS_HOSTS": "10.0.0.1,10.0.0.2", "NODE_RANK": "1", "RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
	for k, v := range want {
		if r1[k] != v {
			t.Errorf("%s = %q, want %q", k, r1[k], v)
		}
	}
	if _, ok := env["RANK"]; ok {
		t.Error("RankEnv changed the gang's shared map")
	}
	// The endpoint is not on the command line, which every user can read
	// (issue 31): torchrun reads it from PET_RDZV_ENDPOINT.
	const flags = "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_id=n1-q3-1 --rdzv_conf=is_host=0 --redirects=1 --tee=1 "
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"train.py", "--lr", "3e-4"}, "train.py --lr 3e-4"},
		{[]string{"python3", "train.py"}, "--no_python python3 train.py"},
		{[]string{"/usr/bin/python3", "-m", "pkg.train"}, "--no_python /usr/bin/python3 -m pkg.train"},
		{[]string{"python3.11", "-u", "t.py"}, "--no_python python3.11 -u t.py"},
		{[]string{"python train.py | tee out"}, "--no_python /bin/sh -c python train.py | tee out"},
		{[]string{"pythonic.py"}, "pythonic.py"},
	} {
		if got := strings.Join(queue.TorchrunCommand(e, r1, tc.cmd), " "); got != flags+tc.want {
			t.Errorf("torchrun %q = %q\nwant %q", tc.cmd, got, flags+tc.want)
		}
	}
	if got := queue.TorchrunEnv(r1)["PET_RDZV_ENDPOINT"]; got != "10.0.0.1:29500" {
		t.Errorf("PET_RDZV_ENDPOINT = %q, want 10.0.0.1:29500", got)
	}
	if _, ok := r1["PET_RDZV_ENDPOINT"]; ok {
		t.Error("TorchrunEnv changed the rank's map")
	}
	v6 := queue.RankEnv(queue.RendezvousEnv(e, []string{"fd00::1", "fd00::2"}, 1), 0)
	if got := queue.TorchrunEnv(v6)["PET_RDZV_ENDPOINT"]; got != "[fd00::1]:1" {
		t.Errorf("IPv6 endpoint = %q", got)
	}
}

// TestJudgeRunningCountsMissingRanks: a running gang with a rank that no
// lease accounts for (its commit never arrived, its reservation expired) is
// reported Missing, so its origin can fail it after a reservation's
// lifetime; a pending reservation or a rank that ended is not missing.
func TestJudgeRunningCountsMissingRanks(t *testing.T) {
	now := t0.Add(time.Minute)
	gang := queue.QueueEntry{ID: "n1-q1", Origin: "n1", User: "alice", Nodes: 2, GPUsPerNode: 1, Running: true, Job: &job.Job{Command: []string{"train"}}}
	key := gang.Key()
	alive := func(name string, ls ...lease.Lease) queue.NodeView {
		return queue.NodeView{Name: name, State: queue.NodeAlive, HasState: true, Leases: ls}
	}
	reserved := rank("n2", 1, 1, key)
	reserved.ReservedUntil = now.Add(time.Second)
	expired := alive("n2")
	expired.Ended = []lease.EndedRun{{Entry: key, Lease: "n2-1", Reason: lease.EndReservationExpired, At: now, Reserved: true}}
	finished := alive("n2")
	finished.Ended = []lease.EndedRun{{Entry: key, Lease: "n2-1", Reason: lease.ExitReason(0), At: now}}
	for _, tt := range []struct {
		name    string
		v       queue.ClusterView
		missing int
	}{
		{"both committed", gangView(now, alive("n1", rank("n1", 1, 0, key)), alive("n2", rank("n2", 1, 1, key))), 0},
		{"a commit still pending", gangView(now, alive("n1", rank("n1", 1, 0, key)), alive("n2", reserved)), 0},
		{"a reservation expired uncommitted", gangView(now, alive("n1", rank("n1", 1, 0, key)), expired), 1},
		{"a rank never seen at all", gangView(now, alive("n1", rank("n1", 1, 0, key)), alive("n2")), 1},
		{"a rank that finished", gangView(now, alive("n1", rank("n1", 1, 0, key)), finished), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.v.JudgeRunning(gang, 30*time.Second)
			if v.Missing != tt.missing || v.Action != queue.RunWait {
				t.Errorf("verdict %+v, want RunWait with %d missing", v, tt.missing)
			}
			if tt.missing > 0 && (len(v.Live) != 1 || v.Live[0].Node != "n1") {
				t.Errorf("live ranks %v, want n1's", v.Live)
			}
		})
	}
}
