package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func leaseOn(b api.Board, node string, gpu int) *lease.Lease {
	for _, n := range b.Nodes {
		if n.Name != node {
			continue
		}
		for _, g := range n.GPUs {
			if g.Index == gpu {
				return g.Lease
			}
		}
	}
	return nil
}

func apiCode(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func TestClaimShowsOnBoardAndReleaseFreesIt(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB"})
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Note: "sweep"})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got, want := r.CUDAVisibleDevices, "0,1"; got != want {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q, want %q", got, want)
	}
	if r.ID != "node01-1" || r.Token != 1 {
		t.Errorf("first lease = %s token %d, want node01-1 token 1", r.ID, r.Token)
	}
	if d := time.Until(r.ExpiresAt); d < 3*time.Hour+59*time.Minute || d > 4*time.Hour {
		t.Errorf("default interactive limit: ends in %s, want 4h", d)
	}
	b, err := n.Client.Board(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	l := leaseOn(b, "node01", 1)
	if l == nil || l.ID != r.ID || l.Note != "sweep" || l.User != b.You.User {
		t.Fatalf("board GPU 1 lease = %+v, want %s by %s", l, r.ID, b.You.User)
	}
	if leaseOn(b, "node01", 2) != nil {
		t.Errorf("GPU 2 shows a lease, want free")
	}
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatalf("release: %v", err)
	}
	b, _ = n.Client.Board(ctx(t))
	if l := leaseOn(b, "node01", 0); l != nil {
		t.Errorf("after release GPU 0 still held by %s", l.ID)
	}
	// Tokens keep rising after a release.
	r2, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token <= r.Token {
		t.Errorf("token after release = %d, want > %d", r2.Token, r.Token)
	}
}

func TestRefusalsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB"})
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 3, Note: "big"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		req      api.ClaimRequest
		code     string
		contains []string
	}{
		{"more than free", api.ClaimRequest{Count: 2}, "conflict", []string{"only 1 free", "you hold GPUs 0,1,2"}},
		{"held gpu", api.ClaimRequest{GPUs: []int{1}}, "conflict", []string{"you already hold GPU 1", "node01-1"}},
		{"no such gpu", api.ClaimRequest{GPUs: []int{9}}, "invalid", []string{"no GPU 9", "0-3"}},
		{"over max", api.ClaimRequest{Count: 1, Duration: "30d"}, "invalid", []string{"maximum"}},
		{"zero", api.ClaimRequest{Count: 1, Duration: "0s"}, "invalid", []string{"positive"}},
		{"garbage duration", api.ClaimRequest{Count: 1, Duration: "soon"}, "invalid", []string{"cannot read duration"}},
		{"bad kind", api.ClaimRequest{Count: 1, Kind: "urgent"}, "invalid", []string{"interactive or batch"}},
		{"other node alone", api.ClaimRequest{Count: 1, Node: "node09"}, "not_found", []string{"no node node09"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Client.Claim(ctx(t), tc.req)
			if err == nil {
				t.Fatalf("claim %+v granted, want refusal", tc.req)
			}
			if got := apiCode(err); got != tc.code {
				t.Errorf("code = %q, want %q (%v)", got, tc.code, err)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	// Nothing half-done: still exactly one lease.
	b, _ := n.Client.Board(ctx(t))
	held := 0
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil {
			held++
		}
	}
	if held != 3 {
		t.Errorf("after refusals %d GPUs held, want 3", held)
	}
}

func TestBusyUnleasedGPUNeedsForce(t *testing.T) {
	t.Parallel()
	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	os.WriteFile(load, []byte(`{"gpus":{"0":{"utilization_pct":90,"memory_used_mib":1000,"processes":[{"pid":4242,"user":"bob","command":"python","used_memory_mib":1000}]}}}`), 0o644)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xH100-80GB", SimLoad: load})
	_, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}})
	if err == nil || !strings.Contains(err.Error(), "bob") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("claim of GPU with bob's process: err = %v, want refusal naming bob and --force", err)
	}
	// -g 1 skips the busy GPU.
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil || r.CUDAVisibleDevices != "1" {
		t.Fatalf("claim -g 1 = %+v, %v; want GPU 1", r, err)
	}
	n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}})
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Force: true}); err != nil {
		t.Fatalf("claim --force: %v", err)
	}
	// bob's process is now a squatter on someone else's lease.
	b, _ := n.Client.Board(ctx(t))
	if !slices.Contains(b.Nodes[0].GPUs[0].Flags, lease.FlagSquatted) {
		t.Errorf("GPU 0 flags = %v, want squatted", b.Nodes[0].GPUs[0].Flags)
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{})
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.Client.Extend(ctx(t), api.ExtendRequest{ID: r.ID, Duration: "2h"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.ExpiresAt.Sub(r.ExpiresAt); got != 2*time.Hour {
		t.Errorf("extend by 2h moved the end by %s", got)
	}
	_, err = n.Client.Extend(ctx(t), api.ExtendRequest{ID: r.ID, Duration: "30d"})
	if err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("extend past max: %v, want refusal naming the maximum", err)
	}
	_, err = n.Client.Extend(ctx(t), api.ExtendRequest{ID: "node01-99", Duration: "1h"})
	if apiCode(err) != "not_found" {
		t.Errorf("extend unknown lease: %v, want not_found", err)
	}
}

