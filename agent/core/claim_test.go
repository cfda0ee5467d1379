package core_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// migProfile is the profile of the MIG device uuid names in snap.
func migProfile(snap nodeprobe.Snapshot, uuid string) string {
	for _, g := range snap.GPUs {
		for _, m := range g.MIGDevices {
			if m.UUID == uuid {
				return m.Profile
			}
		}
	}
	return ""
}

// started records the sessions a node starts, as tmux would be asked for
// them, and keeps each running until its watcher stops.
type started struct {
	mu    sync.Mutex
	specs []launch.Spec
}

func (s *started) Start(_ context.Context, spec launch.Spec) (launch.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.specs = append(s.specs, spec)
	return launch.Session{Name: spec.Name, User: spec.User}, nil
}

func (s *started) last() (launch.Spec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.specs) == 0 {
		return launch.Spec{}, false
	}
	return s.specs[len(s.specs)-1], true
}

func (*started) Exists(context.Context, launch.User, string) (bool, error)         { return true, nil }
func (*started) List(context.Context, launch.User) ([]string, error)               { return nil, nil }
func (*started) Message(context.Context, launch.User, string, string) error        { return nil }
func (*started) Signal(context.Context, launch.User, string, syscall.Signal) error { return nil }
func (*started) Kill(context.Context, launch.User, string) error                   { return nil }
func (*started) Watch(ctx context.Context, _ launch.User, _ string, _ time.Duration) <-chan struct{} {
	return ctx.Done()
}
func (*started) AttachCommand(launch.User, string) []string        { return nil }
func (*started) ExitStatus(launch.User, string) (int, bool, error) { return 0, false, nil }

