package agent_test

import (
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

var (
	mbookUsers       = agenttest.Users{"alice": 2401, "bob": 2402}
	mbookAlice, mbob = lease.Caller{UID: 2401, User: "alice"}, lease.Caller{UID: 2402, User: "bob"}
)

// partsOf is what node n's agent sees of the bookings: for each node, the
// ids of its bookings, with their groups.
func partsOf(t *testing.T, n *agenttest.Node) map[string][]lease.Lease {
	t.Helper()
	bs, err := n.Client.Bookings(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]lease.Lease{}
	for _, b := range bs.Bookings {
		out[b.Node] = append(out[b.Node], b)
	}
	return out
}

// A booking across three nodes is one booking: a part on every node, all
// linked to the first part's id; claims and the queue on every node honour
// it, and unbooking that id from any node withdraws every part.
func TestBookingAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Users: mbookUsers, Quiet: true})
	start := time.Now().Add(2 * time.Hour)
	bk, err := nodes[1].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 3, Count: 2, Start: start, Duration: "3h", Note: "big run"})
	if err != nil {
		t.Fatal(err)
	}
	if !bk.Booked || bk.Group != bk.ID || len(bk.GPUs) != 2 {
		t.Fatalf("the booking's answer %+v: want its first part, naming the group by its own id, with 2 GPUs", bk)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see a part of "+bk.ID+" on every node", func() bool {
			parts := partsOf(t, n)
			for _, name := range []string{"node01", "node02", "node03"} {
				if len(parts[name]) != 1 || parts[name][0].Group != bk.ID || parts[name][0].User != "bob" || len(parts[name][0].GPUs) != 2 {
					return false
				}
			}
			return true
		})
	}

	// Claims on every node stop before it, or are refused across it.
	for _, name := range []string{"node01", "node02", "node03"} {
		_, err := nodes[0].As(mbookAlice).Claim(ctx(t), api.ClaimRequest{Node: name, Count: 1, Duration: "3h"})
		if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "booked by bob") {
			t.Errorf("a 3h claim on %s across the booking: %v, want a refusal naming bob's booking", name, err)
		}
	}
	r, err := nodes[0].As(mbookAlice).Claim(ctx(t), api.ClaimRequest{Node: "node03", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Round(0); !r.ExpiresAt.Equal(want) || r.CutBy == "" {
		t.Errorf("a claim on node03 under the booking: until %s, cut by %q; want it to end at %s, cut by node03's part", r.ExpiresAt, r.CutBy, want)
	}
	if _, err := nodes[0].As(mbookAlice).Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	// The queue: a 4h run of 2 GPUs fits on no node before the booking.
	long, err := nodes[0].As(mbookAlice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2, Duration: "4h"}})
	if err != nil {
		t.Fatal(err)
	}
	end := start.Round(0).Add(3 * time.Hour)
	agenttest.Eventually(t, 5*time.Second, "the 4h run to wait for the booking to end", func() bool {
		for _, e := range nodes[0].Queue().Entries {
			if e.ID == long.ID {
				return !e.Running && e.EstStart.Equal(end)
			}
		}
		return false
	})

	// Backfill: a 1h run ends before the booking, so it starts now.
	short, err := nodes[0].As(mbookAlice).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the 1h run to start before the booking", func() bool {
		for _, e := range nodes[0].Queue().Entries {
			if e.ID == short.ID {
				return e.Running
			}
		}
		return false
	})

	// Only its holder (or an admin) withdraws it: alice's try leaves every part.
	if err := nodes[0].As(mbookAlice).Unbook(ctx(t), bk.ID); refusal.CodeOf(err) != refusal.CodeForbidden || strings.Contains(err.Error(), "withdrew") {
		t.Errorf("alice unbooking bob's booking: %v; want a plain refusal", err)
	}
	if parts := partsOf(t, nodes[0]); len(parts) != 3 {
		t.Errorf("after alice's try, parts on %d nodes, want 3", len(parts))
	}

	// Unbook from another node, by the whole's id.
	if err := nodes[2].As(mbob).Unbook(ctx(t), bk.ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see no part of "+bk.ID+" left", func() bool {
			return len(partsOf(t, n)) == 0
		})
	}
}

