package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/agent/origin"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// users is one node's account database: the same person may have another
// uid on another node, and some have no account on some nodes.
type users map[string]launch.User

func (u users) LookupUID(uid int) (launch.User, error) {
	for _, x := range u {
		if x.UID == uid {
			return x, nil
		}
	}
	return launch.User{}, fmt.Errorf("unknown uid %d", uid)
}

func (u users) LookupUser(name string) (launch.User, error) {
	if x, ok := u[name]; ok {
		return x, nil
	}
	return launch.User{}, fmt.Errorf("unknown user %s", name)
}

func (users) InGroup(launch.User, string) bool { return false }

func accounts(base int, names ...string) users {
	out := users{}
	for i, n := range names {
		out[n] = launch.User{Name: n, UID: base + i, GID: base + i, Groups: []int{base + i}, Home: "/home/" + n}
	}
	return out
}

// agent is one node's service over its own single writer, queue and store,
// with no gossip: its peers' states are read straight from their nodes.
type agent struct {
	name   string
	svc    *core.Service
	node   *node.Node
	origin *origin.Origin
	store  *storetest.Store
	mux    *peer.Mux
	users  users
}

// selfView is what gossip would carry of a's node.
func (a *agent) selfView() queue.NodeView {
	st := a.node.State()
	return queue.NodeView{Name: a.name, State: queue.NodeAlive, HasState: true, Version: st.Version, Snap: st.Snap,
		Leases: st.Leases, Bookings: st.Bookings, Judged: st.Judged, Queue: a.origin.Entries(), Ended: st.Ended, Protocol: peer.Version}
}

// fabric joins agents in process: peer calls go through the real envelope
// and checks (peer.Mux.Serve), the cluster view reads the others' nodes.
type fabric struct {
	agents map[string]*agent
	self   string
}

func (f *fabric) Request(ctx context.Context, node, op string, body []byte) ([]byte, refusal.Code, string, error) {
	a, ok := f.agents[node]
	if !ok {
		return nil, "", "", fmt.Errorf("no node %s", node)
	}
	reply, code, msg := a.mux.Serve(ctx, f.self, op, body)
	return reply, code, msg, nil
}

func (f *fabric) Protocols(string) (int, int, bool) { return peer.MinVersion, peer.Version, true }

func (f *fabric) Peers() []queue.NodeView {
	var out []queue.NodeView
	for name, a := range f.agents {
		if name != f.self {
			out = append(out, a.selfView())
		}
	}
	return out
}

func (f *fabric) Host() string               { return "127.0.0.1" }
func (f *fabric) SSHHost(node string) string { return node }
func (f *fabric) Status(time.Time) ([]api.Member, api.GossipCounter) {
	return nil, api.GossipCounter{}
}

// newCluster starts one agent per name (each of four simulated H100s)
// with the given account databases, joined when there are several.
func newCluster(t *testing.T, clk *clock.Fake, dbs map[string]users) map[string]*agent {
	t.Helper()
	return newClusterOf(t, clk, dbs, clusterOptions{})
}

// clusterOptions are what a test may change of newCluster's agents.
type clusterOptions struct {
	// specs is a node's simulated GPUs (sim.Options.Spec) where not four
	// H100s.
	specs map[string]string
	// sessions starts every node's tmux sessions; nil starts none.
	sessions node.Sessions
}

