package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/account"
	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// teammate is a simulated colleague: an identity and what they hold.
type teammate struct {
	name  string
	uid   int
	holds []held
}

type held struct {
	node string
	id   string
	gpus []int
	busy bool
	pid  int
	cmd  string
	util int
}

// as is the teammate's view of an agent: the service bound to their
// (simulated) account, which every agent's account directory knows.
func (t *teammate) as(a *agent.Agent) *core.Bound {
	return a.Service().ForCaller(lease.Caller{UID: t.uid, User: t.name})
}

// teammates are the demo's simulated colleagues.
func teammates() []*teammate {
	return []*teammate{
		{name: "alice", uid: 20001},
		{name: "bob", uid: 20002},
		{name: "carol", uid: 20003},
		{name: "erin", uid: 20005},
	}
}

// demoUsers knows the simulated teammates as accounts (so a claim one of
// them makes at one node is honoured at another, as for real people) and
// asks the system for everyone else.
type demoUsers struct{ mates []*teammate }

func (u demoUsers) mate(f func(*teammate) bool) (launch.User, bool) {
	for _, t := range u.mates {
		if f(t) {
			return launch.User{Name: t.name, UID: t.uid, GID: t.uid, Groups: []int{t.uid}, Home: "/nonexistent", Shell: "/bin/sh"}, true
		}
	}
	return launch.User{}, false
}

// LookupUID implements account.Users.
func (u demoUsers) LookupUID(uid int) (launch.User, error) {
	if m, ok := u.mate(func(t *teammate) bool { return t.uid == uid }); ok {
		return m, nil
	}
	return account.System{}.LookupUID(uid)
}

// LookupUser implements account.Users.
func (u demoUsers) LookupUser(name string) (launch.User, error) {
	if m, ok := u.mate(func(t *teammate) bool { return t.name == name }); ok {
		return m, nil
	}
	return account.System{}.LookupUser(name)
}

// InGroup implements account.Users.
func (u demoUsers) InGroup(usr launch.User, group string) bool {
	return account.System{}.InGroup(usr, group)
}

// squatter is a process on a GPU with no lease.
type squatter struct {
	node string
	gpu  int
	user string
	uid  int
	pid  int
}

var demoSquatter = squatter{node: "node04", gpu: 2, user: "dave", uid: 20004, pid: 30999}

func (d *Demo) setScene(ctx context.Context) error {
	scene := []struct {
		who  int
		node string
		req  api.ClaimRequest
		busy bool
		cmd  string
	}{
		{0, "node01", api.ClaimRequest{Count: 4, Duration: "6h", Note: "llama-70b finetune"}, true, "python"},
		{1, "node02", api.ClaimRequest{Count: 2, Duration: "3h", Note: "eval harness"}, false, ""},
		{2, "node03", api.ClaimRequest{Count: 1, Duration: "8m", Note: "quick ablation"}, true, "python"},
		{3, "node02", api.ClaimRequest{GPUs: []int{4, 5, 6, 7}, Duration: "20h", Kind: "batch", Note: "hparam sweep"}, true, "torchrun"},
		// Parts of GPUs on node01: a MIG instance, and two memory budgets
		// on the shared A100.
		{1, "node01", api.ClaimRequest{MIG: "3g.40gb", Duration: "2h", Note: "notebook"}, false, ""},
		{0, "node01", api.ClaimRequest{GPUs: []int{7}, Mem: "20G", Duration: "3h", Note: "serving"}, false, ""},
		{2, "node01", api.ClaimRequest{GPUs: []int{7}, Mem: "30G", Duration: "1h", Note: "eval"}, false, ""},
	}
	for _, s := range scene {
		if err := d.claimFor(ctx, d.mates[s.who], s.node, s.req, s.busy, s.cmd); err != nil {
			return err
		}
	}
	d.applyLoads()
	// A booking: node02's GPUs 2 and 3 tomorrow morning, for a deadline.
	tomorrow := time.Now().Add(24 * time.Hour)
	at := time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 9, 0, 0, 0, time.Local)
	if _, err := d.mates[0].as(d.byName["node02"]).Book(ctx, api.BookRequest{Node: "node02", GPUs: []int{2, 3}, Start: at, Duration: "3h", Note: "paper deadline"}); err != nil {
		return fmt.Errorf("the demo's booking: %w", err)
	}
	return nil
}

