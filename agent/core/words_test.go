package core_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
)

// TestUsageCountsPartsAsQuotasDo: the usage report's Running counts a MIG
// instance as its share of the GPU, as quotas and pools do, not as a
// whole running GPU (issue 30); a whole GPU counts 1.
func TestUsageCountsPartsAsQuotasDo(t *testing.T) {
	c := newClusterOf(t, clock.NewFake(t0), map[string]users{"node01": accounts(1000, "alice", "bob")},
		clusterOptions{specs: map[string]string{"node01": "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB"}})
	a := c["node01"]
	ctx := context.Background()
	mig, err := asUser(a, "alice").Claim(ctx, api.ClaimRequest{MIG: "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asUser(a, "bob").Claim(ctx, api.ClaimRequest{Count: 1}); err != nil {
		t.Fatal(err)
	}
	var share float64
	for _, l := range a.node.State().Leases {
		if l.ID == mig.ID {
			share = l.Weight()
		}
	}
	if share <= 0 || share >= 1 {
		t.Fatalf("the MIG lease weighs %v; want a share of its GPU", share)
	}
	rep, err := asUser(a, "alice").Usage(ctx, "7d")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, u := range rep.Users {
		got[u.User] = u.Running
	}
	if got["alice"] != share || got["bob"] != 1 {
		t.Errorf("running: alice %v, bob %v; want alice %v (her MIG instance's share, as quotas count it) and bob 1", got["alice"], got["bob"], share)
	}
}

// TestAttachTakesTheNamesLogsTakes: `dibs attach` resolves a run by the
// names `dibs logs` takes (one resolver, node.MatchRun): a lease id, and a tmux
// session's name, which it refused with "no lease" (issue 30). A name that
// several live sessions answer to is answered with the list to pick from.
func TestAttachTakesTheNamesLogsTakes(t *testing.T) {
	c := newClusterOf(t, clock.NewFake(t0), map[string]users{"node01": accounts(1000, "alice", "bob")}, clusterOptions{sessions: &started{}})
	a := c["node01"]
	ctx := context.Background()
	alice := asUser(a, "alice")
	train, err := alice.Claim(ctx, api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "train", Command: []string{"sleep", "300"}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := alice.Claim(ctx, api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{"sleep", "300"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{train.ID, train.ID},
		{"train", train.ID},
		{plain.Session, plain.ID}, // dibs-node01-2
		{plain.ID, plain.ID},
	} {
		r, err := alice.Attach(ctx, tc.name)
		if err != nil || r.Lease.ID != tc.want || strings.Join(r.Command, " ") != "tmux attach -t "+r.Lease.Session {
			t.Errorf("attach %s: %+v, %v; want lease %s's session", tc.name, r, err, tc.want)
		}
	}
	if _, err := asUser(a, "bob").Attach(ctx, "train"); err == nil || code(err) != refusal.CodeNotFound {
		t.Errorf("bob attaching to alice's session by its name: %v; want not found (only your own sessions answer)", err)
	}
	again, err := alice.Claim(ctx, api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "train", Command: []string{"sleep", "300"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.Attach(ctx, "train")
	if err == nil || !strings.Contains(err.Error(), "2 of your sessions answer to train: attach to one by its lease id: "+train.ID+", "+again.ID) {
		t.Errorf("attach train with two sessions named so: %v; want the two lease ids to pick from", err)
	}
	if _, err := alice.Attach(ctx, "nothing"); err == nil || !strings.Contains(err.Error(), "no live run of yours named nothing") {
		t.Errorf("attach nothing: %v; want a refusal naming it", err)
	}
}

// TestClaimAnswersSayHere: every answer the local API gives for a lease
// says whether it is on the answering node, in JSON as "here": true or
// false, never left out (`claim --json` left out false, where the docs say
// true|false; a retried claim and an extend's answer said nothing of it).
func TestClaimAnswersSayHere(t *testing.T) {
	c := newCluster(t, clock.NewFake(t0), map[string]users{"node01": accounts(1000, "alice"), "node02": accounts(2000, "alice")})
	ctx := context.Background()
	alice := asUser(c["node01"], "alice")
	there, err := alice.Claim(ctx, api.ClaimRequest{Node: "node02", Count: 1, RequestID: "req-there-0001"})
	if err != nil {
		t.Fatal(err)
	}
	here, err := alice.Claim(ctx, api.ClaimRequest{Node: "node01", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	retried, err := alice.Claim(ctx, api.ClaimRequest{Node: "node02", Count: 1, RequestID: "req-there-0001"})
	if err != nil {
		t.Fatal(err)
	}
	extended, err := alice.Extend(ctx, api.ExtendRequest{ID: here.ID, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    api.ClaimResponse
		want bool
	}{{"on node02", there, false}, {"on node01", here, true}, {"retried", retried, false}, {"extended", extended, true}} {
		b, _ := json.Marshal(tc.r)
		var m map[string]any
		json.Unmarshal(b, &m)
		if v, ok := m["here"]; !ok || v != tc.want {
			t.Errorf("%s: %s; want \"here\": %v", tc.name, b, tc.want)
		}
	}
}
