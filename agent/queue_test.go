package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

func TestQueuedRunStartsWhenGPUsFree(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S"})
	hold, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(agenttest.PublicDir(t), "ran")
	s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Duration: "30m", Run: &api.RunSpec{
		Command: []string{"sh", "-c", "echo $CUDA_VISIBLE_DEVICES > " + out + "; sleep 30"}}}})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if s.Position != 1 {
		t.Errorf("position %d, want 1", s.Position)
	}
	q, _ := n.Client.Queue(ctx(t))
	if len(q.Entries) != 1 || q.Entries[0].ID != s.ID || q.Entries[0].EstStart.IsZero() {
		t.Fatalf("queue = %+v, want %s with an estimated start", q.Entries, s.ID)
	}
	if d := time.Until(q.Entries[0].EstStart); d < 55*time.Minute || d > 61*time.Minute {
		t.Errorf("estimated start in %s, want about 1h (when the holder's lease ends)", d)
	}
	t0 := time.Now()
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{hold.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the queued run's session to start", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.TrimSpace(string(b)) != ""
	})
	t.Logf("queued run started %s after the release", time.Since(t0).Round(time.Millisecond))
	agenttest.Eventually(t, 3*time.Second, "the entry to leave the waiting queue", func() bool {
		q, _ := n.Client.Queue(ctx(t))
		return len(q.Entries) == 1 && q.Entries[0].Running
	})
	b, _ := n.Client.Board(ctx(t))
	var got string
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil && strings.HasPrefix(g.Lease.Entry, s.ID+"#") {
			got = g.Lease.Session
		}
	}
	if got == "" {
		t.Fatalf("no lease carries entry %s", s.ID)
	}
	// When the run ends, the entry is done and gone.
	n.Tmux(os.Getuid(), "kill-session", "-t", "="+got)
	agenttest.Eventually(t, 5*time.Second, "the finished entry to leave the queue", func() bool {
		q, _ := n.Client.Queue(ctx(t))
		return len(q.Entries) == 0
	})
}

func TestQueueCancelAndImpossibleRequests(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S"})
	n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2})
	s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Client.Cancel(ctx(t), s.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if q, _ := n.Client.Queue(ctx(t)); len(q.Entries) != 0 {
		t.Errorf("queue after cancel = %+v", q.Entries)
	}
	if err := n.Client.Cancel(ctx(t), s.ID); err == nil || !strings.Contains(err.Error(), "no queued request") {
		t.Errorf("second cancel: %v", err)
	}
	for _, tc := range []struct {
		req  api.SubmitRequest
		want string
	}{
		{api.SubmitRequest{Claim: api.ClaimRequest{Count: 3}}, "2"},
		{api.SubmitRequest{Claim: api.ClaimRequest{Run: &api.RunSpec{Command: []string{"true"}}}, Nodes: 2, GPUsPerNode: 1}, "node"},
		{api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}, Model: "H100"}, "H100"},
	} {
		_, err := n.Client.Submit(ctx(t), tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("submit %+v: %v, want a refusal mentioning %q", tc.req, err, tc.want)
		}
	}
	if q, _ := n.Client.Queue(ctx(t)); len(q.Entries) != 0 {
		t.Errorf("impossible requests were queued: %+v", q.Entries)
	}
}

func TestQueuedEntrySurvivesItsOriginsRestart(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "1xL40S"})
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := n.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1, Note: "after lunch"}})
	if err != nil {
		t.Fatal(err)
	}
	n.Restart()
	q, err := n.Client.Queue(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Entries) != 1 || q.Entries[0].ID != s.ID || q.Entries[0].Note != "after lunch" {
		t.Fatalf("queue after restart = %+v, want %s kept", q.Entries, s.ID)
	}
	s2, err := n.Client.Submit(ctx(t), api.SubmitRequest{Claim: api.ClaimRequest{Count: 1}})
	if err != nil || s2.ID != "node01-q2" {
		t.Errorf("next id after restart = %q (%v), want node01-q2", s2.ID, err)
	}
}