// claimFor makes a teammate's claim through the node's own agent.
func (d *Demo) claimFor(ctx context.Context, t *teammate, node string, req api.ClaimRequest, busy bool, cmd string) error {
	a := d.byName[node]
	req.Node = node
	r, err := t.as(a).Claim(ctx, req)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.pidNext++
	t.holds = append(t.holds, held{node: r.Node, id: r.ID, gpus: r.GPUs, busy: busy, pid: d.pidNext, cmd: cmd, util: 60 + d.rng.IntN(40)})
	d.mu.Unlock()
	return nil
}

// applyLoads tells every simulated node what runs on it now.
func (d *Demo) applyLoads() {
	d.mu.Lock()
	loads := map[string]sim.Load{}
	for name := range d.sims {
		loads[name] = sim.Load{GPUs: map[int]sim.GPULoad{}}
	}
	for _, t := range d.mates {
		for i := range t.holds {
			h := &t.holds[i]
			if !h.busy {
				continue
			}
			h.util += d.rng.IntN(11) - 5
			h.util = min(100, max(35, h.util))
			uid := t.uid
			// The one process is the GPU's load, as NVML's process samples
			// would show it (the board's detail reads it per process).
			sm := h.util
			for _, g := range h.gpus {
				mem := uint64(20000 + h.util*600)
				loads[h.node].GPUs[g] = sim.GPULoad{UtilizationPct: h.util, Processes: []sim.LoadProcess{
					{PID: h.pid, User: t.name, UID: &uid, Command: h.cmd, UsedMemoryMiB: mem, SMUtilPct: &sm},
				}}
			}
		}
	}
	sq := demoSquatter
	uid := sq.uid
	sqUtil := 40 + d.rng.IntN(20)
	loads[sq.node].GPUs[sq.gpu] = sim.GPULoad{UtilizationPct: sqUtil, Processes: []sim.LoadProcess{
		{PID: sq.pid, User: sq.user, UID: &uid, Command: "jupyter-kernel", UsedMemoryMiB: 12000, SMUtilPct: &sqUtil},
	}}
	d.mu.Unlock()
	for name, l := range loads {
		d.sims[name].SetLoad(l)
	}
}

// run moves the load every second and lets a teammate act every tick.
func (d *Demo) run(ctx context.Context) {
	defer d.wg.Done()
	load := time.NewTicker(time.Second)
	act := time.NewTicker(d.opts.Tick)
	defer load.Stop()
	defer act.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-load.C:
			d.applyLoads()
		case <-act.C:
			d.act(ctx)
		}
	}
}

// act has one teammate release something or claim something, the way a team
// works through a day.
func (d *Demo) act(ctx context.Context) {
	d.mu.Lock()
	t := d.mates[d.rng.IntN(len(d.mates))]
	release := len(t.holds) > 0 && d.rng.IntN(3) == 0
	var h held
	if release {
		i := d.rng.IntN(len(t.holds))
		h = t.holds[i]
		t.holds = append(t.holds[:i], t.holds[i+1:]...)
	}
	n := 1 + d.rng.IntN(2)
	busy := d.rng.IntN(4) != 0
	d.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if release {
		if _, err := t.as(d.byName[h.node]).Release(cctx, api.ReleaseRequest{IDs: []string{h.id}}); err != nil {
			d.opts.Log.Warn("demo: a teammate's release failed", "who", t.name, "lease", h.id, "err", err)
		}
		d.applyLoads()
		return
	}
	if len(t.holds) >= 3 {
		return
	}
	// Teammates ask like anyone: no node named, dibs places it.
	a := d.agents[d.rng.IntN(len(d.agents))]
	r, err := t.as(a).Claim(cctx, api.ClaimRequest{Count: n, Duration: "2h", Note: "experiment"})
	if err != nil {
		return // the cluster is full; they will try later
	}
	d.mu.Lock()
	d.pidNext++
	t.holds = append(t.holds, held{node: r.Node, id: r.ID, gpus: r.GPUs, busy: busy, pid: d.pidNext, cmd: "python", util: 50 + d.rng.IntN(50)})
	d.mu.Unlock()
	d.applyLoads()
}