// All or nothing: when one node refuses its part (bob already holds the
// most bookings node03 allows), the parts the other nodes made are
// withdrawn, and the refusal names the node and its reason. Unbooking by
// any part's id withdraws the whole.
func TestBookingAcrossNodesAllOrNothing(t *testing.T) {
	t.Parallel()
	policy := lease.DefaultPolicy()
	policy.BookMaxCount = 1
	policy.BookMaxGPUHours = 20
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Users: mbookUsers, Policy: policy, Quiet: true})
	start := time.Now().Add(2 * time.Hour)
	own, err := nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Node: "node03", Count: 1, Start: start.Add(6 * time.Hour), Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see bob's booking on node03", func() bool { return len(partsOf(t, nodes[0])["node03"]) == 1 })

	// The booked GPU-hours count every part: 3 × 2 GPUs × 4h is 24, past 20.
	_, err = nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 3, Count: 2, Start: start, Duration: "4h"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "one person may hold 20 GPU-hours of bookings; you hold 1 and this one is 24") {
		t.Errorf("a booking across nodes past the GPU-hours cap: %v", err)
	}
	_, err = nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 3, Count: 2, Start: start, Duration: "3h"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "node03 refused its part") || !strings.Contains(err.Error(), "nothing was booked") {
		t.Fatalf("a booking across three nodes that node03 refuses: %v; want a conflict naming node03 and saying nothing was booked", err)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see only bob's own booking on node03", func() bool {
			parts := partsOf(t, n)
			return len(parts) == 1 && len(parts["node03"]) == 1 && parts["node03"][0].ID == own.ID
		})
	}

	// Once node03 can take it, the booking is made; a part's id
	// withdraws the whole.
	if err := nodes[0].As(mbob).Unbook(ctx(t), own.ID); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see bob's booking withdrawn", func() bool { return len(partsOf(t, nodes[0])) == 0 })
	bk, err := nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 3, Count: 2, Start: start, Duration: "3h"})
	if err != nil {
		t.Fatal(err)
	}
	part := partsOf(t, nodes[0])["node02"]
	if len(part) != 1 || part[0].Group != bk.ID {
		t.Fatalf("node02's part: %+v, want one linked to %s", part, bk.ID)
	}
	if err := nodes[0].As(mbob).Unbook(ctx(t), part[0].ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see no part left", func() bool { return len(partsOf(t, n)) == 0 })
	}
}

// Placement across nodes reads the pools as a single-node booking does:
// on issue 23's cluster a 3h booking of one GPU on each of two nodes skips
// the l40s pool (max_time 2h) and lands on the H100 and the whole A100;
// carol, outside pool a100, is refused with what every node said.
func TestBookingAcrossNodesHonoursPools(t *testing.T) {
	t.Parallel()
	nodes := holdCluster(t)
	start := time.Now().Add(2 * time.Hour)
	bk, err := nodes[1].As(holdAlice).Book(ctx(t), api.BookRequest{Nodes: 2, Count: 1, Start: start, Duration: "3h"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	agenttest.Eventually(t, 5*time.Second, "both parts to be seen", func() bool {
		got = got[:0]
		for name, ps := range partsOf(t, nodes[1]) {
			if len(ps) == 1 && ps[0].Group == bk.ID {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		return len(got) == 2
	})
	if !slices.Equal(got, []string{"node01", "node03"}) {
		t.Errorf("alice's booking across two nodes went to %v, want node01 and node03 (node02's pool allows 2h)", got)
	}
	// node01, where carol books, has heard of both of alice's parts before
	// her try, so what it holds after the refusal is what the refusal left.
	agenttest.Eventually(t, 5*time.Second, "node01 to see alice's two parts", func() bool { return len(partsOf(t, nodes[0])) == 2 })
	_, err = nodes[0].As(holdCarol).Book(ctx(t), api.BookRequest{Nodes: 2, Count: 1, Start: start, Duration: "3h"})
	if err == nil || !strings.Contains(err.Error(), "only 1 node can take a part") {
		t.Errorf("carol's booking across two nodes (only node01 may take her for 3h): %v; want a refusal saying only one node can", err)
	}
	if n := len(partsOf(t, nodes[0])); n != 2 {
		t.Errorf("after carol's refusal %d nodes hold bookings, want alice's 2", n)
	}
}

// A booking across nodes while a node runs the previous release is
// refused, naming that node, before anything is booked; a booking of one
// node still works.
func TestBookingAcrossNodesNeedsEveryNodeUpgraded(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Users: mbookUsers, Quiet: true,
		Protocols: []int{0, 0, peer.MinVersion}})
	start := time.Now().Add(2 * time.Hour)
	_, err := nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 2, Count: 1, Start: start, Duration: "1h"})
	if refusal.CodeOf(err) != refusal.CodeUnavailable || !strings.Contains(err.Error(), "node03 runs an older dibs") {
		t.Fatalf("a booking across nodes beside a protocol-6 node: %v; want it refused naming node03", err)
	}
	if n := len(partsOf(t, nodes[0])); n != 0 {
		t.Errorf("%d nodes hold bookings after the refusal, want none", n)
	}
	if _, err := nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Node: "node03", Count: 1, Start: start, Duration: "1h"}); err != nil {
		t.Errorf("a booking of the protocol-6 node alone: %v", err)
	}
}

