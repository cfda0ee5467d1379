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
	"github.com/dibs-gpu/dibs/base/refusal"
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
// Every cell is asserted: "ok" or the refusal's code. Each path (and the
// peer's cells) has a node01 and node02 of its own, so the paths run at
// once; the cells of one path run in turn.
func TestIdentityMatrix(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	adminGroup := launchtest.Group(t)
	owner, other, admin := launchtest.User(t), launchtest.User(t), launchtest.User(t, adminGroup)
	p := lease.DefaultPolicy()
	p.AdminGroup = adminGroup
	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	// GPU 3: the owner's process with no lease (adopt); GPU 0, where the
	// owner's run holds a lease: root's process in a rootful container
	// (adopt-container).
	os.WriteFile(load, []byte(fmt.Sprintf(`{"gpus":{"3":{"utilization_pct":40,"processes":[{"pid":31337,"user":%q,"uid":%d,"command":"python","used_memory_mib":100}]},`+
		`"0":{"processes":[{"pid":31338,"user":"root","uid":0,"command":"python","used_memory_mib":100,"container":%q}]}}}`, owner.Name, owner.UID, identityContainer)), 0o644)

	actors := []identityActor{
		{"owner", owner.UID, owner.Name}, {"other", other.UID, other.Name}, {"admin", admin.UID, admin.Name},
		{"root", 0, "root"}, {"ghost", ghostUID, "ghost"},
	}
	type doer func(t *testing.T, b *core.Bound, l lease.Lease, entry string) error
	actions := []struct {
		name string
		do   doer
	}{
		{"claim", func(t *testing.T, b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Claim(ctx(t), api.ClaimRequest{Node: "node02", GPUs: []int{3}, Force: true})
			return err
		}},
		{"release", func(t *testing.T, b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Release(ctx(t), api.ReleaseRequest{IDs: []string{l.ID}})
			return err
		}},
		{"extend", func(t *testing.T, b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Extend(ctx(t), api.ExtendRequest{ID: l.ID, Duration: "1h"})
			return err
		}},
		{"attach", func(t *testing.T, b *core.Bound, l lease.Lease, _ string) error {
			_, err := b.Attach(ctx(t), l.ID)
			return err
		}},
		{"adopt", func(t *testing.T, b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Adopt(ctx(t), api.AdoptRequest{PID: 31337})
			return err
		}},
		{"adopt-container", func(t *testing.T, b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.AdoptContainer(ctx(t), api.AdoptContainerRequest{Container: identityContainer})
			return err
		}},
		{"run", func(t *testing.T, b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Claim(ctx(t), api.ClaimRequest{Node: "node02", GPUs: []int{3}, Force: true, Run: &api.RunSpec{Command: []string{"true"}}})
			return err
		}},
		{"queue", func(t *testing.T, b *core.Bound, _ lease.Lease, _ string) error {
			_, err := b.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Node: "node02"}})
			return err
		}},
		{"cancel", func(t *testing.T, b *core.Bound, _ lease.Lease, entry string) error {
			return b.Cancel(ctx(t), entry)
		}},
	}
	// want is the matrix. Rules behind it: a person acts on their own
	// leases and entries; an admin of the receiving node may end or attach
	// to anyone's, but extends only their own; a name with no account on
	// the receiving node gets nothing there (a bare uid on the node's own
	// socket is itself, with no account: it may claim, not run nor queue); adopt acts
	// on the asking node's own processes.
	const ok, forbidden, notFound = "ok", refusal.CodeForbidden, refusal.CodeNotFound
	want := func(action, who, path string) refusal.Code {
		ghostHere := who == "ghost" && path != "forwarded" // a uid (socket) or a name (ssh) node02 does not know
		switch action {
		case "claim", "queue":
			if who == "ghost" && path != "socket" {
				if action == "queue" && path == "forwarded" {
					return ok // queued at node01, where ghost exists
				}
				return forbidden
			}
			if who == "ghost" && action == "queue" {
				// A queued run starts by its holder's name, maybe on
				// another node: a uid with no account has none to send
				// (issue 20, weak 8).
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
		case "adopt-container":
			// Only the holder of the lease whose GPU the container runs on,
			// on the node it runs on: an admin's rights end no one's claim
			// to their own GPUs.
			if path == "forwarded" {
				return notFound // node01 runs no such container
			}
			if who == "owner" {
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
	for _, path := range []string{"socket", "ssh", "forwarded"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			w := startIdentityPair(t, path, p, load, owner.UID)
			for _, a := range actors {
				for _, act := range actions {
					t.Run(a.name+"/"+act.name, func(t *testing.T) {
						l, entry := w.setup(t)
						err := act.do(t, w.bind(path, a), l, entry)
						got := refusal.Code(ok)
						if err != nil {
							if got = refusal.CodeOf(err); got == "" {
								got = refusal.Code("error: " + err.Error())
							}
						}
						if want := want(act.name, a.name, path); got != want {
							t.Errorf("%s by %s via %s: got %s (%v), want %s", act.name, a.name, path, got, err, want)
						}
					})
				}
			}
		})
	}

	// A peer holding the cluster key can act for any user name that exists
	// on the receiving node — as that node's own account of the name — and
	// for the cluster itself only in the cluster's own steps.
	t.Run("peer", func(t *testing.T) {
		t.Parallel()
		w := startIdentityPair(t, "peer", p, load, owner.UID)
		mux := w.n1.Agent.Peers()
		t.Run("as-owner/release", func(t *testing.T) {
			l, _ := w.setup(t)
			if _, err := peer.Call(ctx(t), mux, "node02", peer.Release, peer.As(owner.Name), peer.ReleaseRequest{IDs: []string{l.ID}}); err != nil {
				t.Errorf("a peer acting as the owner: %v, want ok (the cluster key is trusted like munge's)", err)
			}
		})
		t.Run("as-owner/run", func(t *testing.T) {
			w.setup(t)
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
			t.Run("as-system/"+c.name, func(t *testing.T) {
				w.setup(t)
				if err := c.call(); refusal.CodeOf(err) != refusal.CodeForbidden {
					t.Errorf("a peer's %s as the cluster itself: %v, want forbidden", c.name, err)
				}
			})
		}
		t.Run("as-ghost/claim", func(t *testing.T) {
			w.setup(t)
			_, err := peer.Call(ctx(t), mux, "node02", peer.Claim, peer.As("ghost"), peer.ClaimRequest{Count: 1})
			if refusal.CodeOf(err) != refusal.CodeForbidden || !strings.Contains(err.Error(), `no account named "ghost"`) {
				t.Errorf("a peer acting for a name node02 does not know: %v, want a refusal that says so", err)
			}
		})
	})
}

// identityContainer is the rootful container whose root process runs on
// the owner's leased GPU of node02.
const identityContainer = "3f2a9c1b7d4e"

// ghostUID is an account only node01 knows ("ghost").
const ghostUID = 4242

// identityActor is one row of the identity matrix: who acts, by uid (the
// socket) and by name (SSH).
type identityActor struct {
	name string
	uid  int
	user string
}

// identityPair is one part of the identity matrix's cluster: node01 (which
// alone knows ghost) and node02 (whose GPU 3 runs a process of the owner's),
// and what setup last made on them.
type identityPair struct {
	n1, n2 *agenttest.Node
	owner  *core.Bound // the owner on node02's socket
	last   struct {
		l     lease.Lease
		entry string
		made  map[string]string
	}
}

// startIdentityPair starts node01 and node02 in a cluster (and a tmux
// directory) of their own, named for the part of the matrix they serve.
func startIdentityPair(t *testing.T, part string, p lease.Policy, load string, ownerUID int) *identityPair {
	t.Helper()
	key := make([]byte, 32)
	tmux := agenttest.TmuxDir(t)
	name := "m-" + part
	n1 := agenttest.Start(t, agenttest.Options{Name: "node01", Sim: "4xL40S", Policy: p, TmuxTmpDir: tmux, Quiet: true,
		Users:   agenttest.Users{"ghost": ghostUID},
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: name, Key: key, Fast: true}})
	n2 := agenttest.Start(t, agenttest.Options{Name: "node02", Sim: "4xL40S", Policy: p, TmuxTmpDir: tmux, Quiet: true, SimLoad: load,
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: name, Key: key, Fast: true, Join: []string{n1.Agent.GossipAddr()}}})
	agenttest.WaitConverged(t, []*agenttest.Node{n1, n2}, 15*time.Second)
	return &identityPair{n1: n1, n2: n2, owner: n2.Agent.For(ownerUID)}
}

