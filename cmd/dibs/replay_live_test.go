package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/replay"
	"github.com/dibs-gpu/dibs/queue"
)

// liveTrace is a small story on two nodes of two GPUs, one event a
// minute, every request queued at node01: packing by fewest GPUs left,
// a gang at the head of the queue with its shadow time, EASY backfill onto
// the GPUs it protects, fair-share putting people who have run nothing
// ahead of those who have (dee before bo), and the gang starting whole
// once a GPU is free on each node. Holds are chosen so each request ends
// at the minute the story needs (the comments give start → end).
func liveTrace(me string) replay.Trace {
	t0 := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	q := func(id string, at int, user string, nodes, gpus int, limit time.Duration, hold int) replay.Request {
		return replay.Request{ID: id, At: m(at), User: user, Nodes: nodes, GPUs: gpus, Kind: lease.KindInteractive, Limit: limit,
			Work: time.Duration(hold) * time.Minute, Hold: time.Duration(hold) * time.Minute, Via: replay.ViaQueue}
	}
	return replay.Trace{
		Nodes: []replay.NodeSpec{{Name: "node01", Spec: "2xL40S"}, {Name: "node02", Spec: "2xL40S"}},
		Start: t0, End: m(30),
		Requests: []replay.Request{
			q("a1", 0, "ana", 1, 1, 2*time.Hour, 12),  // 0 → 12, node01
			q("b1", 1, "bo", 1, 2, 4*time.Hour, 7),    // 1 → 8, node02 (the only node with two free)
			q("c1", 2, "cy", 1, 1, time.Hour, 3),      // 2 → 5, node01 (the last GPU)
			q("g1", 3, me, 2, 1, 3*time.Hour, 3),      // 10 → 13: the head from 3 on
			q("d1", 4, "ana", 1, 1, time.Hour, 4),     // 5 → 9: backfills node01 GPU 1 before the head's shadow
			q("e1", 6, "bo", 1, 1, 30*time.Minute, 2), // 8 → 10: backfills node02's protected GPU (30m < shadow)
			q("f1", 7, "dee", 1, 1, 5*time.Hour, 6),   // 8 → 14: ahead of bo (no usage), unprotected GPU
			q("h1", 11, "bo", 1, 2, time.Hour, 2),     // 13 → 15: two GPUs on node01 once the gang ends
		},
	}
}