// newClusterOf is newCluster with opts.
func newClusterOf(t *testing.T, clk *clock.Fake, dbs map[string]users, opts clusterOptions) map[string]*agent {
	t.Helper()
	agents := map[string]*agent{}
	for name, db := range dbs {
		spec := opts.specs[name]
		if spec == "" {
			spec = "4xH100-80GB"
		}
		probe, err := sim.New(sim.Options{Spec: spec, HostName: name, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		a := &agent{name: name, store: storetest.New(storetest.Options{}), mux: peer.NewMux(name), users: db}
		dir := account.NewDirectory(name, db, "", clk.Now)
		changed := &notify.Signal{}
		a.node = node.New(node.Config{Name: name, Policy: lease.DefaultPolicy()}, node.Deps{
			Store: a.store, Probe: probe, Accounts: dir, Clock: clk, Changed: changed, Sessions: opts.sessions})
		if err := a.node.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.node.Close)
		a.origin = origin.New(name, origin.Deps{Store: a.store, Clock: clk, Changed: changed})
		if err := a.origin.Open(); err != nil {
			t.Fatal(err)
		}
		a.svc = core.New(core.Config{Node: name, Policy: lease.DefaultPolicy()}, core.Deps{
			Node: a.node, Origin: a.origin, Peers: a.mux, Accounts: dir, Clock: clk, Changed: changed,
			Attach: func(_ launch.User, session string) []string { return []string{"tmux", "attach", "-t", session} }})
		agents[name] = a
	}
	if len(agents) > 1 {
		for name, a := range agents {
			f := &fabric{agents: agents, self: name}
			a.mux.SetTransport(f)
			a.svc.SetCluster(f)
		}
	}
	return agents
}

func asUser(a *agent, name string) *core.Bound { return a.svc.ForUID(a.users[name].UID) }

func code(err error) refusal.Code {
	var le *refusal.Error
	if errors.As(err, &le) {
		return le.Code
	}
	return ""
}

// TestClaim: a claim request as the socket hands it over, from the
// caller's words to the lease they hold, here or on another node.
func TestClaim(t *testing.T) {
	tests := []struct {
		name string
		// who claims at node01 (an SSH identity when ssh is set).
		who string
		ssh bool
		req api.ClaimRequest
		// want is the answer's node, GPUs and holder's uid there; or the
		// refusal's code and words.
		wantNode string
		wantGPUs []int
		wantUID  int
		wantEnds time.Duration
		wantCode refusal.Code
		wantErr  string
	}{
		{name: "here, by count", who: "alice", req: api.ClaimRequest{Node: "node01", Count: 2, Duration: "2h"},
			wantNode: "node01", wantGPUs: []int{0, 1}, wantUID: 1000, wantEnds: 2 * time.Hour},
		{name: "here, the kind's default", who: "bob", req: api.ClaimRequest{Node: "node01", GPUs: []int{3}, Kind: "batch"},
			wantNode: "node01", wantGPUs: []int{3}, wantUID: 1001, wantEnds: 24 * time.Hour},
		{name: "on another node, as the account of the same name there", who: "alice", req: api.ClaimRequest{Node: "node02", Count: 1},
			wantNode: "node02", wantGPUs: []int{0}, wantUID: 2000, wantEnds: 4 * time.Hour},
		{name: "no account of that name on the other node", who: "carol", req: api.ClaimRequest{Node: "node02", Count: 1},
			wantCode: refusal.CodeForbidden, wantErr: `node02 has no account named "carol", so node01 cannot act there as that user`},
		{name: "a duration that is not one", who: "alice", req: api.ClaimRequest{Node: "node01", Count: 1, Duration: "soon"},
			wantCode: refusal.CodeInvalid, wantErr: `"soon"`},
		{name: "a negative count", who: "alice", req: api.ClaimRequest{Node: "node01", Count: -1},
			wantCode: refusal.CodeInvalid, wantErr: "GPU count must be positive, got -1"},
		{name: "an unknown kind", who: "alice", req: api.ClaimRequest{Node: "node01", Count: 1, Kind: "urgent"},
			wantCode: refusal.CodeInvalid, wantErr: `"urgent"`},
		{name: "a request id too short", who: "alice", req: api.ClaimRequest{Node: "node01", Count: 1, RequestID: "x"},
			wantCode: refusal.CodeInvalid, wantErr: `request id "x" must be 8 to 64 letters, digits, '-' or '_'`},
		{name: "a session name tmux cannot take", who: "alice", req: api.ClaimRequest{Node: "node01", Count: 1, Run: &api.RunSpec{Name: "a:b", Command: []string{"true"}}},
			wantCode: refusal.CodeInvalid, wantErr: "a:b"},
		{name: "an SSH key with no account here can look, not claim", who: "mallory", ssh: true, req: api.ClaimRequest{Node: "node01", Count: 1},
			wantCode: refusal.CodeForbidden, wantErr: "mallory has no account on node01, so can look but not claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			c := newCluster(t, clk, map[string]users{
				"node01": accounts(1000, "alice", "bob", "carol"),
				"node02": accounts(2000, "alice", "bob"),
			})
			b := asUser(c["node01"], tt.who)
			if tt.ssh {
				b = c["node01"].svc.ForUser(tt.who)
			}
			got, err := b.Claim(context.Background(), tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || code(err) != tt.wantCode {
					t.Fatalf("claim: %v (code %q), want a %s refusal saying %q", err, code(err), tt.wantCode, tt.wantErr)
				}
				for name, a := range c {
					if n := len(a.node.State().Leases); n != 0 {
						t.Errorf("after a refusal %s holds %d leases", name, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			if got.Node != tt.wantNode || !slices.Equal(got.GPUs, tt.wantGPUs) || !got.ExpiresAt.Equal(t0.Add(tt.wantEnds)) {
				t.Errorf("granted %s %v until %v, want %s %v until %v", got.Node, got.GPUs, got.ExpiresAt, tt.wantNode, tt.wantGPUs, t0.Add(tt.wantEnds))
			}
			if want := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(tt.wantGPUs)), ","), "[]"); got.CUDAVisibleDevices != want {
				t.Errorf("CUDA_VISIBLE_DEVICES %q, want %q", got.CUDAVisibleDevices, want)
			}
			held, ok := c["node01"].svc.View().FindLease(got.ID)
			if !ok {
				t.Fatalf("node01's view does not show %s, just granted", got.ID)
			}
			if held.User != tt.who || held.UID != tt.wantUID {
				t.Errorf("held by %s (uid %d), want %s (uid %d)", held.User, held.UID, tt.who, tt.wantUID)
			}
			if ls, _, _ := c[tt.wantNode].store.Load(); len(ls) != 1 || ls[0].ID != got.ID {
				t.Errorf("%s's disk holds %v, want %s", tt.wantNode, ls, got.ID)
			}
		})
	}
}

