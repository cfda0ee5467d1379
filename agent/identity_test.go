package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"github.com/dibs-gpu/dibs/lease"
)

// TestIdentityMatrix asserts who may do what, by which path, against a lease
// and a queue entry that belong to owner on node02:
//
//   - actors: the owner, another user, a member of the admin group, root, a
//     user unknown on node02 ("ghost": an account only node01 has; on
//     node02's own doors, a uid with no account there), and a peer holding
//     the cluster key acting as the owner or as the cluster itself;
//   - actions: claim, release, extend, attach, adopt, run, queue, cancel;
//   - paths: node02's unix socket (the service bound to the kernel's uid),
//     node02's SSH board (the service bound to the key's user name), and
//     forwarded from node01.
//
// Every cell is asserted: "ok" or the refusal's code.
func TestIdentityMatrix(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	adminGroup := launchtest.Group(t)
	owner, other, admin := launchtest.User(t), launchtest.User(t), launchtest.User(t, adminGroup)
	const ghostUID = 4242
	p := lease.DefaultPolicy()
	p.AdminGroup = adminGroup

	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	os.WriteFile(load, []byte(fmt.Sprintf(`{"gpus":{"3":{"utilization_pct":40,"processes":[{"pid":31337,"user":%q,"uid":%d,"command":"python","used_memory_mib":100}]}}}`, owner.Name, owner.UID)), 0o644)
	key := make([]byte, 32)
	tmux := agenttest.TmuxDir(t)
	n1 := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "4xL40S", Policy: p, TmuxTmpDir: tmux, Quiet: true,
		Users:   agenttest.Users{"ghost": ghostUID},
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "m", Key: key, Fast: true}})
	n2 := agenttest.Start(t, agenttest.Options{Name: "node02", Sim: "4xL40S", Policy: p, TmuxTmpDir: tmux, Quiet: true, SimLoad: load,
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "m", Key: key, Fast: true, Join: []string{n1.Agent.GossipAddr()}}})
	agenttest.WaitConverged(t, []*agenttest.Node{n1, n2}, 15*time.Second)

	type actor struct {
		name string
		uid  int
		user string
	}
	actors := []actor{
		{"owner", owner.UID, owner.Name}, {"other", other.UID, other.Name}, {"admin", admin.UID, admin.Name},
		{"root", 0, "root"}, {"ghost", ghostUID, "ghost"},
	}
	ownerB := n2.Agent.For(owner.UID)
	// owned is what both nodes hold of their own: every lease and queue
	// entry by id, as stored, so any change a cell made shows.
	owned := func() map[string]string {
		m := map[string]string{}
		for _, n := range []*agenttest.Node{n1, n2} {
			local := n.Agent.Service().View().Local()
			for _, l := range local.Leases {
				j, _ := json.Marshal(l)
				m["lease "+l.ID] = string(j)
			}
			for _, e := range local.Queue {
				j, _ := json.Marshal(e)
				m["entry "+e.ID] = string(j)
			}
		}
		return m
	}
	// clear withdraws, as root, every entry and then every lease that keep
	// does not hold, until both nodes hold nothing else (a start may be in
	// flight). It reports whether what keep holds is there unchanged.
	clear := func(t *testing.T, keep map[string]string) bool {
		t.Helper()
		agenttest.Eventually(t, 10*time.Second, "both nodes to hold nothing but what the setup made", func() bool {
			done := true
			for _, n := range []*agenttest.Node{n1, n2} {
				rootHere := n.Agent.Service().ForCaller(lease.Caller{UID: 0, User: "root", Admin: true})
				local := n.Agent.Service().View().Local()
				// What waits first, so nothing starts on what is freed.
				for _, e := range local.Queue {
					if _, ok := keep["entry "+e.ID]; !ok {
						rootHere.Cancel(context.Background(), e.ID)
						done = false
					}
				}
				for _, l := range local.Leases {
					if _, ok := keep["lease "+l.ID]; !ok {
						rootHere.Release(context.Background(), api.ReleaseRequest{IDs: []string{l.ID}})
						done = false
					}
				}
			}
			return done
		})
		return maps.Equal(owned(), keep)
	}
	// last is what the latest setup made.
	var last struct {
		l     lease.Lease
		entry string
		made  map[string]string
	}
	// setup gives owner a run (so it has a session) and a queue entry on
	// node02, and frees everything else. The run and the entry are fresh
	// unless the last setup's are still there as it made them: then only
	// what the cell added goes.
	setup := func(t *testing.T) (lease.Lease, string) {
		t.Helper()
		if last.made != nil && clear(t, last.made) {
			return last.l, last.entry
		}
		clear(t, nil)
		r, err := ownerB.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
		if err != nil {
			t.Fatalf("owner's run: %v", err)
		}
		// Holding GPU 1 too keeps the queued request waiting.
		if _, err := ownerB.Claim(ctx(t), api.ClaimRequest{GPUs: []int{1, 2}}); err != nil {
			t.Fatalf("owner's claim: %v", err)
		}
		s, err := ownerB.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 4, Node: "node02"}})
		if err != nil {
			t.Fatalf("owner's queued request: %v", err)
		}
		l, _ := n2.Agent.Service().View().FindLease(r.ID)
		agenttest.Eventually(t, 5*time.Second, "node01 to see owner's lease", func() bool {
			v := n1.Agent.Service().View()
			_, ok := v.FindLease(r.ID)
			return ok
		})
		last.l, last.entry, last.made = l, s.ID, owned()
		return l, s.ID
	}

	type doer func(b *core.Bound, l lease.Lease, entry string) error
	actions := []struct {
		name string
		do   doer
	}{
		{"claim", func(b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Claim(ctx(t), api.ClaimRequest{Node: "node02", GPUs: []int{3}, Force: true})
			return err
		}},
		{"release", func(b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}})
			return err
		}},
		{"extend", func(b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Extend(ctx(t), api.ExtendRequest{ID: l.ID, Duration: "1h"})
			return err
		}},
		{"attach", func(b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Attach(ctx(t), l.ID)
			return err
		}},
		{"adopt", func(b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Adopt(ctx(t), api.AdoptRequest{PID: 31337})
			return err
		}},
		{"run", func(b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Claim(ctx(t), api.ClaimRequest{Node: "node02", GPUs: []int{3}, Force: true, Run: &api.RunSpec{Command: []string{"true"}}})
			return err
		}},
		{"queue", func(b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Node: "node02"}})
			return err
		}},
		{"cancel", func(b *core.Bound, _ lease.Lease, entry string) error {
			return b.Cancel(ctx(t), entry)
		}},
	}
	// want is the matrix. Rules behind it: a person acts on their own
	// leases and entries; an admin of the receiving node may end or attach
	// to anyone's, but extends only their own; a name with no account on
	// the receiving node gets nothing there (a bare uid on the node's own
	// socket is itself, with no account: it may claim, not run); adopt acts
	// on the asking node's own processes.
	const ok, forbidden, notFound = "ok", lease.CodeForbidden, lease.CodeNotFound
	want := func(action, who, path string) lease.Code {
		ghostHere := who == "ghost" && path != "forwarded" // a uid (socket) or a name (ssh) node02 does not know
		switch action {
		case "claim", "queue":
			if who == "ghost" && path != "socket" {
				if action == "queue" && path == "forwarded" {
					return ok // queued at node01, where ghost exists
				}
				return forbidden
			}
			return ok
		case "run":
			if who == "ghost" {
				return forbidden
			}
			return ok
		case "release", "cancel":
			if who == "owner" || (who == "admin" || who == "root") && !ghostHere {
				return ok
			}
			return forbidden
		case "extend":
			if who == "owner" {
				return ok
			}
			return forbidden
		case "attach":
			if who == "owner" || who == "admin" || who == "root" {
				return ok
			}
			return forbidden
		case "adopt":
			if path == "forwarded" {
				return notFound // node01 has no such process
			}
			if who == "owner" || who == "admin" || who == "root" {
				return ok
			}
			return forbidden
		}
		panic(action)
	}
	bind := func(path string, a actor) *core.Bound {
		switch path {
		case "socket":
			return n2.Agent.For(a.uid)
		case "ssh":
			return n2.Agent.Service().ForUser(a.user)
		}
		if a.name == "ghost" {
			return n1.Agent.Service().ForCaller(lease.Caller{UID: ghostUID, User: "ghost"})
		}
		return n1.Agent.For(a.uid)
	}
	for _, path := range []string{"socket", "ssh", "forwarded"} {
		for _, a := range actors {
			for _, act := range actions {
				t.Run(path+"/"+a.name+"/"+act.name, func(t *testing.T) {
					l, entry := setup(t)
					err := act.do(bind(path, a), l, entry)
					got := lease.Code(ok)
					if err != nil {
						if got = lease.CodeOf(err); got == "" {
							got = lease.Code("error: " + err.Error())
						}
					}
					if w := want(act.name, a.name, path); got != w {
						t.Errorf("%s by %s via %s: got %s (%v), want %s", act.name, a.name, path, got, err, w)
					}
				})
			}
		}
	}

	// A peer holding the cluster key can act for any user name that exists
	// on the receiving node — as that node's own account of the name — and
	// for the cluster itself only in the cluster's own steps.
	mux := n1.Agent.Peers()
	t.Run("peer/as-owner/release", func(t *testing.T) {
		l, _ := setup(t)
		if _, err := peer.Call(ctx(t), mux, "node02", peer.Release, peer.As(owner.Name), peer.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
			t.Errorf("a peer acting as the owner: %v, want ok (the cluster key is trusted like munge's)", err)
		}
	})
	t.Run("peer/as-owner/run", func(t *testing.T) {
		setup(t)
		r, err := peer.Call(ctx(t), mux, "node02", peer.Claim, peer.As(owner.Name), peer.ClaimRequest{GPUs: []int{3}, Force: true, Run: &peer.Run{Command: []string{"id", "-u"}}})
		if err != nil || r.Lease.UID != owner.UID {
			t.Errorf("a peer's run as the owner: %+v %v, want a lease of uid %d (node02's account of that name)", r.Lease, err, owner.UID)
		}
	})
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"claim", func() error {
			_, err := peer.Call(ctx(t), mux, "node02", peer.Claim, peer.System, peer.ClaimRequest{Count: 1})
			return err
		}},
		{"release", func() error {
			_, err := peer.Call(ctx(t), mux, "node02", peer.Release, peer.System, peer.ReleaseRequest{IDs: []string{"node02-1"}})
			return err
		}},
		{"cancel", func() error {
			_, err := peer.Call(ctx(t), mux, "node02", peer.Cancel, peer.System, peer.CancelRequest{ID: "node02-q1"})
			return err
		}},
	} {
		t.Run("peer/as-system/"+c.name, func(t *testing.T) {
			setup(t)
			if err := c.call(); lease.CodeOf(err) != lease.CodeForbidden {
				t.Errorf("a peer's %s as the cluster itself: %v, want forbidden", c.name, err)
			}
		})
	}
	t.Run("peer/as-ghost/claim", func(t *testing.T) {
		setup(t)
		_, err := peer.Call(ctx(t), mux, "node02", peer.Claim, peer.As("ghost"), peer.ClaimRequest{Count: 1})
		if lease.CodeOf(err) != lease.CodeForbidden || !strings.Contains(err.Error(), `no account named "ghost"`) {
			t.Errorf("a peer acting for a name node02 does not know: %v, want a refusal that says so", err)
		}
	})
}
