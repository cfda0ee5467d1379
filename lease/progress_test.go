package lease_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// gangView builds a three-node view where entry node01-q1#0 has rank leases
// on the nodes given, in the states given.
func gangView(now time.Time, nodes ...lease.NodeView) lease.ClusterView {
	return lease.NewClusterView(nodes[0], nodes[1:], now)
}

func rank(node string, token uint64, r int, key string) lease.Lease {
	return lease.Lease{ID: lease.LeaseID(node, token), Node: node, GPUs: []int{0}, User: "alice", UID: 1001, Token: token, Entry: key, Gang: "g", Rank: r, StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
}

func TestJudgeRunning(t *testing.T) {
	const lost = 30 * time.Second
	now := t0.Add(time.Minute)
	gang := lease.QueueEntry{ID: "n1-q1", Origin: "n1", User: "alice", Nodes: 2, GPUsPerNode: 1, Requeue: true, MaxRestarts: 2, Running: true, Job: &lease.Job{Command: []string{"train"}}}
	single := gang
	single.Nodes = 1
	key := gang.Key()
	alive := func(name string, ls ...lease.Lease) lease.NodeView {
		return lease.NodeView{Name: name, State: lease.NodeAlive, HasState: true, Leases: ls}
	}
	down := func(name string, since time.Duration, ls ...lease.Lease) lease.NodeView {
		return lease.NodeView{Name: name, State: lease.NodeDead, HasState: true, Since: now.Add(-since), Leases: ls}
	}
	ended := func(n lease.NodeView, reason lease.EndReason) lease.NodeView {
		n.Ended = append(n.Ended, lease.EndedRun{Entry: key, Lease: lease.LeaseID(n.Name, 9), Reason: reason, At: now})
		return n
	}
	tests := []struct {
		name   string
		e      lease.QueueEntry
		v      lease.ClusterView
		action lease.RunAction
		failed bool
		stop   []string
		whyHas string
	}{
		{"both ranks run", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), alive("n2", rank("n2", 1, 1, key))), lease.RunWait, false, nil, ""},
		{"a rank failed: stop the other", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), ended(alive("n2"), lease.ExitReason(1))), lease.RunStopRanks, true, []string{"n1-1"}, "exit-1"},
		{"a rank's node just died: stop the survivor", gang, gangView(now, alive("n1", rank("n1", 1, 0, key)), down("n2", time.Second, rank("n2", 1, 1, key))), lease.RunStopRanks, true, []string{"n1-1"}, "n2 is down"},
		{"survivor stopped, dead node not yet lost: done, failed", gang, gangView(now, ended(alive("n1"), lease.PreemptedReason("gang")), down("n2", time.Second, rank("n2", 1, 1, key))), lease.RunDone, true, nil, ""},
		{"every rank on a dead node, not yet lost: wait", gang, gangView(now, alive("n1"), down("n2", time.Second, rank("n2", 1, 0, key), rank("n2", 2, 1, key))), lease.RunWait, false, nil, ""},
		{"every rank on a node dead past the bound: done, failed", gang, gangView(now, alive("n1"), down("n2", lost, rank("n2", 1, 0, key), rank("n2", 2, 1, key))), lease.RunDone, true, nil, "lost"},
		{"single run on a node just down: its lease may come back", single, gangView(now, alive("n1"), down("n2", time.Second, rank("n2", 1, 0, key))), lease.RunWait, false, nil, ""},
		{"single run on a node down past the bound: lost", single, gangView(now, alive("n1"), down("n2", time.Minute, rank("n2", 1, 0, key))), lease.RunDone, true, nil, "lost"},
		{"finished: exit 0 on both", gang, gangView(now, ended(alive("n1"), lease.ExitReason(0)), ended(alive("n2"), lease.ExitReason(0))), lease.RunDone, false, nil, ""},
		{"not seen ending yet", gang, gangView(now, alive("n1"), alive("n2")), lease.RunWait, false, nil, ""},
		{"interactive shell left: not a failure", lease.QueueEntry{ID: "n1-q1", Origin: "n1", Nodes: 1, GPUsPerNode: 1, Running: true}, gangView(now, ended(alive("n1"), lease.EndSessionEnded), alive("n2")), lease.RunDone, false, nil, ""},
		{"batch session ended without a status: failure", single, gangView(now, ended(alive("n1"), lease.EndSessionEnded), alive("n2")), lease.RunDone, true, nil, "session-ended"},
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

func TestAfterRunRequeuesUpToMaxRestarts(t *testing.T) {
	e := lease.QueueEntry{ID: "n1-q1", Running: true, Requeue: true, MaxRestarts: 2}
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
	if _, requeue := (lease.QueueEntry{Requeue: true, MaxRestarts: 3}).AfterRun(false); requeue {
		t.Error("a success requeued")
	}
}

