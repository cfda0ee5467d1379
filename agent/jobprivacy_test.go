package agent_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Made-up teammates every node of these tests knows: mallory queues and
// books with huge commands; carol only looks.
var (
	mallory     = lease.Caller{UID: 31001, User: "mallory"}
	carol       = lease.Caller{UID: 31002, User: "carol"}
	attackUsers = agenttest.Users{"mallory": 31001, "carol": 31002}
)

// bigRun is a run whose command is just under the 64 KiB a command may
// hold and whose carried PATH is 7 KiB: what one person may legitimately
// submit, many times over.
func bigRun(i int) *api.RunSpec {
	return &api.RunSpec{
		Command: []string{"sh", "-c", "echo " + strings.Repeat("x", 60<<10) + " " + string(rune('a'+i%26)), "API_KEY=sk-secret"},
		Dir:     "/srv/secret-project",
		Env:     map[string]string{"PATH": "/usr/bin:/bin:" + strings.Repeat("/opt/p", 7<<10/6)},
	}
}

// seesHeld waits until node sees GPU gpu of node01 held by holder.
func seesHeld(t *testing.T, n *agenttest.Node, gpu int, holder string) {
	t.Helper()
	agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to see node01's GPU held by "+holder, func() bool {
		for _, bn := range n.BoardAs(carol).Nodes {
			if bn.Name != "node01" {
				continue
			}
			for _, g := range bn.GPUs {
				if g.Index == gpu && g.Lease != nil && g.Lease.User == holder {
					return true
				}
			}
		}
		return false
	})
}

