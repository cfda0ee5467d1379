package agent_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// --nodelist and --exclude, SLURM's words, on real agents: a claim, a
// queued gang and a booking go only where they allow; a request they
// leave nowhere to go, or that names a node twice over, is refused at the
// edge with words.
func TestNodelistAndExclude(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S", "2xL40S"}, Quiet: true})
	agenttest.WaitConverged(t, nodes, 30*time.Second) // a node not seen yet is refused as unknown
	at := nodes[0].Client

	// A claim typed on node01 that may not run there.
	r, err := at.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", NodeChoice: lease.NodeChoice{Exclude: []string{"node01"}}})
	if err != nil || r.Node == "node01" {
		t.Fatalf("claim --exclude node01: %+v, %v; want it elsewhere", r, err)
	}
	at.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}})
	r, err = at.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", NodeChoice: lease.NodeChoice{Only: []string{"node03"}}})
	if err != nil || r.Node != "node03" {
		t.Fatalf("claim --nodelist node03: %+v, %v; want node03", r, err)
	}
	at.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}})

	// A gang that would pack onto node01 and node02 without its list.
	s, err := at.Submit(ctx(t), api.SubmitRequest{Nodes: 2, GPUsPerNode: 2, Claim: api.ClaimRequest{Duration: "1h",
		NodeChoice: lease.NodeChoice{Exclude: []string{"node02"}}, Run: &api.RunSpec{Command: []string{"sleep", "600"}}}})
	if err != nil {
		t.Fatalf("submit a gang with --exclude node02: %v", err)
	}
	var ranks map[string]string
	agenttest.Eventually(t, 15*time.Second, "the gang's two ranks to start", func() bool {
		ranks = gangRanks(nodes[0].Board(), s.ID)
		return len(ranks) == 2
	})
	if ranks["node02"] != "" {
		t.Errorf("the gang with --exclude node02 runs on %v", ranks)
	}
	if q, _ := at.Queue(ctx(t)); len(q.Entries) != 1 || !slices.Equal(q.Entries[0].Exclude, []string{"node02"}) {
		t.Errorf("dibs queue shows %+v; want the running gang with its --exclude", q.Entries)
	}
	ids := []string{}
	for _, id := range ranks {
		ids = append(ids, id)
	}
	at.Release(ctx(t), api.ReleaseRequest{IDs: ids})

	// A booking kept off two of the three nodes (after the gang's hour,
	// which may still show while its release goes round).
	b, err := at.Book(ctx(t), api.BookRequest{Count: 1, Start: time.Now().Add(3 * time.Hour).Round(time.Minute), Duration: "1h",
		NodeChoice: lease.NodeChoice{Exclude: []string{"node01", "node02"}}})
	if err != nil || b.Node != "node03" {
		t.Fatalf("book --exclude node01,node02: %+v, %v; want node03", b, err)
	}

	for _, tc := range []struct {
		name string
		req  api.SubmitRequest
		want string
	}{
		{"--node and --nodelist", api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Node: "node01", NodeChoice: lease.NodeChoice{Only: []string{"node02"}}}},
			"--node node01 and --nodelist both say where"},
		{"a node listed and excluded", api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, NodeChoice: lease.NodeChoice{Only: []string{"node01", "node02"}, Exclude: []string{"node02"}}}},
			"node02 is both in --nodelist and in --exclude"},
		{"a node the cluster lacks", api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, NodeChoice: lease.NodeChoice{Exclude: []string{"node09"}}}},
			"no node named node09 in the cluster"},
		{"a gang with too few nodes left", api.SubmitRequest{Nodes: 2, GPUsPerNode: 1, Claim: api.ClaimRequest{NodeChoice: lease.NodeChoice{Exclude: []string{"node01", "node02"}},
			Run: &api.RunSpec{Command: []string{"true"}}}}, "a 2-node request needs 2 nodes, and --nodelist/--exclude leave 1"},
	} {
		_, err := at.Submit(ctx(t), tc.req)
		var ae *api.Error
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) || ae.Code != string(refusal.CodeInvalid) {
			t.Errorf("%s: %v; want an invalid-request refusal saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := at.Claim(ctx(t), api.ClaimRequest{Count: 1, NodeChoice: lease.NodeChoice{Exclude: []string{"node01", "node02", "node03"}}}); err == nil ||
		!strings.Contains(err.Error(), "--nodelist/--exclude leave no node") {
		t.Errorf("a claim excluded from every node: %v", err)
	}
}

// An older agent's scheduler would ignore a queued request's --nodelist
// and --exclude and place it anywhere, so none is queued while one is
// live; a nodelist of one on one node is a --node pin, which it honours.
func TestNodelistWaitsForEveryNodeToUpgrade(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true,
		Protocols: []int{0, peer.MinVersion}})
	agenttest.WaitConverged(t, nodes, 30*time.Second)
	at := nodes[0].Client
	_, err := at.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", NodeChoice: lease.NodeChoice{Exclude: []string{"node01"}}}})
	if err == nil || !strings.Contains(err.Error(), "node02 runs an older dibs") || !strings.Contains(err.Error(), "--nodelist or --exclude") {
		t.Fatalf("a queued --exclude with an older node live: %v, want a refusal naming node02", err)
	}
	if q, _ := at.Queue(ctx(t)); len(q.Entries) != 0 {
		t.Errorf("the refused request left %d entries", len(q.Entries))
	}
	// node01 is held, so the pinned request waits, and shows its pin.
	held, err := at.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := at.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h", NodeChoice: lease.NodeChoice{Only: []string{"node02"}}}})
	if err != nil {
		t.Fatalf("a queued --nodelist of one with an older node live: %v, want it queued as --node", err)
	}
	if q, _ := at.Queue(ctx(t)); len(q.Entries) != 1 || q.Entries[0].Node != "node02" || q.Entries[0].Reason == nil || q.Entries[0].Reason.Node != "node02" {
		t.Errorf("the queue shows %+v; want the request pinned to node02, waiting there", q.Entries)
	}
	at.Release(ctx(t), api.ReleaseRequest{IDs: []string{held.ID}})
	agenttest.Eventually(t, 15*time.Second, "the pinned claim to start on node02", func() bool {
		return entryLease(nodes[0], s.ID) != nil && entryLease(nodes[0], s.ID).Node == "node02"
	})
}