// TestClaimArrivesWhole: a claim made at node01 for node02's GPUs is the
// claim node01 made of the request, carried as is: node02 grants (or
// refuses) it by every field the person gave, and its session starts as
// they asked.
func TestClaimArrivesWhole(t *testing.T) {
	run := &api.RunSpec{Name: "train-7", Command: []string{"python", "train.py", "--lr", "3e-4"}, Dir: "/home/alice/exp",
		Env: map[string]string{"PATH": "/opt/conda/bin:/usr/bin", "VIRTUAL_ENV": "/home/alice/venv"}}
	tests := []struct {
		name string
		req  api.ClaimRequest
		// check reads node02's lease (and the session it started, when
		// there is a run); wantErr is node02's refusal instead.
		check   func(t *testing.T, l lease.Lease, snap nodeprobe.Snapshot, s *launch.Spec)
		wantErr string
	}{
		{name: "a MIG instance, the kind, the time, the note and the request id",
			req: api.ClaimRequest{MIG: "2g.20gb", Kind: "batch", Duration: "90m", Note: "mig eval", RequestID: "req-mig-0001"},
			check: func(t *testing.T, l lease.Lease, snap nodeprobe.Snapshot, _ *launch.Spec) {
				if profile := migProfile(snap, l.MIG); profile != "2g.20gb" || l.Kind != lease.KindBatch || !l.ExpiresAt.Equal(t0.Add(90*time.Minute)) ||
					l.Note != "mig eval" || l.RequestID != "req-mig-0001" {
					t.Errorf("node02 granted MIG %q (%s), kind %s, until %v, note %q, request id %q; want a 2g.20gb, batch, %v, mig eval, req-mig-0001",
						l.MIG, migProfile(snap, l.MIG), l.Kind, l.ExpiresAt, l.Note, l.RequestID, t0.Add(90*time.Minute))
				}
			}},
		{name: "a memory budget on a named GPU",
			req: api.ClaimRequest{GPUs: []int{1}, Mem: "20G"},
			check: func(t *testing.T, l lease.Lease, _ nodeprobe.Snapshot, _ *launch.Spec) {
				if !slices.Equal(l.GPUs, []int{1}) || l.MemMiB != 20<<10 {
					t.Errorf("node02 granted GPUs %v with %d MiB; want GPU 1 with %d MiB", l.GPUs, l.MemMiB, 20<<10)
				}
			}},
		{name: "a model node02 has",
			req: api.ClaimRequest{Count: 1, Model: "h100"},
			check: func(t *testing.T, l lease.Lease, _ nodeprobe.Snapshot, _ *launch.Spec) {
				if !slices.Equal(l.GPUs, []int{2}) {
					t.Errorf("node02 granted GPUs %v for --model h100; want 2, its first H100", l.GPUs)
				}
			}},
		{name: "a model node02 lacks", req: api.ClaimRequest{Count: 1, Model: "L40S"}, wantErr: "L40S"},
		{name: "a pool node02 is not in", req: api.ClaimRequest{Count: 1, Tags: []string{"east"}}, wantErr: "east"},
		{name: "a run: its session name, command, directory and environment",
			req: api.ClaimRequest{Count: 1, Run: run},
			check: func(t *testing.T, l lease.Lease, _ nodeprobe.Snapshot, s *launch.Spec) {
				if s == nil {
					t.Fatal("node02 started no session")
				}
				if l.Session != "train-7" || s.Name != "train-7" || !slices.Equal(s.Command, run.Command) || s.Dir != run.Dir {
					t.Errorf("node02 started session %q (lease says %q) running %q in %s; want train-7 running %q in %s",
						s.Name, l.Session, s.Command, s.Dir, run.Command, run.Dir)
				}
				for k, v := range run.Env {
					if s.Env[k] != v {
						t.Errorf("the session's %s is %q; want %q", k, s.Env[k], v)
					}
				}
				if s.User.Name != "alice" || s.User.UID != 2000 || !s.RecordExit {
					t.Errorf("the session runs as %s (uid %d), recording its exit %v; want alice (uid 2000) recording it", s.User.Name, s.User.UID, s.RecordExit)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := &started{}
			c := newClusterOf(t, clock.NewFake(t0), map[string]users{
				"node01": accounts(1000, "alice"),
				"node02": accounts(2000, "alice"),
			}, clusterOptions{
				specs:    map[string]string{"node02": "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB,2xH100-80GB"},
				sessions: sess,
			})
			req := tt.req
			req.Node = "node02"
			got, err := asUser(c["node01"], "alice").Claim(context.Background(), req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("claim: %v; want node02's refusal naming %q", err, tt.wantErr)
				}
				if n := len(c["node02"].node.State().Leases); n != 0 {
					t.Errorf("after a refusal node02 holds %d leases", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			ls := c["node02"].node.State().Leases
			if len(ls) != 1 || ls[0].ID != got.ID || ls[0].User != "alice" || ls[0].UID != 2000 {
				t.Fatalf("node02 holds %v; want %s, alice's (uid 2000) alone", ls, got.ID)
			}
			var s *launch.Spec
			if x, ok := sess.last(); ok {
				s = &x
			}
			tt.check(t, ls[0], c["node02"].node.State().Snap, s)
			if tt.req.Run == nil && s != nil {
				t.Errorf("a claim without a run started session %q", s.Name)
			}
		})
	}
}

// TestClaimFromTheNetworkIsCheckedByItsOwner: what another agent sends is
// checked again where it lands — its bounds as it is decoded, the session
// name by the launcher's rule — so a claim no edge here would have made
// grants nothing.
func TestClaimFromTheNetworkIsCheckedByItsOwner(t *testing.T) {
	tests := []struct {
		name  string
		claim lease.Claim
		want  string
	}{
		{name: "a session name tmux would rewrite", claim: lease.Claim{Count: 1, Run: &job.RunSpec{Name: "a:b", Command: []string{"true"}}},
			want: "invalid session name"},
		{name: "a count and indices", claim: lease.Claim{Count: 1, GPUs: []int{0}}, want: "both say which GPUs"},
		{name: "a note with an escape", claim: lease.Claim{Count: 1, Note: "\x1b]0;x\x07"}, want: "note holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := &started{}
			c := newClusterOf(t, clock.NewFake(t0), map[string]users{
				"node01": accounts(1000, "alice"),
				"node02": accounts(2000, "alice"),
			}, clusterOptions{sessions: sess})
			// As node01's agent would send it, past node01's own checks.
			body, _ := json.Marshal(map[string]any{"v": peer.Version, "actor": peer.As("alice"), "req": tt.claim})
			_, code, msg := c["node02"].mux.Serve(context.Background(), "node01", peer.Claim.Name, body)
			if code != refusal.CodeInvalid || !strings.Contains(msg, tt.want) {
				t.Fatalf("node02 answered %q %q; want an invalid refusal saying %q", code, msg, tt.want)
			}
			if n := len(c["node02"].node.State().Leases); n != 0 {
				t.Errorf("after the refusal node02 holds %d leases", n)
			}
			if _, ok := sess.last(); ok {
				t.Errorf("node02 started a session for a refused claim")
			}
		})
	}
}