// Broken 4 of issue 20: thirty queued runs with 60 KB commands pushed
// their origin's published section past the 1 MiB limit, the origin
// stopped publishing, and every other node went on showing old holders.
// The commands now stay with the origin: the entries travel without them,
// a lease change made after them reaches the other node at once, and the
// runs still start with their commands where the scheduler places them.
func TestOnePersonsQueuedCommandsCannotFreezeTheNodesGossip(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S", "2xL40S"}, Quiet: true, Users: attackUsers})
	n1, n2 := nodes[0], nodes[1]
	if _, err := n1.As(carol).Claim(ctx(t), api.ClaimRequest{GPUs: []int{0, 1}, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	// Thirty runs that can never start (all four GPUs of node01, two held).
	var ids []string
	for i := range 30 {
		s, err := n1.As(mallory).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Node: "node01", Count: 4, Duration: "1h", Run: bigRun(i)}})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, s.ID)
	}
	// A lease change after them reaches the other node.
	if _, err := n1.As(carol).Claim(ctx(t), api.ClaimRequest{GPUs: []int{2}, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	seesHeld(t, n2, 2, "carol")
	// The entries travelled, without their commands.
	agenttest.Eventually(t, 5*time.Second, "node02 to list node01's thirty entries", func() bool {
		q, _ := n2.As(carol).Queue(ctx(t))
		got := 0
		for _, e := range q.Entries {
			if slices.Contains(ids, e.ID) {
				got++
			}
		}
		return got == 30
	})
	for _, n := range nodes {
		for _, p := range n.Agent.Service().View().Nodes {
			for _, e := range p.Queue {
				if e.Origin == n.Opts.Name {
					continue // the origin's own copy is whole
				}
				if e.Job == nil || len(e.Job.Command) > 0 || e.Job.Dir != "" || len(e.Job.Env) > 0 || !e.Job.Kept {
					t.Fatalf("%s holds %s's job from gossip as %+v; want only its public part", n.Opts.Name, e.ID, e.Job)
				}
			}
		}
	}
}

// A queued run placed on a node other than its origin starts with its
// command, directory and environment, though gossip carries none of them:
// the scheduler takes them from the origin and carries them in its start.
func TestQueuedRunPlacedElsewhereStartsWithItsCommand(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	out := agenttest.PublicDir(t) + "/ran"
	s, err := nodes[1].Me().Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Node: "node01", Count: 1, Duration: "10m", Run: &api.RunSpec{
		Command: []string{"sh", "-c", "echo \"$PWD $PATH\" > " + out + "; sleep 30"}, Dir: "/tmp",
		Env: map[string]string{"PATH": "/usr/bin:/bin:/carried"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the run placed on node01 to write its file", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.HasPrefix(string(b), "/tmp ") && strings.Contains(string(b), "/carried")
	})
	if q := nodes[1].Queue(); len(q.Entries) != 1 || q.Entries[0].ID != s.ID {
		t.Errorf("queue at the origin: %+v, want %s", q.Entries, s.ID)
	}
}

// One person's queued entries and bookings are capped, refused at submit
// with what to do; the caps protect every node's gossip section.
func TestQueueAndBookingCapsPerPerson(t *testing.T) {
	t.Parallel()
	p := lease.DefaultPolicy()
	p.BookMaxCount = 2
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Users: attackUsers, Policy: p, Sched: queue.SchedConfig{MaxQueuedPerUser: 3}})
	if _, err := n.As(carol).Claim(ctx(t), api.ClaimRequest{Count: 2, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := n.As(mallory).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	_, err := n.As(mallory).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "you have 3 requests queued or running") || !strings.Contains(err.Error(), "cancel some") {
		t.Errorf("a fourth entry: %v; want a refusal saying the cap and what to do", err)
	}
	// Someone else is not held to mallory's count.
	if _, err := n.As(carol).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "1h"}}); err != nil {
		t.Errorf("carol's first entry: %v", err)
	}
	start := time.Now().Add(2 * time.Hour)
	for i := range 2 {
		if _, err := n.As(mallory).Book(ctx(t), api.BookRequest{Count: 1, Start: start.Add(time.Duration(i) * 2 * time.Hour), Duration: "1h"}); err != nil {
			t.Fatalf("booking %d: %v", i, err)
		}
	}
	_, err = n.As(mallory).Book(ctx(t), api.BookRequest{Count: 1, Start: start.Add(10 * time.Hour), Duration: "1h"})
	if refusal.CodeOf(err) != refusal.CodeConflict || !strings.Contains(err.Error(), "you hold 2 bookings") || !strings.Contains(err.Error(), "unbook some") {
		t.Errorf("a third booking: %v; want a refusal saying the cap and what to do", err)
	}
}

// Broken 4's second form: twenty bookings with 60 KB commands froze the
// node's gossip the same way. A booked run's command stays with the node
// that starts it; the default cap refuses the seventeenth booking.
func TestOnePersonsBookedCommandsCannotFreezeTheNodesGossip(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"4xL40S", "2xL40S"}, Quiet: true, Users: attackUsers})
	n1, n2 := nodes[0], nodes[1]
	start := time.Now().Add(time.Hour)
	booked := 0
	for i := range 20 {
		_, err := n1.As(mallory).Book(ctx(t), api.BookRequest{Node: "node01", GPUs: []int{i % 4}, Start: start.Add(time.Duration(i/4) * 2 * time.Hour), Duration: "1h", Run: bigRun(i)})
		if err != nil {
			if i < lease.DefaultBookMaxCount {
				t.Fatalf("booking %d: %v", i, err)
			}
			if !strings.Contains(err.Error(), "bookings on node01, the most one person may") {
				t.Errorf("booking %d refused with %v; want the per-person cap", i, err)
			}
			continue
		}
		booked++
	}
	if booked != lease.DefaultBookMaxCount {
		t.Errorf("%d bookings accepted, want the default cap %d", booked, lease.DefaultBookMaxCount)
	}
	if _, err := n1.As(carol).Claim(ctx(t), api.ClaimRequest{GPUs: []int{3}, Duration: "30m"}); err != nil {
		t.Fatal(err)
	}
	seesHeld(t, n2, 3, "carol")
	agenttest.Eventually(t, 5*time.Second, "node02 to list mallory's bookings", func() bool {
		bs, _ := n2.As(carol).Bookings(ctx(t))
		return len(bs.Bookings) == booked
	})
}

