package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
)

// The third round of attacks (issue 20), the items a local user controls:
// their tmux server, their account's life, their files. Each test does
// what the attacker did, with real accounts, real tmux servers and real
// sockets.

// TestMutedTmuxDoesNotKeepTheAgentFromServing (issue 20, broken 2): a user
// swaps their tmux socket for a listener that never answers, then the
// agent restarts. It serves at once; the user's lease stays held while its
// session cannot be checked (no answer is not "gone"), another user's
// session that ended while the agent was down ends its lease as soon as it
// is checked, and once the server answers again the watch goes on.
func TestMutedTmuxDoesNotKeepTheAgentFromServing(t *testing.T) {
	agenttest.RequireTmux(t)
	mallory, alice := launchtest.User(t), launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", TmuxCallTimeout: 500 * time.Millisecond})
	held, err := n.Agent.For(mallory.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := n.Agent.For(alice.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{1}, Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	if out, err := n.Tmux(alice.UID, "kill-session", "-t", "="+ended.Session); err != nil {
		t.Fatalf("end alice's session while the agent is down: %v %s", err, out)
	}
	restore := launchtest.MuteTmux(t, n.Opts.TmuxTmpDir, mallory)

	began := time.Now()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		n.Restart()
	}()
	select {
	case <-restarted:
	case <-time.After(5 * time.Second):
		restore() // let the old code go on, so the test can end
		<-restarted
		t.Fatalf("the agent did not start within 5s while a user's tmux server did not answer (it started %v after the restart began, once the server answered)", time.Since(began).Round(time.Millisecond))
	}
	b, err := n.Client.Board(ctx(t))
	if err != nil {
		t.Fatalf("dibs ls right after the restart: %v", err)
	}
	t.Logf("the agent served %v after the restart began", time.Since(began).Round(time.Millisecond))
	if l := leaseOn(b, "node01", 0); l == nil || l.ID != held.ID {
		t.Fatalf("GPU 0 holds %+v right after the restart; want %s kept while its session is being checked", l, held.ID)
	}
	agenttest.Eventually(t, 5*time.Second, "alice's lease to end (its session ended while the agent was down)", func() bool {
		return leaseOn(n.Board(), "node01", 1) == nil
	})
	// Several unanswered checks later the lease is still held: an
	// absence, watched for the whole window.
	var l *lease.Lease
	if poll.Wait(2*time.Second, func() bool {
		l = leaseOn(n.Board(), "node01", 0)
		return l == nil || l.ID != held.ID
	}) {
		t.Fatalf("GPU 0 holds %+v after its server stayed silent; want %s kept (no answer is not \"gone\")", l, held.ID)
	}
	// The server answers again: the session is still watched, and its end
	// ends the lease.
	restore()
	if out, err := n.Tmux(mallory.UID, "kill-session", "-t", "="+held.Session); err != nil {
		t.Fatalf("end mallory's session: %v %s", err, out)
	}
	agenttest.Eventually(t, 5*time.Second, "mallory's lease to end with its session", func() bool {
		return leaseOn(n.Board(), "node01", 0) == nil
	})
}

// worldWritable is a fresh directory every user may write in.
func worldWritable(t *testing.T) string {
	t.Helper()
	d := agenttest.PublicDir(t)
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	return d
}

// eventsOf lists the node's events about one lease.
func eventsOf(t *testing.T, n *agenttest.Node, id string) []event.Event {
	t.Helper()
	l, err := n.Agent.For(0).Events(ctx(t), api.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Event
	for _, e := range l.Events {
		if e.Lease == id {
			out = append(out, e)
		}
	}
	return out
}

// TestBookedRunStartsOnlyAsItsAccount (issue 20, broken 5): a user books a
// run, then leaves; their uid goes to a newcomer. At the booked time the
// command runs as nobody: the booking ends, its event says why, and the
// newcomer's account runs nothing.
func TestBookedRunStartsOnlyAsItsAccount(t *testing.T) {
	agenttest.RequireTmux(t)
	leaver := launchtest.User(t)
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "1xH100-80GB", Clock: fake})
	out := filepath.Join(worldWritable(t), "ran-as")
	bk, err := n.Agent.For(leaver.UID).Book(ctx(t), api.BookRequest{Count: 1, Start: fake.Now().Add(time.Hour), Duration: "1h",
		Run: &api.RunSpec{Command: []string{"sh", "-c", "id -un > " + out + "; sleep 60"}}})
	if err != nil {
		t.Fatal(err)
	}
	newcomer := launchtest.Replace(t, leaver)
	fake.Advance(time.Hour)
	agenttest.Tick(t, fake, 100*time.Millisecond, 10*time.Second, "the booking to end (or its command to run)", func() bool {
		if _, err := os.Stat(out); err == nil {
			return true
		}
		for _, e := range eventsOf(t, n, bk.ID) {
			if e.Kind == event.EventEnd || e.Kind == event.EventRelease {
				return true
			}
		}
		return false
	})
	// An absence: a command started anyway would write within the window.
	poll.Wait(time.Second, func() bool { b, err := os.ReadFile(out); return err == nil && len(b) > 0 })
	if b, err := os.ReadFile(out); err == nil {
		t.Fatalf("the booked command of %s (uid %d) ran as %q, the account that has the uid now (%s)", leaver.Name, leaver.UID, strings.TrimSpace(string(b)), newcomer.Name)
	}
	if l := leaseOn(n.Board(), "node01", 0); l != nil {
		t.Errorf("GPU 0 held by %+v; want the booking ended, nothing started", l)
	}
	var texts []string
	for _, e := range eventsOf(t, n, bk.ID) {
		texts = append(texts, string(e.Kind)+": "+e.Text)
		if e.Reason == string(lease.EndUserGone) {
			return
		}
	}
	t.Errorf("events of %s:\n%s\nwant one ending it because its holder's account is gone", bk.ID, strings.Join(texts, "\n"))
}

