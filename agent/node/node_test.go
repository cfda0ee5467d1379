package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// t0 is the fake clock's start: a fixed instant, so every expiry below
// lands at a time the test can name.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

var (
	alice = lease.Caller{UID: 1001, User: "alice"}
	bob   = lease.Caller{UID: 1002, User: "bob"}
	admin = lease.Caller{UID: 0, User: "root", Admin: true}
)

// rig is one node over the in-memory store, a simulated probe and a fake
// clock, with what it told the rest of the agent recorded.
type rig struct {
	n     *node.Node
	store *storetest.Store
	clk   *clock.Fake

	mu      sync.Mutex
	events  []event.Event
	changed int
}

func (r *rig) eventKinds() []event.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func (r *rig) leasesChanged() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// newRig opens a node of four simulated H100s named node01. Sessions is
// nil unless a test starts one (sessionRig).
func newRig(t *testing.T, pol lease.Policy, sessions node.Sessions) *rig {
	t.Helper()
	return newRigOn(t, pol, sessions, storetest.New(storetest.Options{}), clock.NewFake(t0))
}

// newRigOn opens the node over a store as it stands (one a crash left).
func newRigOn(t *testing.T, pol lease.Policy, sessions node.Sessions, st *storetest.Store, clk *clock.Fake) *rig {
	t.Helper()
	r := &rig{store: st, clk: clk}
	probe, err := sim.New(sim.Options{Spec: "4xH100-80GB", HostName: "node01", Now: r.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.n = node.New(node.Config{Name: "node01", Policy: pol, SessionPoll: 20 * time.Millisecond}, node.Deps{
		Store: r.store, Probe: probe, Sessions: sessions, Clock: r.clk,
		Accounts: account.NewDirectory("node01", account.System{}, "", r.clk.Now),
		LeasesChanged: func() {
			r.mu.Lock()
			r.changed++
			r.mu.Unlock()
		},
		Events: func(e event.Event) {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		},
	})
	if err := r.n.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.n.Close)
	return r
}

// durable is what a restarted agent would load.
func (r *rig) durable(t *testing.T) []lease.Lease {
	t.Helper()
	got, _, err := r.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func gpusOf(ls []lease.Lease) [][]int {
	var out [][]int
	for _, l := range ls {
		out = append(out, l.GPUs)
	}
	return out
}

func TestGrant(t *testing.T) {
	type claim struct {
		who lease.Caller
		g   node.Grant
	}
	tests := []struct {
		name   string
		before []claim
		claim  claim
		fault  storetest.Fault
		// want is the GPUs granted, or nil when wantErr is set.
		want      []int
		wantToken uint64
		wantCode  refusal.Code
		wantErr   string
		// wantHeld is every lease's GPUs afterwards, in the table and on disk.
		wantHeld [][]int
		// retry: the answer is the first one's, with no new write.
		retry bool
	}{
		{
			name: "two free GPUs", claim: claim{alice, node.Grant{Claim: lease.Claim{Count: 2}}},
			want: []int{0, 1}, wantToken: 1, wantHeld: [][]int{{0, 1}},
		},
		{
			name:   "the next free ones after a holder",
			before: []claim{{bob, node.Grant{Claim: lease.Claim{GPUs: []int{0}}}}},
			claim:  claim{alice, node.Grant{Claim: lease.Claim{Count: 2}}},
			want:   []int{1, 2}, wantToken: 2, wantHeld: [][]int{{0}, {1, 2}},
		},
		{
			name:     "named GPU someone holds",
			before:   []claim{{bob, node.Grant{Claim: lease.Claim{GPUs: []int{3}}}}},
			claim:    claim{alice, node.Grant{Claim: lease.Claim{GPUs: []int{3}}}},
			wantCode: refusal.CodeConflict, wantErr: "GPU 3 is held by bob for 4h more", wantHeld: [][]int{{3}},
		},
		{
			name:     "more GPUs than the node has",
			claim:    claim{alice, node.Grant{Claim: lease.Claim{Count: 5}}},
			wantCode: refusal.CodeInvalid, wantErr: "node01 has only 4 GPUs; asked for 5",
		},
		{
			name:     "past the kind's maximum",
			claim:    claim{alice, node.Grant{Claim: lease.Claim{Count: 1, Duration: 8 * 24 * time.Hour}}},
			wantCode: refusal.CodeInvalid, wantErr: "8d is over the interactive maximum of 7d",
		},
		{
			name:     "a disk that fails its fsync grants nothing",
			claim:    claim{alice, node.Grant{Claim: lease.Claim{Count: 1}}},
			fault:    storetest.SyncError,
			wantErr:  "input/output error",
			wantHeld: nil,
		},
		{
			name:     "a full disk grants nothing and says so",
			claim:    claim{alice, node.Grant{Claim: lease.Claim{Count: 1}}},
			fault:    storetest.DiskFull,
			wantCode: refusal.CodeUnavailable, wantErr: "the disk holding /var/lib/dibs/dibs.db is full",
			wantHeld: nil,
		},
		{
			name:   "a retried request gets the first answer",
			before: []claim{{alice, node.Grant{Claim: lease.Claim{Count: 1, RequestID: "r1"}}}},
			claim:  claim{alice, node.Grant{Claim: lease.Claim{Count: 1, RequestID: "r1"}}},
			want:   []int{0}, wantToken: 1, wantHeld: [][]int{{0}}, retry: true,
		},
		{
			name:   "the same request id from someone else is a new claim",
			before: []claim{{alice, node.Grant{Claim: lease.Claim{Count: 1, RequestID: "r1"}}}},
			claim:  claim{bob, node.Grant{Claim: lease.Claim{Count: 1, RequestID: "r1"}}},
			want:   []int{1}, wantToken: 2, wantHeld: [][]int{{0}, {1}},
		},
		{
			name:   "a queued attempt started twice is one lease",
			before: []claim{{alice, node.Grant{Claim: lease.Claim{Count: 2}, Entry: "q1#0"}}},
			claim:  claim{alice, node.Grant{Claim: lease.Claim{Count: 2}, Entry: "q1#0"}},
			want:   []int{0, 1}, wantToken: 1, wantHeld: [][]int{{0, 1}}, retry: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, lease.DefaultPolicy(), nil)
			for _, c := range tt.before {
				if _, err := r.n.Grant(context.Background(), c.who, c.g); err != nil {
					t.Fatalf("setup claim: %v", err)
				}
			}
			writes, changed := r.store.Writes(), r.leasesChanged()
			r.store.SetFault(tt.fault)
			l, err := r.n.Grant(context.Background(), tt.claim.who, tt.claim.g)
			r.store.SetFault(storetest.NoFault)
			if tt.wantErr != "" || tt.wantCode != "" {
				if err == nil {
					t.Fatalf("granted %v, want a refusal", l.GPUs)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("refusal %q does not say %q", err, tt.wantErr)
				}
				var le *refusal.Error
				if tt.wantCode != "" && (!errors.As(err, &le) || le.Code != tt.wantCode) {
					t.Errorf("refusal %q: code %v, want %s", err, le, tt.wantCode)
				}
				if got := r.leasesChanged(); got != changed {
					t.Errorf("a refusal told the cluster of a change (%d → %d)", changed, got)
				}
			} else {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !slices.Equal(l.GPUs, tt.want) || l.Token != tt.wantToken || l.User != tt.claim.who.User {
					t.Errorf("granted gpus %v token %d to %s, want %v token %d to %s", l.GPUs, l.Token, l.User, tt.want, tt.wantToken, tt.claim.who.User)
				}
				wantWrites, wantChanged := writes+1, changed+1
				if tt.retry {
					wantWrites, wantChanged = writes, changed
				}
				if got := r.store.Writes(); got != wantWrites {
					t.Errorf("%d writes to disk, want %d", got-writes, wantWrites-writes)
				}
				if got := r.leasesChanged(); got != wantChanged {
					t.Errorf("the cluster was told %d times, want %d", got-changed, wantChanged-changed)
				}
			}
			if got := gpusOf(r.n.State().Leases); !slices.EqualFunc(got, tt.wantHeld, slices.Equal) {
				t.Errorf("board shows %v held, want %v", got, tt.wantHeld)
			}
			if got := gpusOf(r.durable(t)); !slices.EqualFunc(got, tt.wantHeld, slices.Equal) {
				t.Errorf("disk holds %v, want %v", got, tt.wantHeld)
			}
		})
	}
}

