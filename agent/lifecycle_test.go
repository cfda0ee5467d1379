package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

func shortPolicy(action lease.EndAction) lease.Policy {
	p := lease.DefaultPolicy()
	p.WarnBefore = 10 * time.Minute
	p.EndAction = action
	p.SignalGrace = time.Second
	p.IdleAfter = 300 * time.Millisecond
	return p
}

// The clock-driven steps run on a fake clock: the test moves time by hand,
// so an hour's lease is warned, ended and signalled in milliseconds.
func fakeClockAgent(t *testing.T, action lease.EndAction) (*agenttest.Node, *clock.Fake) {
	fake := clock.NewFake(time.Now())
	n := agenttest.Start(t, agenttest.Options{Policy: shortPolicy(action), Clock: fake})
	return n, fake
}

func TestWarningThenOverdueShowOnTheBoard(t *testing.T) {
	t.Parallel()
	n, fake := fakeClockAgent(t, lease.ActionWarn)
	r, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	notices := func() []string { b, _ := n.Client.Board(ctx(t)); return b.Notices }
	fake.Advance(50 * time.Minute)
	agenttest.Tick(t, fake, 100*time.Millisecond, 3*time.Second, "the ten-minute warning in the notices", func() bool {
		ns := notices()
		return len(ns) > 0 && strings.Contains(ns[0], r.ID+" ends in")
	})
	b, _ := n.Client.Board(ctx(t))
	if !slices.Contains(b.Nodes[0].GPUs[0].Flags, lease.FlagExpiring) {
		t.Errorf("flags %v, want expiring", b.Nodes[0].GPUs[0].Flags)
	}
	fake.Advance(10 * time.Minute)
	agenttest.Tick(t, fake, 100*time.Millisecond, 3*time.Second, "the lease to show overdue and stay (end action warn)", func() bool {
		b, _ := n.Client.Board(ctx(t))
		g := b.Nodes[0].GPUs[0]
		return g.Lease != nil && slices.Contains(g.Flags, lease.FlagOverdue) && strings.Contains(b.Notices[0], "past its end")
	})
}

func TestEndActionSignalTermsThenKillsThenEnds(t *testing.T) {
	t.Parallel()
	agenttest.RequireTmux(t)
	n, fake := fakeClockAgent(t, lease.ActionSignal)
	dir := agenttest.PublicDir(t)
	got := filepath.Join(dir, "got")
	// The job ignores SIGTERM after noting it, so only SIGKILL ends it.
	_, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h", Run: &api.RunSpec{
		Command: []string{"sh", "-c", `trap 'echo term >> ` + got + `' TERM; echo ready >> ` + got + `; while :; do sleep 0.1; done`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 5*time.Second, "the job to set its trap", func() bool {
		b, _ := os.ReadFile(got)
		return strings.Contains(string(b), "ready")
	})
	// One step to the end: the agent's loop signals; the clock then stands
	// still while the job notes SIGTERM, so its grace cannot run out.
	fake.Advance(time.Hour)
	agenttest.Eventually(t, 5*time.Second, "SIGTERM to reach the job at the end", func() bool {
		b, _ := os.ReadFile(got)
		return strings.Contains(string(b), "term")
	})
	// Within the grace (1s on this policy) the lease and its job stay.
	b, _ := n.Client.Board(ctx(t))
	if b.Nodes[0].GPUs[0].Lease == nil {
		t.Fatal("the lease ended with SIGTERM, before its grace")
	}
	fake.Advance(time.Second)
	agenttest.Tick(t, fake, 100*time.Millisecond, 6*time.Second, "the lease to end after the grace", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return b.Nodes[0].GPUs[0].Lease == nil
	})
	agenttest.Eventually(t, 3*time.Second, "the session to be gone", func() bool {
		_, err := n.Tmux(os.Getuid(), "has-session", "-t", "=dibs-node01-1")
		return err != nil
	})
}

func TestEndActionEndEndsAtOnce(t *testing.T) {
	t.Parallel()
	n, fake := fakeClockAgent(t, lease.ActionEnd)
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Hour - time.Second)
	fake.Advance(500 * time.Millisecond)
	if b, _ := n.Client.Board(ctx(t)); b.Nodes[0].GPUs[0].Lease == nil {
		t.Fatal("the lease ended before its time")
	}
	agenttest.Tick(t, fake, 100*time.Millisecond, 4*time.Second, "the lease to end at its time", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return b.Nodes[0].GPUs[0].Lease == nil && len(b.Notices) > 0 && strings.Contains(b.Notices[0], "ended at its time limit")
	})
}