func TestProgressWaitingAndOrphans(t *testing.T) {
	now := t0
	mk := func(id string, running bool, attempt int) lease.QueueEntry {
		origin, _ := lease.OriginOfQueueID(id)
		return lease.QueueEntry{ID: id, Origin: origin, Nodes: 1, GPUsPerNode: 1, Running: running, Attempt: attempt}
	}
	q1, q2, q3, q4 := mk("n1-q1", false, 0), mk("n1-q2", false, 0), mk("n1-q3", false, 0), mk("n3-q1", false, 0)
	reserved := rank("n2", 5, 0, q2.Key())
	reserved.ReservedUntil = now.Add(30 * time.Second)
	n1 := lease.NodeView{Name: "n1", Queue: []lease.QueueEntry{q1, q2, q3}, Leases: []lease.Lease{rank("n1", 1, 0, q1.Key()), rank("n1", 2, 0, "n1-q9#0")}}
	n2 := lease.NodeView{Name: "n2", State: lease.NodeAlive, HasState: true, Leases: []lease.Lease{reserved}}
	n3 := lease.NodeView{Name: "n3", State: lease.NodeDead, HasState: true, Queue: []lease.QueueEntry{q4}}
	v := lease.NewClusterView(n1, []lease.NodeView{n2, n3}, now)
	p := v.Progress()
	waiting, retell := v.Waiting(p)
	ids := func(es []lease.QueueEntry) (out []string) {
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
	entries := map[string]lease.QueueEntry{"n1-q1": q1, "n1-q2": q2, "n1-q3": q3}
	var orphans []string
	for _, l := range v.Orphans("n1", entries) {
		orphans = append(orphans, l.ID)
	}
	if !slices.Equal(orphans, []string{"n1-2"}) {
		t.Errorf("orphans = %v, want n1-2 (its entry n1-q9 is gone)", orphans)
	}
}

func TestRendezvousAndTorchrun(t *testing.T) {
	e := lease.QueueEntry{ID: "n1-q3", Attempt: 1, Nodes: 2, GPUsPerNode: 4}
	env := lease.RendezvousEnv(e, []string{"10.0.0.1", "10.0.0.2"}, 29500)
	r1 := lease.RankEnv(env, 1)
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
	const flags = "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29500 --rdzv_id=n1-q3-1 --rdzv_conf=is_host=0 --redirects=1 --tee=1 "
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
		if got := strings.Join(lease.TorchrunCommand(e, r1, tc.cmd), " "); got != flags+tc.want {
			t.Errorf("torchrun %q = %q\nwant %q", tc.cmd, got, flags+tc.want)
		}
	}
	v6 := lease.RankEnv(lease.RendezvousEnv(e, []string{"fd00::1", "fd00::2"}, 1), 0)
	if got := lease.TorchrunCommand(e, v6, nil)[4]; got != "--rdzv_endpoint=[fd00::1]:1" {
		t.Errorf("IPv6 endpoint = %q", got)
	}
}

// TestJudgeRunningCountsMissingRanks: a running gang with a rank that no
// lease accounts for (its commit never arrived, its reservation expired) is
// reported Missing, so its origin can fail it after a reservation's
// lifetime; a pending reservation or a rank that ended is not missing.
func TestJudgeRunningCountsMissingRanks(t *testing.T) {
	now := t0.Add(time.Minute)
	gang := lease.QueueEntry{ID: "n1-q1", Origin: "n1", User: "alice", Nodes: 2, GPUsPerNode: 1, Running: true, Job: &lease.Job{Command: []string{"train"}}}
	key := gang.Key()
	alive := func(name string, ls ...lease.Lease) lease.NodeView {
		return lease.NodeView{Name: name, State: lease.NodeAlive, HasState: true, Leases: ls}
	}
	reserved := rank("n2", 1, 1, key)
	reserved.ReservedUntil = now.Add(time.Second)
	expired := alive("n2")
	expired.Ended = []lease.EndedRun{{Entry: key, Lease: "n2-1", Reason: lease.EndReservationExpired, At: now, Reserved: true}}
	finished := alive("n2")
	finished.Ended = []lease.EndedRun{{Entry: key, Lease: "n2-1", Reason: lease.ExitReason(0), At: now}}
	for _, tt := range []struct {
		name    string
		v       lease.ClusterView
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
			if v.Missing != tt.missing || v.Action != lease.RunWait {
				t.Errorf("verdict %+v, want RunWait with %d missing", v, tt.missing)
			}
			if tt.missing > 0 && (len(v.Live) != 1 || v.Live[0].Node != "n1") {
				t.Errorf("live ranks %v, want n1's", v.Live)
			}
		})
	}
}