// TestTimeLimit follows one lease through its life on the fake clock: the
// warnings come at their times and the lease ends at its limit, not a
// second before, and an extension moves all of it.
func TestTimeLimit(t *testing.T) {
	pol := lease.DefaultPolicy()
	pol.EndAction = lease.ActionEnd
	type step struct {
		// at is the time since the claim; extend, when set, extends then.
		at     time.Duration
		extend time.Duration
		// want is the events the step adds (their words), held whether the
		// lease is still there afterwards.
		want []string
		held bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"ends at its limit", []step{
			{at: 49 * time.Minute, held: true},
			{at: 50 * time.Minute, want: []string{"warn: lease node01-1 ends in 10m (at 10:00 UTC; GPU 0 on node01)"}, held: true},
			{at: 58 * time.Minute, held: true},
			{at: 59 * time.Minute, want: []string{"warn: lease node01-1 ends in 1m (at 10:00 UTC; GPU 0 on node01)"}, held: true},
			{at: time.Hour - time.Second, held: true},
			{at: time.Hour, want: []string{"end: alice's lease node01-1 (GPU 0 on node01) ended at its time limit"}, held: false},
			{at: 2 * time.Hour, held: false},
		}},
		{"an extension moves the warnings and the end", []step{
			{at: 50 * time.Minute, want: []string{"warn: lease node01-1 ends in 10m (at 10:00 UTC"}, held: true},
			{at: 55 * time.Minute, extend: time.Hour, want: []string{"extend: "}, held: true},
			{at: time.Hour, held: true},
			{at: 110 * time.Minute, want: []string{"warn: lease node01-1 ends in 10m (at 11:00 UTC"}, held: true},
			{at: 119 * time.Minute, want: []string{"warn: lease node01-1 ends in 1m (at 11:00 UTC"}, held: true},
			{at: 2*time.Hour - time.Second, held: true},
			{at: 2 * time.Hour, want: []string{"end: alice's lease node01-1 (GPU 0 on node01) ended at its time limit"}, held: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, pol, nil)
			l, err := r.n.Grant(context.Background(), alice, node.Grant{Claim: lease.Claim{Count: 1, Duration: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			seen := len(r.eventKinds())
			for _, s := range tt.steps {
				r.clk.Advance(t0.Add(s.at).Sub(r.clk.Now()))
				if s.extend > 0 {
					if _, err := r.n.Extend(alice, l.ID, s.extend); err != nil {
						t.Fatalf("at %v: extend: %v", s.at, err)
					}
				}
				r.n.Tick()
				r.mu.Lock()
				var got []string
				for _, e := range r.events[seen:] {
					got = append(got, string(e.Kind)+": "+e.Text)
				}
				seen = len(r.events)
				r.mu.Unlock()
				if len(got) != len(s.want) {
					t.Fatalf("at %v: events %q, want %q", s.at, got, s.want)
				}
				for i := range got {
					if !strings.HasPrefix(got[i], s.want[i]) {
						t.Errorf("at %v: event %q, want %q", s.at, got[i], s.want[i])
					}
				}
				if held := len(r.n.State().Leases) == 1; held != s.held {
					t.Errorf("at %v: held %v, want %v", s.at, held, s.held)
				}
				if held := len(r.durable(t)) == 1; held != s.held {
					t.Errorf("at %v: held on disk %v, want %v", s.at, held, s.held)
				}
			}
			ledger, err := r.store.Ledger(t0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ledger) != 1 || ledger[0].Reason != string(lease.EndExpired) || !ledger[0].End.Equal(ledger[0].Start.Add(ledger[0].Limit)) {
				t.Errorf("ledger %+v, want one row ended expired at its limit", ledger)
			}
		})
	}
}

// TestRelease: who may end a lease, what the ledger keeps, and a disk that
// fails the end leaves the lease held, on the board and on disk.
func TestRelease(t *testing.T) {
	tests := []struct {
		name     string
		who      lease.Caller
		id       string
		fault    storetest.Fault
		wantErr  string
		wantCode refusal.Code
		// wantReason and wantBy are the ledger's row when it ended.
		wantReason lease.EndReason
		wantBy     string
	}{
		{name: "its holder", who: alice, id: "node01-1", wantReason: lease.EndReleased},
		{name: "an admin, recorded", who: admin, id: "node01-1", wantReason: lease.EndByAdmin, wantBy: "root"},
		{name: "someone else", who: bob, id: "node01-1", wantCode: refusal.CodeForbidden, wantErr: "lease node01-1 belongs to alice; only they (or an admin) can end it"},
		{name: "no such lease", who: alice, id: "node01-9", wantCode: refusal.CodeNotFound, wantErr: "node01-9"},
		{name: "a disk that fails keeps the lease", who: alice, id: "node01-1", fault: storetest.SyncError, wantErr: "input/output error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, lease.DefaultPolicy(), nil)
			if _, err := r.n.Grant(context.Background(), alice, node.Grant{Claim: lease.Claim{GPUs: []int{2}}}); err != nil {
				t.Fatal(err)
			}
			r.clk.Advance(30 * time.Minute)
			r.store.SetFault(tt.fault)
			err := r.n.Release(context.Background(), tt.who, tt.id)
			r.store.SetFault(storetest.NoFault)
			ledger, lerr := r.store.Ledger(t0)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("release: %v, want a refusal saying %q", err, tt.wantErr)
				}
				var le *refusal.Error
				if tt.wantCode != "" && (!errors.As(err, &le) || le.Code != tt.wantCode) {
					t.Errorf("refusal %q: code %v, want %s", err, le, tt.wantCode)
				}
				if len(r.n.State().Leases) != 1 || len(r.durable(t)) != 1 || len(ledger) != 0 {
					t.Errorf("after a refused release: board %d leases, disk %d, ledger %d; want 1, 1, 0", len(r.n.State().Leases), len(r.durable(t)), len(ledger))
				}
				return
			}
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			if len(r.n.State().Leases) != 0 || len(r.durable(t)) != 0 {
				t.Errorf("still held after release: board %v, disk %v", r.n.State().Leases, r.durable(t))
			}
			if len(ledger) != 1 || ledger[0].Reason != string(tt.wantReason) || ledger[0].By != tt.wantBy ||
				ledger[0].GPUSeconds != 30*60 || !ledger[0].End.Equal(t0.Add(30*time.Minute)) {
				t.Errorf("ledger %+v, want one row: %s by %q, 1800 GPU-seconds, ended at +30m", ledger, tt.wantReason, tt.wantBy)
			}
		})
	}
}

