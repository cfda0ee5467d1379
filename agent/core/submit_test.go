package core_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// countingLink is the cluster link of one agent that counts how often the
// agent reads its peers' states: once per cluster view it builds.
type countingLink struct {
	*fabric
	peers atomic.Int32
}

func (c *countingLink) Peers() []queue.NodeView {
	c.peers.Add(1)
	return c.fabric.Peers()
}

// TestSubmitAnswer: the answer to a submit says where the new entry
// stands in the cluster's queue, the entries of every node and the new one
// itself counted, as `dibs queue` would show it at that moment; and the
// submit reads the cluster once for its checks and its answer, not once
// for each (the cluster view of issue 22's queued gang path).
func TestSubmitAnswer(t *testing.T) {
	run := &api.RunSpec{Command: []string{"python", "train.py"}}
	tests := []struct {
		name string
		req  api.SubmitRequest
		// retry submits the request a second time with its request id,
		// as a client whose answer was lost does.
		retry        bool
		wantPosition int
		wantWaiting  int
	}{
		{name: "one GPU, behind the older entry at node02",
			req:          api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}},
			wantPosition: 2, wantWaiting: 2},
		{name: "a gang over both nodes",
			req:          api.SubmitRequest{Claim: api.ClaimRequest{Duration: "1h", Run: run}, Nodes: 2, GPUsPerNode: 2},
			wantPosition: 2, wantWaiting: 2},
		{name: "an array: its tasks shown as one row",
			req:          api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", Run: run}, Array: "0-2"},
			wantPosition: 2, wantWaiting: 2},
		{name: "a retry gets the first answer",
			req:          api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", RequestID: "submit-0001"}},
			retry:        true,
			wantPosition: 2, wantWaiting: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			c := newCluster(t, clk, map[string]users{
				"node01": accounts(1000, "alice", "bob", "carol"),
				"node02": accounts(2000, "alice", "bob", "carol"),
			})
			link := &countingLink{fabric: &fabric{agents: c, self: "node01"}}
			c["node01"].svc.SetCluster(link)
			ctx := context.Background()
			for _, n := range []string{"node01", "node02"} {
				if _, err := asUser(c[n], "bob").Claim(ctx, api.ClaimRequest{Node: n, Count: 4}); err != nil {
					t.Fatalf("bob fills %s: %v", n, err)
				}
			}
			older, err := asUser(c["node02"], "carol").Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
			if err != nil {
				t.Fatalf("carol queues at node02: %v", err)
			}
			clk.Advance(time.Minute)
			link.peers.Store(0)
			got, err := asUser(c["node01"], "alice").Submit(ctx, tt.req)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			if n := link.peers.Load(); n != 1 {
				t.Errorf("the submit read its peers' states %d times, want once (one cluster view for its checks and its answer)", n)
			}
			if tt.retry {
				clk.Advance(time.Second)
				again, err := asUser(c["node01"], "alice").Submit(ctx, tt.req)
				if err != nil {
					t.Fatalf("retry: %v", err)
				}
				if again != got {
					t.Errorf("the retry got %+v, want the first answer %+v", again, got)
				}
			}
			if got.Position != tt.wantPosition || got.Waiting != tt.wantWaiting {
				t.Errorf("answer %+v: position %d of %d, want %d of %d", got, got.Position, got.Waiting, tt.wantPosition, tt.wantWaiting)
			}
			// The answer is what `dibs queue` shows now.
			q, err := asUser(c["node01"], "alice").Queue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pos := map[string]int{}
			for _, e := range q.Entries {
				pos[e.ID] = e.Position
			}
			if len(q.Entries) != got.Waiting || pos[got.ID] != got.Position || pos[older.ID] != 1 {
				t.Errorf("dibs queue shows %v (%d rows), the answer said %s at %d of %d after %s", pos, len(q.Entries), got.ID, got.Position, got.Waiting, older.ID)
			}
		})
	}
}

// TestStartRankSession: a queued start's session is named for its task
// and rank on the node that starts it (the name is made there, from the
// submitted one), and a name that tmux would not keep as made, here one
// grown past its bound by the rank's suffix, is refused there, before
// anything is held; the job's other bounds came checked with the request.
func TestStartRankSession(t *testing.T) {
	long := strings.Repeat("t", 127) // the bound is 128: "-1" passes it
	tests := []struct {
		name     string
		id       string
		job      string
		nodes    int
		rank     int
		wantName string
		wantErr  string
	}{
		{name: "a gang's rank", id: "node01-q1", job: "train", nodes: 2, rank: 1, wantName: "train-1"},
		{name: "an array's task", id: "node01-q1/4", job: "sweep", nodes: 1, wantName: "sweep-4"},
		{name: "one node, as submitted", id: "node01-q1", job: "eval", nodes: 1, wantName: "eval"},
		{name: "a rank's name past the bound", id: "node01-q1", job: long, nodes: 2, rank: 1, wantErr: "invalid session name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			sessions := &started{}
			c := newClusterOf(t, clk, map[string]users{
				"node01": accounts(1000, "alice"),
				"node02": accounts(2000, "alice"),
			}, clusterOptions{sessions: sessions})
			e := queue.QueueEntry{ID: tt.id, Origin: "node01", User: "alice", UID: 1000, Nodes: tt.nodes, GPUsPerNode: 1,
				Duration: time.Hour, Kind: lease.KindBatch, SubmittedAt: t0,
				Job: &job.Job{Name: tt.job, Command: []string{"python", "train.py"}}}
			phase := peer.PhaseStart
			if tt.nodes > 1 {
				phase = peer.PhaseReserve
			}
			r, err := peer.Call(context.Background(), c["node01"].mux, "node02", peer.Start, peer.As("alice"),
				peer.StartRequest{Entry: e, Phase: phase, GPUs: []int{0}, Gang: "g1", Rank: tt.rank})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("start: %v, want a refusal saying %q", err, tt.wantErr)
				}
				if v := c["node02"].svc.View(); len(v.Leases()) != 0 {
					t.Errorf("node02 holds %v after refusing the start, want nothing", v.Leases())
				}
				return
			}
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if r.Lease.Session != tt.wantName {
				t.Errorf("the lease's session is %q, want %q", r.Lease.Session, tt.wantName)
			}
		})
	}
}