// A wall clock stepped a day forward on the node ends nothing early: the
// lease, the warning and the end all wait for the monotonic clock.
func TestWallClockStepForwardEndsNothingEarly(t *testing.T) {
	t.Parallel()
	n, fake := fakeClockAgent(t, lease.ActionEnd)
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{Count: 1, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	fake.StepWall(24 * time.Hour)
	// Fifty-one minutes later by the monotonic clock the agent warns (so its
	// loop has run since the step), and the lease is still there.
	fake.Advance(51 * time.Minute)
	agenttest.Tick(t, fake, 100*time.Millisecond, 3*time.Second, "the ten-minute warning after the step", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return len(b.Notices) > 0 && strings.Contains(b.Notices[0], "ends in")
	})
	if b, _ := n.Client.Board(ctx(t)); b.Nodes[0].GPUs[0].Lease == nil {
		t.Fatal("a wall-clock step forward ended a lease with minutes left")
	}
	fake.Advance(9 * time.Minute)
	agenttest.Tick(t, fake, 100*time.Millisecond, 4*time.Second, "the lease to end when its hour has run", func() bool {
		b, _ := n.Client.Board(ctx(t))
		return b.Nodes[0].GPUs[0].Lease == nil
	})
}

func TestIdleAndSquattedFlags(t *testing.T) {
	t.Parallel()
	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	os.WriteFile(load, []byte(`{"gpus":{"3":{"utilization_pct":50,"processes":[{"pid":777,"user":"mallory","uid":4242,"command":"python","used_memory_mib":500}]}}}`), 0o644)
	n := agenttest.Start(t, agenttest.Options{Policy: shortPolicy(lease.ActionWarn), SimLoad: load})
	if _, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 3*time.Second, "GPU 0 (leased, nothing running) to be idle and GPU 3 squatted", func() bool {
		b, _ := n.Client.Board(ctx(t))
		g := b.Nodes[0].GPUs
		return slices.Contains(g[0].Flags, lease.FlagIdle) && slices.Contains(g[3].Flags, lease.FlagSquatted) && !slices.Contains(g[1].Flags, lease.FlagIdle)
	})
}

func TestAdoptTakesYourRunIntoALease(t *testing.T) {
	t.Parallel()
	dir := agenttest.PublicDir(t)
	load := filepath.Join(dir, "load.json")
	body, _ := json.Marshal(map[string]any{"gpus": map[string]any{"1": map[string]any{"utilization_pct": 90,
		"processes": []map[string]any{{"pid": 5151, "uid": os.Getuid(), "command": "python", "used_memory_mib": 1000}}}}})
	os.WriteFile(load, body, 0o644)
	n := agenttest.Start(t, agenttest.Options{SimLoad: load})
	b, _ := n.Client.Board(ctx(t))
	if !slices.Contains(b.Nodes[0].GPUs[1].Flags, lease.FlagSquatted) {
		t.Fatalf("before adopt GPU 1 flags = %v, want squatted", b.Nodes[0].GPUs[1].Flags)
	}
	r, err := n.Client.Adopt(ctx(t), api.AdoptRequest{PID: 5151, Duration: "2h"})
	if err != nil {
		t.Fatal(err)
	}
	if r.CUDAVisibleDevices != "1" {
		t.Errorf("adopted GPUs %s, want 1", r.CUDAVisibleDevices)
	}
	b, _ = n.Client.Board(ctx(t))
	if slices.Contains(b.Nodes[0].GPUs[1].Flags, lease.FlagSquatted) {
		t.Errorf("after adopt GPU 1 is still squatted")
	}
	if _, err := n.Client.Adopt(ctx(t), api.AdoptRequest{PID: 999}); err == nil || !strings.Contains(err.Error(), "pid 999 is not on any GPU") {
		t.Errorf("adopt of an unknown pid: %v", err)
	}
}

func TestRunWithoutTmuxRefusesAndLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := agenttest.PublicDir(t)
	probe, _ := sim.New(sim.Options{Spec: "2xL40S", HostName: "node01"})
	a, err := agent.New(agent.Config{NodeName: "node01", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "run", "s.sock"), Log: agenttest.Logger(t, "node01", false)},
		agent.Deps{Probe: probe, Sessions: launch.New(launch.Options{TmuxPath: "/nonexistent/tmux"})})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	cl := api.NewClient(filepath.Join(dir, "run", "s.sock"))
	_, err = cl.Claim(ctx(t), api.ClaimRequest{Count: 1, Run: &api.RunSpec{Command: []string{"true"}}})
	if err == nil || !strings.Contains(err.Error(), "tmux not found") {
		t.Fatalf("run without tmux: %v", err)
	}
	b, _ := cl.Board(ctx(t))
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil {
			t.Errorf("GPU %d left leased after the failed run", g.Index)
		}
	}
}

func TestCorruptStoreRefusesToStart(t *testing.T) {
	t.Parallel()
	dir := agenttest.PublicDir(t)
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o700)
	os.WriteFile(filepath.Join(data, "dibs.db"), []byte(strings.Repeat("not a database ", 500)), 0o600)
	err := tryStart(t, agenttest.Options{Name: "node01", DataDir: data})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(data, "dibs.db")) {
		t.Fatalf("start on a corrupt store: %v, want a refusal naming the file", err)
	}
	if fi, _ := os.Stat(filepath.Join(data, "dibs.db")); fi == nil || fi.Size() != int64(len(strings.Repeat("not a database ", 500))) {
		t.Errorf("the corrupt file was changed or removed")
	}
}