// TestNoticesDoNotWaitForAnotherUsersTmux (issue 20, broken 3): mallory
// mutes her tmux server and has a pile of notices coming to her; alice's
// notice still reaches alice's tmux session at once, not after mallory's
// deliveries have each timed out.
func TestNoticesDoNotWaitForAnotherUsersTmux(t *testing.T) {
	agenttest.RequireTmux(t)
	mallory, alice := launchtest.User(t), launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "9xL40S"})
	root := n.Agent.For(0)
	var hers []string
	for gpu := range 8 {
		r, err := n.Agent.For(mallory.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{gpu}})
		if err != nil {
			t.Fatal(err)
		}
		hers = append(hers, r.ID)
	}
	mine, err := n.Agent.For(alice.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{8}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Sessions.Start(ctx(t), launch.Spec{Name: "shell", User: mallory, Command: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Sessions.Start(ctx(t), launch.Spec{Name: "shell", User: alice, Command: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	launchtest.MuteTmux(t, n.Opts.TmuxTmpDir, mallory)
	// An admin ends mallory's leases: eight notices to her muted server.
	if _, err := root.Release(ctx(t), api.ReleaseRequest{IDs: hers}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := root.Release(ctx(t), api.ReleaseRequest{IDs: []string{mine.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 30*time.Second, "alice's notice in her tmux session", func() bool {
		out, _ := n.Tmux(alice.UID, "show-options", "-t", "=shell:", "-qv", "@dibs-pending")
		return strings.Contains(out, mine.ID)
	})
	took := time.Since(began)
	t.Logf("alice's notice reached her tmux session %v after her lease ended, behind mallory's 8 to a muted server", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("alice's notice took %v; want well under 2s (mallory's muted tmux server must delay only mallory's notices)", took.Round(time.Millisecond))
	}
}

// TestQueuedRunStartsOnlyAsItsAccount (issue 20, broken 5): a user whose
// queued run already started once (so this node knows their name) queues
// another, then leaves, and their uid goes to a newcomer within the
// account cache's minute. When the GPU frees, the run starts as nobody:
// the request fails with an event that says why, and the newcomer's
// account runs nothing.
func TestQueuedRunStartsOnlyAsItsAccount(t *testing.T) {
	agenttest.RequireTmux(t)
	leaver := launchtest.User(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S"})
	me := n.Agent.For(leaver.UID)
	first, err := me.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the first run to start and end", func() bool {
		return hasEntryEvent(t, n, first.ID, event.EventFinish)
	})
	hold, err := n.Agent.For(0).Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(worldWritable(t), "ran-as")
	second, err := me.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{"sh", "-c", "id -un > " + out + "; sleep 60"}}}})
	if err != nil {
		t.Fatal(err)
	}
	newcomer := launchtest.Replace(t, leaver)
	if _, err := n.Agent.For(0).Release(ctx(t), api.ReleaseRequest{IDs: []string{hold.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 10*time.Second, "the second run to be refused (or to run)", func() bool {
		_, ran := os.Stat(out)
		return ran == nil || hasEntryEvent(t, n, second.ID, event.EventFail)
	})
	// An absence: a command started anyway would write within the window.
	poll.Wait(time.Second, func() bool { b, err := os.ReadFile(out); return err == nil && len(b) > 0 })
	if b, err := os.ReadFile(out); err == nil {
		t.Fatalf("the queued command of %s (uid %d) ran as %q, the account that has the uid now (%s)", leaver.Name, leaver.UID, strings.TrimSpace(string(b)), newcomer.Name)
	}
}

// hasEntryEvent reports whether the node recorded an event of kind about
// the queued request entry.
func hasEntryEvent(t *testing.T, n *agenttest.Node, entry string, kind event.EventKind) bool {
	l, err := n.Agent.For(0).Events(ctx(t), api.EventsRequest{})
	if err != nil {
		return false
	}
	for _, e := range l.Events {
		if e.Entry == entry && e.Kind == kind {
			return true
		}
	}
	return false
}

// TestNoAccountIsNotForwardedByName (issue 20, weak 8): a uid with no
// account on node01 is shown as "uid40000"; on node02 an account happens
// to have that name. node01 refuses, saying why, to act for the uid on
// node02 (or to queue for it, since a queued run starts by name), and
// node02 grants nothing to its account of that name.
func TestNoAccountIsNotForwardedByName(t *testing.T) {
	const orphan = 40000
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true,
		Users: agenttest.Users{"uid40000": 30005}})
	b := nodes[0].Agent.For(orphan)
	soon := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"claim on node02", func() error {
			_, err := b.Claim(ctx(t), api.ClaimRequest{Node: "node02", Count: 1})
			return err
		}},
		{"book on node02", func() error {
			_, err := b.Book(ctx(t), api.BookRequest{Node: "node02", Count: 1, Start: soon, Duration: "1h"})
			return err
		}},
		{"queue", func() error {
			_, err := b.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if refusal.CodeOf(err) != refusal.CodeForbidden || !strings.Contains(fmt.Sprint(err), "uid 40000 has no account on node01") {
				t.Errorf("%s for a uid with no account: %v; want a refusal saying it has no account", c.name, err)
			}
		})
	}
	agenttest.WaitConverged(t, nodes, 30*time.Second)
	bd := nodes[1].Board()
	if l := leaseOn(bd, "node02", 0); l != nil {
		t.Errorf("node02's GPU is held by %s (uid %d): a uid with no account acted there by the name %q", l.User, l.UID, "uid40000")
	}
	for _, nd := range bd.Nodes {
		if len(nd.Bookings) > 0 {
			t.Errorf("%s has bookings %+v; want none", nd.Name, nd.Bookings)
		}
	}
}