func TestRunStartsSessionWithEnvAndSessionEndEndsLease(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB"})
	out := filepath.Join(agenttest.PublicDir(t), "env")
	os.Chmod(filepath.Dir(out), 0o777)
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 2, Run: &api.RunSpec{
		Command: []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER|$DIBS_LEASE_ID|$DIBS_LEASE_TOKEN|$DIBS_NODE" > ` + out + `; sleep 60`},
	}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if r.Session != "dibs-node01-1" {
		t.Errorf("session = %q, want dibs-node01-1", r.Session)
	}
	var got string
	agenttest.Eventually(t, 5*time.Second, "the session to write its env", func() bool {
		b, err := os.ReadFile(out)
		got = strings.TrimSpace(string(b))
		return err == nil && got != ""
	})
	if want := "0,1|PCI_BUS_ID|node01-1|1|node01"; got != want {
		t.Errorf("session env = %q, want %q", got, want)
	}
	ls, err := n.Tmux(os.Getuid(), "ls", "-F", "#{session_name}")
	if err != nil || !strings.Contains(ls, r.Session) {
		t.Fatalf("tmux ls = %q (%v), want %s", ls, err, r.Session)
	}
	// The session ending ends the lease.
	n.Tmux(os.Getuid(), "kill-session", "-t", r.Session)
	agenttest.Eventually(t, 5*time.Second, "the lease to end with its session", func() bool {
		b, err := n.Client.Board(ctx(t))
		return err == nil && leaseOn(b, "node01", 0) == nil
	})
}

func TestRunReleaseKillsSession(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{})
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "train", Command: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the session to be gone", func() bool {
		_, err := n.Tmux(os.Getuid(), "has-session", "-t", "=train")
		return err != nil
	})
	// A duplicate session name is refused and leaves no lease behind.
	// (The server may still be exiting after its last session ended, so
	// make sure the session is really there before claiming.)
	agenttest.Eventually(t, 5*time.Second, "a session named busy", func() bool {
		n.Tmux(os.Getuid(), "new-session", "-d", "-s", "busy", "sleep 60")
		_, err := n.Tmux(os.Getuid(), "has-session", "-t", "=busy")
		return err == nil
	})
	_, err = n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "busy", Command: []string{"true"}}})
	if err == nil || !strings.Contains(err.Error(), "already have a tmux session named busy") {
		t.Fatalf("run with taken name: %v", err)
	}
	b, _ := n.Client.Board(ctx(t))
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil {
			t.Errorf("GPU %d still leased (%s) after a failed run", g.Index, g.Lease.ID)
		}
	}
}

func TestConcurrentClaimersNeverShareAGPU(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{Sim: "8xH100-80GB", Quiet: true})
	var mu sync.Mutex
	owner := map[int]string{}
	granted, refused := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := n.Client.Claim(context.Background(), api.ClaimRequest{Count: 1, Note: fmt.Sprint("claimer ", i)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if apiCode(err) != "conflict" {
					t.Errorf("claimer %d: %v, want a conflict", i, err)
				}
				refused++
				return
			}
			granted++
			for _, g := range r.GPUs {
				if prev, ok := owner[g]; ok {
					t.Errorf("GPU %d granted twice: %s and %s", g, prev, r.ID)
				}
				owner[g] = r.ID
			}
		}(i)
	}
	wg.Wait()
	if granted != 8 || refused != 42 {
		t.Errorf("granted %d, refused %d; want 8 and 42", granted, refused)
	}
}

func TestRestartKeepsLeasesAndReadoptsSessions(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB"})
	claim, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Note: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	alive, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "alive", Command: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Name: "gone", Command: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	n.Tmux(os.Getuid(), "kill-session", "-t", "=gone")
	n.Restart()
	// Sessions are re-adopted once the agent serves (a user's tmux server
	// must not hold up its start): the lease whose session died ends at
	// its first check, the others stay.
	ids := map[string]bool{}
	agenttest.Eventually(t, 5*time.Second, "the lease whose session died while the agent was down to end", func() bool {
		b, err := n.Client.Board(ctx(t))
		if err != nil {
			return false
		}
		clear(ids)
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				ids[g.Lease.ID] = true
			}
		}
		return !ids[gone.ID]
	})
	if !ids[claim.ID] || !ids[alive.ID] {
		t.Fatalf("after restart leases = %v; want %s and %s kept, %s ended (its session died while the agent was down)", ids, claim.ID, alive.ID, gone.ID)
	}
	// The surviving session is watched again.
	n.Tmux(os.Getuid(), "kill-session", "-t", "=alive")
	agenttest.Eventually(t, 5*time.Second, "the re-adopted session's end to end its lease", func() bool {
		b, err := n.Client.Board(ctx(t))
		if err != nil {
			return false
		}
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil && g.Lease.ID == alive.ID {
				return false
			}
		}
		return true
	})
	// Tokens continue from where they were.
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Token != 4 {
		t.Errorf("first token after restart = %d, want 4", r.Token)
	}
}

func TestSecondAgentOnSameDataDirRefuses(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{})
	o := n.Opts
	o.Name = "node01b"
	err := tryStart(t, o)
	if err == nil || !strings.Contains(err.Error(), "in use by another dibs agent") {
		t.Fatalf("second agent on %s: %v, want refusal naming the holder", o.DataDir, err)
	}
}

func TestWatchStreamsChanges(t *testing.T) {
	t.Parallel()
	n := agenttest.Start(t, agenttest.Options{})
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	boards, _ := n.Client.Watch(c)
	select {
	case <-boards:
	case <-time.After(5 * time.Second):
		t.Fatal("no first board")
	}
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case b := <-boards:
			if l := leaseOn(b, "node01", 0); l != nil && l.ID == r.ID {
				return
			}
		case <-deadline:
			t.Fatal("the stream never showed the new lease")
		}
	}
}