// Weak 5 of issue 20: `dibs bookings --json` and /v1/run showed other
// people's booked and queued commands (one with an API key), directories
// and environments. They show only to the holder and admins, in every view
// (bookings, queue, run, the board the TUI and the SSH board draw, events),
// at the origin and elsewhere.
func TestOthersCommandsAreShownOnlyToTheirHolderAndAdmins(t *testing.T) {
	t.Parallel()
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true, Users: attackUsers})
	admin := lease.Caller{UID: 0, User: "root", Admin: true}
	n1 := nodes[0]
	if _, err := n1.As(carol).Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 2, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	run := &api.RunSpec{Command: []string{"train.py", "--api-key=sk-live-123"}, Dir: "/srv/mallory-secret", Env: map[string]string{"PATH": "/home/mallory/venv/bin:/usr/bin"}}
	q, err := n1.As(mallory).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Node: "node01", Count: 2, Duration: "1h", Run: run}})
	if err != nil {
		t.Fatal(err)
	}
	bk, err := n1.As(mallory).Book(ctx(t), api.BookRequest{Node: "node01", Count: 1, Start: time.Now().Add(3 * time.Hour), Duration: "1h", Run: run})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"sk-live-123", "mallory-secret", "venv"}
	views := func(n *agenttest.Node, c lease.Caller) string {
		b := n.As(c)
		var all []any
		bs, _ := b.Bookings(ctx(t))
		qq, _ := b.Queue(ctx(t))
		r1, _ := b.Run(ctx(t), q.ID)
		board, _ := b.Board(ctx(t))
		evs, _ := b.Events(ctx(t), api.EventsRequest{})
		all = append(all, bs, qq, r1, board, evs)
		out, _ := json.Marshal(all)
		return string(out)
	}
	for _, n := range nodes {
		agenttest.Eventually(t, 5*time.Second, n.Opts.Name+" to know the entry and the booking", func() bool {
			s := views(n, carol)
			return strings.Contains(s, q.ID) && strings.Contains(s, bk.ID)
		})
		got := views(n, carol)
		for _, sec := range secrets {
			if strings.Contains(got, sec) {
				t.Errorf("carol's views at %s show %q of mallory's run", n.Opts.Name, sec)
			}
		}
		if !strings.Contains(got, `"kept":true`) {
			t.Errorf("carol's views at %s do not say the run runs a command", n.Opts.Name)
		}
	}
	// Its holder and an admin see it whole where it is kept (the origin,
	// the booking's node).
	for _, c := range []lease.Caller{mallory, admin} {
		got := views(n1, c)
		for _, sec := range secrets {
			if !strings.Contains(got, sec) {
				t.Errorf("%s's views at node01 miss %q of mallory's run", c.User, sec)
			}
		}
	}
}

// A command too large to travel between agents as sent (control characters
// take six bytes each) is refused at submit, with what to do, rather than
// queued to fail at its start.
func TestOversizedJobRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Users: attackUsers})
	run := &api.RunSpec{Command: []string{"echo", strings.Repeat("\x01", 30<<10)}}
	for name, submit := range map[string]func() error{
		"queue": func() error {
			_, err := n.As(mallory).Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Run: run}})
			return err
		},
		"book": func() error {
			_, err := n.As(mallory).Book(ctx(t), api.BookRequest{Count: 1, Start: time.Now().Add(time.Hour), Duration: "1h", Run: run})
			return err
		},
	} {
		if err := submit(); refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), "put the command in a script") {
			t.Errorf("%s: %v; want a refusal saying to put the command in a script", name, err)
		}
	}
	if q := n.Queue(); len(q.Entries) != 0 {
		t.Errorf("queue holds %d entries after the refusals", len(q.Entries))
	}
}