// TestRelease: a release names leases on any node; every one is checked
// before any ends, so a list with one that is not the caller's ends none.
func TestRelease(t *testing.T) {
	tests := []struct {
		name string
		who  string
		// ids are indexes into the leases made: 0 and 1 are alice's on
		// node01 and node02, 2 is bob's on node01.
		ids      []int
		all      bool
		wantGone []int
		wantCode refusal.Code
		wantErr  string
	}{
		{name: "one here", who: "alice", ids: []int{0}, wantGone: []int{0}},
		{name: "one on another node", who: "alice", ids: []int{1}, wantGone: []int{1}},
		{name: "all of mine, on every node", who: "alice", all: true, wantGone: []int{0, 1}},
		{name: "mine and someone else's: none ends", who: "alice", ids: []int{0, 2}, wantCode: refusal.CodeForbidden, wantErr: "belongs to bob"},
		{name: "not a lease id", who: "alice", ids: []int{-1}, wantCode: refusal.CodeInvalid, wantErr: `"bogus" is not a lease id: ids look like node01-42`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			c := newCluster(t, clk, map[string]users{
				"node01": accounts(1000, "alice", "bob"),
				"node02": accounts(2000, "alice", "bob"),
			})
			var ids []string
			for _, g := range []struct {
				who, node string
			}{{"alice", "node01"}, {"alice", "node02"}, {"bob", "node01"}} {
				r, err := asUser(c["node01"], g.who).Claim(context.Background(), api.ClaimRequest{Node: g.node, Count: 1})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.ID)
			}
			req := api.ReleaseRequest{All: tt.all}
			for _, i := range tt.ids {
				if i < 0 {
					req.IDs = append(req.IDs, "bogus")
					continue
				}
				req.IDs = append(req.IDs, ids[i])
			}
			got, err := asUser(c["node01"], tt.who).Release(context.Background(), req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || code(err) != tt.wantCode {
					t.Fatalf("release: %v (code %q), want a %s refusal saying %q", err, code(err), tt.wantCode, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("release: %v", err)
			}
			var want []string
			for _, i := range tt.wantGone {
				want = append(want, ids[i])
			}
			slices.Sort(got.Released)
			if !slices.Equal(got.Released, want) {
				t.Errorf("released %v, want %v", got.Released, want)
			}
			v := c["node01"].svc.View()
			for i, id := range ids {
				_, held := v.FindLease(id)
				if gone := slices.Contains(tt.wantGone, i); held == gone {
					t.Errorf("%s held %v, want %v", id, held, !gone)
				}
			}
		})
	}
}

// TestQueue: a request that does not fit waits in its origin's queue, in
// the order the scheduler will take it, and only its submitter cancels it.
func TestQueue(t *testing.T) {
	clk := clock.NewFake(t0)
	c := newCluster(t, clk, map[string]users{"node01": accounts(1000, "alice", "bob")})
	a := c["node01"]
	if _, err := asUser(a, "bob").Claim(context.Background(), api.ClaimRequest{Count: 4}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, who := range []string{"alice", "alice", "bob"} {
		clk.Advance(time.Minute)
		s, err := asUser(a, who).Submit(context.Background(), api.SubmitRequest{Claim: api.ClaimRequest{Count: 2}})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, s.ID)
	}
	q, err := asUser(a, "alice").Queue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range q.Entries {
		got = append(got, fmt.Sprintf("%d %s %s", e.Position, e.ID, e.User))
	}
	// Nobody has used GPU-hours yet, so fair-share ties and age decides:
	// first come, first served.
	want := []string{"1 " + ids[0] + " alice", "2 " + ids[1] + " alice", "3 " + ids[2] + " bob"}
	if !slices.Equal(got, want) {
		t.Errorf("queue %q, want %q", got, want)
	}
	if err := asUser(a, "bob").Cancel(context.Background(), ids[0]); err == nil || code(err) != refusal.CodeForbidden {
		t.Errorf("bob cancelled alice's entry: %v, want a refusal", err)
	}
	if err := asUser(a, "alice").Cancel(context.Background(), ids[0]); err != nil {
		t.Fatalf("alice cancels her own: %v", err)
	}
	if q, _ = asUser(a, "alice").Queue(context.Background()); len(q.Entries) != 2 || q.Entries[0].ID != ids[1] || q.Entries[0].Position != 1 {
		t.Errorf("after the cancel the queue is %+v, want %s first", q.Entries, ids[1])
	}
}