// TestMutedTmuxDoesNotDelayOthersLeaseEnds (issue 20, broken 2, the
// serving path): mallory's leases end at their time limit while her tmux
// server does not answer; alice's lease, due at the same moment, ends at
// once instead of waiting behind the kills of mallory's sessions.
func TestMutedTmuxDoesNotDelayOthersLeaseEnds(t *testing.T) {
	agenttest.RequireTmux(t)
	mallory, alice := launchtest.User(t), launchtest.User(t)
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Sim: "5xL40S", Policy: shortPolicy(lease.ActionEnd), Clock: fake})
	for gpu := range 4 {
		if _, err := n.Agent.For(mallory.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{gpu}, Duration: "1h",
			Run: &api.RunSpec{Command: []string{"sleep", "600"}}}); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := n.Agent.For(alice.UID).Claim(ctx(t), api.ClaimRequest{GPUs: []int{4}, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	launchtest.MuteTmux(t, n.Opts.TmuxTmpDir, mallory)
	fake.Advance(time.Hour + time.Minute)
	began := time.Now()
	agenttest.Eventually(t, 30*time.Second, "alice's lease to end at its time", func() bool {
		return leaseOn(n.Board(), "node01", 4) == nil
	})
	took := time.Since(began)
	t.Logf("alice's lease %s ended %v after its time came, beside four of mallory's whose server is muted", mine.ID, took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("alice's lease took %v to end; want at once (mallory's muted tmux server must not hold up the node's loop)", took.Round(time.Millisecond))
	}
}

// downUsers is an account database that can stop answering (LDAP down)
// without saying anyone is gone.
type downUsers struct {
	agenttest.Users
	down *atomic.Bool
}

func (u downUsers) LookupUser(name string) (launch.User, error) {
	if u.down.Load() {
		return launch.User{}, errors.New("ldap: server unreachable")
	}
	return u.Users.LookupUser(name)
}

// TestHolderLookupDownKeepsTheLease: the account database does not answer
// while the agent restarts. The check that a session runs as its holder's
// account is not a verdict then: the lease stays held, and its session is
// watched again once the database answers.
func TestHolderLookupDownKeepsTheLease(t *testing.T) {
	agenttest.RequireTmux(t)
	down := &atomic.Bool{}
	users := downUsers{Users: agenttest.Users{"heavy": 30001}, down: down}
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S", Users: users, SessionPoll: 50 * time.Millisecond})
	r, err := n.As(heavy).Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	n.Restart()
	// An absence over twice the retry interval: the lease stays held.
	var l *lease.Lease
	if poll.Wait(time.Second, func() bool {
		l = leaseOn(n.Board(), "node01", 0)
		return l == nil || l.ID != r.ID
	}) {
		t.Fatalf("GPU 0 holds %+v while the account database is down; want %s kept", l, r.ID)
	}
	down.Store(false)
	if out, err := n.Tmux(30001, "kill-session", "-t", "="+r.Session); err != nil {
		t.Fatalf("end the session: %v %s", err, out)
	}
	agenttest.Eventually(t, 5*time.Second, "the lease to end with its session once the database answers", func() bool {
		return leaseOn(n.Board(), "node01", 0) == nil
	})
}