// bind is actor a at the door path names: node02's socket or SSH board, or
// node01's socket (ghost: node01's own account of that name).
func (w *identityPair) bind(path string, a identityActor) *core.Bound {
	switch path {
	case "socket":
		return w.n2.Agent.For(a.uid)
	case "ssh":
		return w.n2.Agent.Service().ForUser(a.user)
	}
	if a.name == "ghost" {
		return w.n1.Agent.Service().ForCaller(lease.Caller{UID: ghostUID, User: "ghost"})
	}
	return w.n1.Agent.For(a.uid)
}

// owned is what both nodes hold of their own: every lease and queue entry
// by id, as stored, so any change a cell made shows.
func (w *identityPair) owned() map[string]string {
	m := map[string]string{}
	for _, n := range []*agenttest.Node{w.n1, w.n2} {
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
func (w *identityPair) clear(t *testing.T, keep map[string]string) bool {
	t.Helper()
	agenttest.Eventually(t, 10*time.Second, "both nodes to hold nothing but what the setup made", func() bool {
		done := true
		for _, n := range []*agenttest.Node{w.n1, w.n2} {
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
	return maps.Equal(w.owned(), keep)
}

// setup gives the owner a run (so it has a session) and a queue entry on
// node02, and frees everything else. The run and the entry are fresh
// unless the last setup's are still there as it made them: then only what
// the cell added goes.
func (w *identityPair) setup(t *testing.T) (lease.Lease, string) {
	t.Helper()
	if w.last.made != nil && w.clear(t, w.last.made) {
		return w.last.l, w.last.entry
	}
	w.clear(t, nil)
	// Force: root's container process (the load's) is already on GPU 0.
	r, err := w.owner.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Force: true, Run: &api.RunSpec{Command: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatalf("owner's run: %v", err)
	}
	// Holding GPU 1 too keeps the queued request waiting.
	if _, err := w.owner.Claim(ctx(t), api.ClaimRequest{GPUs: []int{1, 2}}); err != nil {
		t.Fatalf("owner's claim: %v", err)
	}
	s, err := w.owner.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 4, Node: "node02"}})
	if err != nil {
		t.Fatalf("owner's queued request: %v", err)
	}
	l, _ := w.n2.Agent.Service().View().FindLease(r.ID)
	agenttest.Eventually(t, 5*time.Second, "node01 to see owner's lease", func() bool {
		_, ok := w.n1.Agent.Service().View().FindLease(r.ID)
		return ok
	})
	w.last.l, w.last.entry, w.last.made = l, s.ID, w.owned()
	return l, s.ID
}