// TestReplayMatchesTheLiveScheduler plays liveTrace in the replay (policy
// dibs) and on a real 2-agent cluster, event by event, and checks after
// each that the same requests have started, on the same nodes and GPUs.
func TestReplayMatchesTheLiveScheduler(t *testing.T) {
	agenttest.RequireTmux(t) // the gang's ranks run in tmux
	users := agenttest.Users{"ana": 5101, "bo": 5102, "cy": 5103, "dee": 5104}
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Users: users, Quiet: true})
	me := nodes[0].Me().Caller()
	tr := liveTrace(me.User)
	res, err := replay.Run(tr, replay.PolicyDibs, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[string]replay.Request{}
	for _, r := range tr.Requests {
		reqs[r.ID] = r
	}
	// The replay's own story, as the comments of liveTrace tell it.
	wantStarts := map[string]string{"a1": "node01[0]", "b1": "node02[0 1]", "c1": "node01[1]", "d1": "node01[1]", "e1": "node02[0]",
		"f1": "node02[1]", "g1": "node01[1] node02[0]", "h1": "node01[0 1]"}
	for _, s := range res.Steps {
		if s.Kind == replay.StepStart && placement(s.Ranks) != wantStarts[s.Request] {
			t.Errorf("replay started %s on %s, want %s", s.Request, placement(s.Ranks), wantStarts[s.Request])
		}
	}

	// Group the replay's steps by minute: one input (submit or end) each,
	// with the starts it caused.
	type minute struct {
		input  replay.Step
		starts map[string]string
	}
	var story []minute
	for _, s := range res.Steps {
		if s.Kind == replay.StepStart {
			story[len(story)-1].starts[s.Request] = placement(s.Ranks)
			continue
		}
		if len(story) > 0 && story[len(story)-1].input.At.Equal(s.At) {
			t.Fatalf("two inputs at %s (%s, %s): the story must have one a minute", s.At, story[len(story)-1].input.Request, s.Request)
		}
		story = append(story, minute{input: s, starts: map[string]string{}})
	}

	ctx := context.Background()
	callers := map[string]lease.Caller{me.User: me}
	for name, uid := range users {
		callers[name] = lease.Caller{UID: uid, User: name}
	}
	entry := map[string]string{} // request → live queue id
	want := map[string]string{}  // request → placement, started so far
	ran := map[string]bool{}     // users who have held GPUs, so have usage
	for _, m := range story {
		r := reqs[m.input.Request]
		// Usage travels by gossip: the replay's cluster agrees at once, a
		// live one within a telemetry interval. Let it agree before the
		// next event, so fair-share ranks the queue on the same facts.
		if !poll.Wait(10*time.Second, func() bool {
			v := nodes[0].Agent.Service().View()
			u := v.Usage()
			for name := range ran {
				if !(u[name] > 0) {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("node01 never saw the usage of %v", slices.Sorted(maps.Keys(ran)))
		}
		switch m.input.Kind {
		case replay.StepSubmit:
			sub := api.SubmitRequest{Claim: api.ClaimRequest{Duration: words.FormatDuration(r.Limit)}}
			if r.Nodes > 1 {
				sub.Nodes, sub.GPUsPerNode = r.Nodes, r.GPUs
				sub.Claim.Run = &api.RunSpec{Command: []string{"sleep", "3600"}}
			} else {
				sub.Claim.Count = r.GPUs
			}
			s, err := nodes[0].As(callers[r.User]).Submit(ctx, sub)
			if err != nil {
				t.Fatalf("submit %s: %v", r.ID, err)
			}
			entry[r.ID] = s.ID
		case replay.StepEnd:
			var ids []string
			for _, l := range liveLeases(nodes[0], entry[r.ID]) {
				ids = append(ids, l.ID)
			}
			if len(ids) == 0 {
				t.Fatalf("at %s %s ends in the replay, but it holds no lease live", m.input.At.Format("15:04"), r.ID)
			}
			if _, err := nodes[0].As(callers[r.User]).Release(ctx, api.ReleaseRequest{IDs: ids}); err != nil {
				t.Fatalf("release %s: %v", r.ID, err)
			}
			delete(want, r.ID)
		}
		maps.Copy(want, m.starts)
		for id := range m.starts {
			ran[reqs[id].User] = true
		}
		var got map[string]string
		ok := poll.Wait(10*time.Second, func() bool {
			got = map[string]string{}
			for id, e := range entry {
				if ls := liveLeases(nodes[0], e); len(ls) > 0 {
					got[id] = livePlacement(ls)
				}
			}
			return maps.Equal(got, want)
		})
		if !ok {
			t.Fatalf("after %s %s at %s: live runs %v, the replay %v", m.input.Kind, r.ID, m.input.At.Format("15:04"), got, want)
		}
	}
}

// liveLeases are the committed leases of a live queue entry's first
// attempt, as node01 sees the cluster.
func liveLeases(n *agenttest.Node, entryID string) []lease.Lease {
	var out []lease.Lease
	for _, bn := range n.Board().Nodes {
		seen := map[string]bool{}
		for _, g := range bn.GPUs {
			if l := g.Lease; l != nil && l.Entry == entryID+"#0" && l.ReservedUntil.IsZero() && !seen[l.ID] {
				seen[l.ID] = true
				out = append(out, *l)
			}
		}
	}
	return out
}

func livePlacement(ls []lease.Lease) string {
	ranks := make([]queue.RankPlacement, len(ls))
	for i, l := range ls {
		ranks[i] = queue.RankPlacement{Node: l.Node, GPUs: l.GPUs}
	}
	return placement(ranks)
}

// placement writes ranks as "node01[0 1] node02[0]", by node.
func placement(ranks []queue.RankPlacement) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		g := slices.Clone(r.GPUs)
		slices.Sort(g)
		parts[i] = fmt.Sprintf("%s%v", r.Node, g)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