// A retry of a booking across nodes (the client resends its request id
// when the agent restarted under it) makes only the parts the first
// attempt did not, and a retry of a whole booking makes none.
func TestBookingAcrossNodesRetryMakesMissingParts(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Users: mbookUsers, Quiet: true})
	req := api.BookRequest{Nodes: 3, Count: 2, Start: time.Now().Add(2 * time.Hour), Duration: "3h", RequestID: "retry-across-1"}
	bk, err := nodes[0].As(mbob).Book(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	whole := func(want int) func() bool {
		return func() bool {
			parts := partsOf(t, nodes[0])
			n := 0
			for _, ps := range parts {
				for _, p := range ps {
					if p.Group == bk.ID {
						n++
					}
				}
			}
			return n == want && len(parts) == want
		}
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see 3 parts", whole(3))
	// As if the first attempt had stopped before node02's part.
	part := partsOf(t, nodes[0])["node02"][0]
	if _, err := nodes[0].As(mbob).Release(ctx(t), api.ReleaseRequest{IDs: []string{part.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see 2 parts", whole(2))
	for i := range 2 {
		again, err := nodes[0].As(mbob).Book(ctx(t), req)
		if err != nil || again.ID != bk.ID {
			t.Fatalf("retry %d: %+v, %v; want the first part %s", i, again, err, bk.ID)
		}
		agenttest.Eventually(t, 5*time.Second, "the retry to make node02's part again, and nothing more", whole(3))
		if ps := partsOf(t, nodes[0])["node02"]; len(ps) != 1 || ps[0].ID == part.ID {
			t.Errorf("retry %d: node02 holds %+v; want one new part", i, ps)
		}
	}
}

// Unbooking while one node of the booking is down withdraws every part it
// can reach, names the node whose part is left, and the same command
// withdraws that part once the node is back.
func TestUnbookAcrossNodesWithANodeDown(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xH100-80GB", "2xH100-80GB", "2xH100-80GB"}, Users: mbookUsers, Quiet: true})
	bk, err := nodes[0].As(mbob).Book(ctx(t), api.BookRequest{Nodes: 3, Count: 1, Start: time.Now().Add(2 * time.Hour), Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see 3 parts", func() bool { return len(partsOf(t, nodes[0])) == 3 })
	nodes[2].Stop()
	err = nodes[0].As(mbob).Unbook(ctx(t), bk.ID)
	if err == nil || !strings.Contains(err.Error(), "withdrew 2 of the 3 parts of booking "+bk.ID+"; the part is left on node03") ||
		!strings.Contains(err.Error(), "run dibs unbook "+bk.ID+" again when node03 answers") {
		t.Fatalf("unbook with node03 down: %v; want node03's part named as left", err)
	}
	agenttest.Eventually(t, 5*time.Second, "node01 to see only node03's part", func() bool {
		parts := partsOf(t, nodes[0])
		return len(parts) == 1 && len(parts["node03"]) == 1
	})
	nodes[2].Restart()
	agenttest.WaitConverged(t, nodes, 15*time.Second)
	agenttest.Eventually(t, 5*time.Second, "node01 to see node03's part again", func() bool { return len(partsOf(t, nodes[0])["node03"]) == 1 })
	if err := nodes[0].As(mbob).Unbook(ctx(t), bk.ID); err != nil {
		t.Fatalf("unbook %s again with node03 back: %v", bk.ID, err)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see no part left", func() bool { return len(partsOf(t, n)) == 0 })
	}
}