// TestReservation: a gang's reservation holds its GPUs, ends by itself at
// its time unless committed, and a commit starts the lease's clock then.
func TestReservation(t *testing.T) {
	tests := []struct {
		name     string
		commitAt time.Duration // 0: never committed
		checkAt  time.Duration
		wantHeld bool
		// wantEnds is when the committed lease ends, from t0.
		wantEnds time.Duration
		wantErr  string
	}{
		{name: "uncommitted, before its time", checkAt: 29 * time.Second, wantHeld: true},
		{name: "uncommitted, at its time", checkAt: 30 * time.Second, wantHeld: false},
		{name: "committed in time", commitAt: 20 * time.Second, checkAt: time.Minute, wantHeld: true, wantEnds: 20*time.Second + 2*time.Hour},
		{name: "committed too late", commitAt: 31 * time.Second, checkAt: 31 * time.Second, wantErr: "the reservation for q7#0 on node01 is gone (expired?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, lease.DefaultPolicy(), nil)
			l, err := r.n.Grant(context.Background(), alice, node.Grant{Claim: lease.Claim{Count: 2}, Entry: "q7#0", Gang: "g7", ReserveFor: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !l.ReservedUntil.Equal(t0.Add(30 * time.Second)) {
				t.Fatalf("reserved until %v, want %v", l.ReservedUntil, t0.Add(30*time.Second))
			}
			if tt.commitAt > 0 {
				r.clk.Advance(tt.commitAt)
				r.n.Tick()
				c, err := r.n.Commit(context.Background(), alice, "q7#0", 2*time.Hour, nil)
				if tt.wantErr != "" {
					if err == nil || err.Error() != tt.wantErr {
						t.Fatalf("commit: %v, want %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
				if !c.ExpiresAt.Equal(t0.Add(tt.wantEnds)) || !c.ReservedUntil.IsZero() {
					t.Errorf("committed lease ends %v reserved until %v, want ends %v and no reservation", c.ExpiresAt, c.ReservedUntil, t0.Add(tt.wantEnds))
				}
				again, err := r.n.Commit(context.Background(), alice, "q7#0", 5*time.Hour, nil)
				if err != nil || !again.ExpiresAt.Equal(c.ExpiresAt) {
					t.Errorf("a second commit: %v ends %v, want the first (%v)", err, again.ExpiresAt, c.ExpiresAt)
				}
			}
			r.clk.Advance(t0.Add(tt.checkAt).Sub(r.clk.Now()))
			r.n.Tick()
			if held := len(r.n.State().Leases) == 1; held != tt.wantHeld {
				t.Errorf("held %v at +%v, want %v", held, tt.checkAt, tt.wantHeld)
			}
			if held := len(r.durable(t)) == 1; held != tt.wantHeld {
				t.Errorf("held on disk %v at +%v, want %v", held, tt.checkAt, tt.wantHeld)
			}
		})
	}
}

// tmuxSessions is a real launcher on a private tmux directory whose
// servers are killed at cleanup (agenttest.TmuxDir). The sessions run as
// the test's own user, so the test needs tmux, not root.
func tmuxSessions(t *testing.T) *launch.Launcher {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		prereq.Missing(t, "needs tmux: the node starts real sessions")
	}
	dir := agenttest.TmuxDir(t)
	return launch.New(launch.Options{TmuxTmpDir: dir, StatusDir: filepath.Join(dir, "exit")})
}

// me is the test's own account as a caller: sessions run as it.
func me(t *testing.T) (lease.Caller, launch.User) {
	t.Helper()
	u, err := launch.LookupUID(os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	return lease.Caller{UID: u.UID, User: u.Name}, u
}

// waitFor polls cond until it holds or five seconds pass: a session's end
// is seen by a watcher polling tmux in real time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 5*time.Second, what, cond)
}

// TestSessions: a run's tmux session carries the lease's GPUs, a release
// kills it, and a session that ends ends its lease with the reason a
// person reads in the ledger.
func TestSessions(t *testing.T) {
	tests := []struct {
		name string
		cmd  []string
		// release ends the lease by hand; else the command's end does.
		release    bool
		wantReason lease.EndReason
	}{
		{name: "released, its session killed", cmd: []string{"sh", "-c", "echo $CUDA_VISIBLE_DEVICES $DIBS_LEASE_TOKEN >$OUT; sleep 300"}, release: true, wantReason: lease.EndReleased},
		{name: "the command ends, so does the lease", cmd: []string{"sh", "-c", "echo $CUDA_VISIBLE_DEVICES $DIBS_LEASE_TOKEN >$OUT"}, wantReason: lease.EndSessionEnded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := tmuxSessions(t)
			r := newRig(t, lease.DefaultPolicy(), sess)
			c, u := me(t)
			out := filepath.Join(t.TempDir(), "env")
			l, err := r.n.Grant(context.Background(), c, node.Grant{Claim: lease.Claim{GPUs: []int{1, 3}}, Run: &node.Run{Command: tt.cmd, Env: map[string]string{"OUT": out}}})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if l.Session != job.SessionName(l.ID) {
				t.Errorf("session %q, want %q", l.Session, job.SessionName(l.ID))
			}
			if tt.release {
				if ok, err := sess.Exists(context.Background(), u, l.Session); err != nil || !ok {
					t.Fatalf("session %s exists: %v %v, want it running", l.Session, ok, err)
				}
			}
			waitFor(t, "the session to write its environment", func() bool { b, _ := os.ReadFile(out); return strings.HasSuffix(string(b), "\n") })
			if b, _ := os.ReadFile(out); string(b) != "1,3 1\n" {
				t.Errorf("the session saw CUDA_VISIBLE_DEVICES and DIBS_LEASE_TOKEN %q, want %q", b, "1,3 1\n")
			}
			if tt.release {
				if err := r.n.Release(context.Background(), c, l.ID); err != nil {
					t.Fatal(err)
				}
				if ok, err := sess.Exists(context.Background(), u, l.Session); err != nil || ok {
					t.Errorf("session %s still there after release (%v)", l.Session, err)
				}
			}
			waitFor(t, "the lease to end", func() bool { return len(r.n.State().Leases) == 0 })
			ledger, err := r.store.Ledger(t0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ledger) != 1 || ledger[0].Reason != string(tt.wantReason) {
				t.Errorf("ledger %+v, want one row ended %s", ledger, tt.wantReason)
			}
		})
	}
}

// TestSessionFails: a run whose session cannot start leaves nothing held,
// and the caller reads why.
func TestSessionFails(t *testing.T) {
	r := newRig(t, lease.DefaultPolicy(), tmuxSessions(t))
	c, _ := me(t)
	_, err := r.n.Grant(context.Background(), c, node.Grant{Claim: lease.Claim{Count: 1}, Run: &node.Run{Command: []string{"true"}, Dir: "/no/such/dir"}})
	var le *refusal.Error
	if err == nil || !errors.As(err, &le) || le.Code != refusal.CodeInvalid || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Fatalf("run in a missing directory: %v, want an invalid-request refusal naming it", err)
	}
	if len(r.n.State().Leases) != 0 || len(r.durable(t)) != 0 {
		t.Errorf("a run that never started holds GPUs: board %v, disk %v", r.n.State().Leases, r.durable(t))
	}
	ledger, _ := r.store.Ledger(t0)
	if len(ledger) != 1 || ledger[0].Reason != string(lease.EndSessionFailed) {
		t.Errorf("ledger %+v, want one row ended %s", ledger, lease.EndSessionFailed)
	}
}

// cutOffStart is a real launcher whose Start is cut off as the agent's
// stop cuts off a start in flight: the grant's context ends and Start
// returns its error — after tmux made the session (made) or before.
type cutOffStart struct {
	*launch.Launcher
	made   bool
	cancel context.CancelFunc
}

func (c *cutOffStart) Start(ctx context.Context, s launch.Spec) (launch.Session, error) {
	if c.made {
		if _, err := c.Launcher.Start(context.WithoutCancel(ctx), s); err != nil {
			return launch.Session{}, err
		}
	}
	c.cancel()
	return launch.Session{}, fmt.Errorf("start session %s: %w", s.Name, ctx.Err())
}

// TestSessionStartCutOff: a start cut off before it answered (the agent
// stopping, the caller gone) may have left a session running, so its lease
// is kept, durable, and watched as a re-adopted one is: it runs on while
// the session does, and ends as soon as tmux says the session is not there
// (as a run that ended, never as one that failed to start while it runs).
func TestSessionStartCutOff(t *testing.T) {
	for _, made := range []bool{true, false} {
		t.Run(fmt.Sprintf("made %v", made), func(t *testing.T) {
			sess := &cutOffStart{Launcher: tmuxSessions(t), made: made}
			r := newRig(t, lease.DefaultPolicy(), sess)
			c, u := me(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sess.cancel = cancel
			_, err := r.n.Grant(ctx, c, node.Grant{Claim: lease.Claim{Count: 1}, Entry: "node02-q1#0", Run: &node.Run{Command: []string{"sleep", "300"}}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a start cut off answered %v, want its cancellation", err)
			}
			kept := r.durable(t)
			if len(kept) != 1 || kept[0].Entry != "node02-q1#0" {
				t.Fatalf("durable leases after a start cut off: %+v, want its lease kept", kept)
			}
			l := kept[0]
			if made {
				// Several polls: the watched session keeps its lease
				// throughout (an absence, watched for 20 poll periods).
				var got []lease.Lease
				if poll.Wait(10*20*time.Millisecond, func() bool {
					got = r.n.State().Leases
					return len(got) != 1 || got[0].ID != l.ID
				}) {
					t.Fatalf("leases while the session runs: %+v, want %s", got, l.ID)
				}
				if err := sess.Kill(context.Background(), u, l.Session); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the lease to end with its session", func() bool { return len(r.n.State().Leases) == 0 })
			ledger, _ := r.store.Ledger(t0)
			if len(ledger) != 1 || ledger[0].Reason != string(lease.EndSessionEnded) {
				t.Errorf("ledger %+v, want one row ended %s", ledger, lease.EndSessionEnded)
			}
		})
	}
}

// TestCrash: what the node acknowledged is on disk before the caller hears
// it, so a node killed and opened again over what the disk kept holds
// every lease it granted and none it ended, and its fencing tokens go on
// from the last one granted.
func TestCrash(t *testing.T) {
	r := newRig(t, lease.DefaultPolicy(), nil)
	ctx := context.Background()
	a, err := r.n.Grant(ctx, alice, node.Grant{Claim: lease.Claim{GPUs: []int{0}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.n.Grant(ctx, bob, node.Grant{Claim: lease.Claim{GPUs: []int{1, 2}, RequestID: "bob-claim-1"}})
	if err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(time.Minute)
	if err := r.n.Release(ctx, alice, a.ID); err != nil {
		t.Fatal(err)
	}
	kept := r.store.Crash()
	r.n.Close()

	r2 := newRigOn(t, lease.DefaultPolicy(), nil, kept, r.clk)
	got := r2.n.State().Leases
	if len(got) != 1 || got[0].ID != b.ID || !slices.Equal(got[0].GPUs, []int{1, 2}) || got[0].User != "bob" {
		t.Fatalf("after the crash the node holds %+v, want only %s (bob, GPUs 1,2)", got, b.ID)
	}
	again, err := r2.n.Grant(ctx, bob, node.Grant{Claim: lease.Claim{GPUs: []int{1, 2}, RequestID: "bob-claim-1"}})
	if err != nil || again.ID != b.ID {
		t.Errorf("bob's retried claim after the crash: %v %v, want %s again", again.ID, err, b.ID)
	}
	c, err := r2.n.Grant(ctx, alice, node.Grant{Claim: lease.Claim{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != 3 || !slices.Equal(c.GPUs, []int{0}) {
		t.Errorf("the next grant after the crash: token %d GPUs %v, want token 3 (after %d) on GPU 0", c.Token, c.GPUs, b.Token)
	}
	ledger, _ := kept.Ledger(t0)
	if len(ledger) != 1 || ledger[0].LeaseID != a.ID || ledger[0].Reason != string(lease.EndReleased) {
		t.Errorf("ledger after the crash %+v, want %s released", ledger, a.ID)
	}
}

// TestPreempt: a preempted lease is told, keeps its GPUs for the grace,
// and ends at the grace's end with the reason its origin reads; a stale
// token is refused and a second preemption changes nothing.
func TestPreempt(t *testing.T) {
	pol := lease.DefaultPolicy()
	r := newRig(t, pol, nil)
	l, err := r.n.Grant(context.Background(), alice, node.Grant{Claim: lease.Claim{Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.n.Preempt(l.ID, l.Token+1, lease.PreemptQuota, 0); code(err) != refusal.CodeNotFound {
		t.Errorf("preempt with a stale token: %v, want not found", err)
	}
	before := len(r.eventKinds())
	for range 2 {
		if err := r.n.Preempt(l.ID, l.Token, lease.PreemptQuota, 0); err != nil {
			t.Fatalf("preempt: %v", err)
		}
	}
	if got := r.eventKinds()[before:]; !slices.Equal(got, []event.EventKind{event.EventPreempt}) {
		t.Errorf("events %v, want one preempt", got)
	}
	r.clk.Advance(pol.PreemptGrace - time.Second)
	r.n.Tick()
	if len(r.n.State().Leases) != 1 {
		t.Fatalf("ended %v before its grace was over", pol.PreemptGrace-time.Second)
	}
	r.clk.Advance(time.Second)
	r.n.Tick()
	if len(r.n.State().Leases) != 0 || len(r.durable(t)) != 0 {
		t.Fatalf("still held when the grace is over")
	}
	ledger, _ := r.store.Ledger(t0)
	if want := lease.PreemptedReason(lease.PreemptQuota); len(ledger) != 1 || ledger[0].Reason != string(want) {
		t.Errorf("ledger %+v, want one row ended %s", ledger, want)
	}
}

func code(err error) refusal.Code {
	var le *refusal.Error
	if errors.As(err, &le) {
		return le.Code
	}
	return ""
}

// TestBooking: a booking holds its GPUs from its start, not before; at its
// start (on the fake clock) it becomes a lease that ends at its booked end;
// claims made meanwhile keep clear of it.
func TestBooking(t *testing.T) {
	r := newRig(t, lease.DefaultPolicy(), nil)
	ctx := context.Background()
	b, err := r.n.Book(alice, lease.BookRequest{Count: 2, Start: t0.Add(time.Hour), Duration: 2 * time.Hour})
	if err != nil {
		t.Fatalf("book: %v", err)
	}
	if st := r.n.State(); len(st.Bookings) != 1 || len(st.Leases) != 0 || len(r.durable(t)) != 1 {
		t.Fatalf("after booking: %d bookings, %d leases, %d on disk; want 1, 0, 1", len(st.Bookings), len(st.Leases), len(r.durable(t)))
	}
	_, err = r.n.Book(bob, lease.BookRequest{Count: 1, Start: t0.Add(-time.Hour), Duration: time.Hour})
	if want := "which is not in the future: claim now with dibs claim, or book a later time"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a booking in the past: %v, want a refusal saying %q", err, want)
	}
	// Bob's four hours would run into alice's booking on her GPUs: he gets
	// the others.
	l, err := r.n.Grant(ctx, bob, node.Grant{Claim: lease.Claim{Count: 2, Duration: 4 * time.Hour}})
	if err != nil {
		t.Fatalf("claim beside the booking: %v", err)
	}
	if slices.ContainsFunc(l.GPUs, func(g int) bool { return slices.Contains(b.GPUs, g) }) {
		t.Errorf("bob got %v, which alice booked (%v)", l.GPUs, b.GPUs)
	}
	_, err = r.n.Grant(ctx, bob, node.Grant{Claim: lease.Claim{Count: 1, Duration: 4 * time.Hour}})
	for _, want := range []string{"GPUs 0,1 are booked by alice", "(booking node01-1): ask for a shorter time, fewer GPUs, or wait"} {
		if err == nil || code(err) != refusal.CodeConflict || !strings.Contains(err.Error(), want) {
			t.Errorf("a claim over the booking: %v, want a conflict saying %q", err, want)
		}
	}
	r.clk.Advance(time.Hour - time.Second)
	r.n.Tick()
	if len(r.n.State().Bookings) != 1 {
		t.Fatal("the booking started before its time")
	}
	r.clk.Advance(time.Second)
	r.n.Tick()
	waitFor(t, "the booking to start", func() bool { return len(r.n.State().Leases) == 2 })
	st := r.n.State()
	if len(st.Bookings) != 0 {
		t.Errorf("still booked after its start: %v", st.Bookings)
	}
	for _, x := range st.Leases {
		if x.User == "alice" && (!slices.Equal(x.GPUs, b.GPUs) || !x.ExpiresAt.Equal(t0.Add(3*time.Hour))) {
			t.Errorf("alice's lease %v until %v, want %v until %v", x.GPUs, x.ExpiresAt, b.GPUs, t0.Add(3*time.Hour))
		}
	}
}
