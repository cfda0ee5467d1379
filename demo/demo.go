// Package demo runs a whole simulated dibs cluster in one process: four real
// agents gossiping over loopback with an ephemeral key, simulated GPUs, and a
// few simulated teammates who claim, run and release over time. What the
// person at the keyboard claims and runs is real: tmux sessions on this
// machine with the right CUDA_VISIBLE_DEVICES.
package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// Nodes is the demo cluster: two big boxes and two smaller ones — node01
// with, beside six RTX PRO 6000s, an A100 split into MIG instances and a
// whole A100 that teammates share by memory budgets; node03 in pool
// rtx5090 (its limits below). The first three model their sockets, so the
// board shows each GPU's local cores; node04 reports none, as a node whose
// firmware does not say.
var nodeSpecs = []struct {
	name, spec string
	tags       []string
}{
	{"node01", "6xRTX-PRO-6000,1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,1xA100-80GB,sockets=2x64", nil},
	{"node02", "8xRTX-PRO-6000,sockets=2x64", nil},
	{"node03", "4xRTX-5090,sockets=1x64", []string{"rtx5090"}},
	{"node04", "4xL40S", nil},
}

// demoPools are the demo's pool limits: what a pool looks like on the board
// and in refusals.
var demoPools = lease.Pools{"rtx5090": {MaxTime: 8 * time.Hour, MaxGPUs: 2}}

// Options tune the demo; the zero value is what `dibs demo` runs.
type Options struct {
	// Dir holds the agents' data and the socket; empty makes a temp dir that
	// Stop removes.
	Dir string
	// TmuxTmpDir is where the person's sessions go; empty means tmux's
	// default, so their own `tmux ls` shows them.
	TmuxTmpDir string
	// Seed fixes the teammates' choices.
	Seed uint64
	// Tick is how often the teammates act (default 4s).
	Tick time.Duration
	// Log receives the agents' lines; nil drops them.
	Log *slog.Logger
}

// Demo is a running demo cluster.
type Demo struct {
	opts    Options
	dir     string
	ownDir  bool
	agents  []*agent.Agent
	sims    map[string]*sim.Sim
	byName  map[string]*agent.Agent
	socket  string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	mates   []*teammate
	rng     *mrand.Rand
	pidNext int
}

// Socket is node01's local API, where the person's board and CLI connect.
func (d *Demo) Socket() string { return d.socket }

// Start brings up the four agents, waits until they see each other, and sets
// the scene: busy GPUs, an idle lease, a squatter, a lease about to expire.
func Start(ctx context.Context, o Options) (*Demo, error) {
	if o.Tick <= 0 {
		o.Tick = 4 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	d := &Demo{opts: o, dir: o.Dir, sims: map[string]*sim.Sim{}, byName: map[string]*agent.Agent{},
		rng: mrand.New(mrand.NewPCG(o.Seed, 7)), pidNext: 31000, mates: teammates()}
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "dibs-demo-")
		if err != nil {
			return nil, err
		}
		d.dir, d.ownDir = dir, true
	} else if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo dir: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	policy := lease.DefaultPolicy()
	policy.IdleAfter = 20 * time.Second
	policy.Pools = demoPools
	var seed string
	for i, ns := range nodeSpecs {
		simProbe, err := sim.New(sim.Options{Spec: ns.spec, HostName: ns.name})
		if err != nil {
			d.Stop()
			return nil, err
		}
		cl := &agent.ClusterSettings{BindAddr: "127.0.0.1", BindPort: 0, Name: "dibs-demo", Key: key, Fast: true}
		if seed != "" {
			cl.Join = []string{seed}
		}
		sock := ""
		if i == 0 {
			sock = filepath.Join(d.dir, "dibs.sock")
			d.socket = sock
		}
		a, err := agent.New(agent.Config{
			NodeName:      ns.name,
			DataDir:       filepath.Join(d.dir, ns.name),
			Socket:        sock,
			ProbeInterval: time.Second,
			Policy:        policy,
			Tags:          ns.tags,
			Cluster:       cl,
			Log:           o.Log.With("node", ns.name),
		}, agent.Deps{Probe: simProbe, Users: demoUsers{mates: d.mates},
			Sessions: launch.New(launch.Options{TmuxTmpDir: o.TmuxTmpDir, StatusDir: filepath.Join(d.dir, "exit-"+ns.name),
				StatusQuota: -1})}) // one person's demo in a temporary directory: no tmpfs to leave mounted
		if err != nil {
			d.Stop()
			return nil, err
		}
		if err := a.Start(ctx); err != nil {
			d.Stop()
			return nil, fmt.Errorf("start %s: %w", ns.name, err)
		}
		d.agents = append(d.agents, a)
		d.sims[ns.name] = simProbe
		d.byName[ns.name] = a
		if seed == "" {
			seed = a.GossipAddr()
		}
	}
	if err := d.waitConverged(ctx, 10*time.Second); err != nil {
		d.Stop()
		return nil, err
	}
	if err := d.setScene(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	tctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(1)
	go d.run(tctx)
	return d, nil
}

func (d *Demo) waitConverged(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ok := true
		for _, a := range d.agents {
			b, _ := a.For(os.Getuid()).Board(ctx)
			alive := 0
			for _, n := range b.Nodes {
				if n.State == api.NodeAlive && len(n.GPUs) > 0 {
					alive++
				}
			}
			if alive != len(nodeSpecs) {
				ok = false
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("the demo agents did not find each other within 10s")
}

// Stop ends the teammates, ends the person's demo sessions, stops the agents
// and removes the demo's files.
func (d *Demo) Stop() {
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	for _, a := range d.agents {
		me := a.For(os.Getuid())
		b, _ := me.Board(context.Background())
		if ids := sessionLeases(b, a.Node(), me.Caller().UID); len(ids) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			me.Release(ctx, api.ReleaseRequest{IDs: ids})
			cancel()
		}
	}
	for i := len(d.agents) - 1; i >= 0; i-- {
		d.agents[i].Stop()
	}
	if d.ownDir {
		os.RemoveAll(d.dir)
	}
}

// sessionLeases are the leases on node that uid holds with a session
// (the person's runs and services in the demo), as board b shows them:
// on whole GPUs, on parts of GPUs (a MIG instance, a memory budget), and
// services, which a -g 0 service shows only among (it holds no GPU).
// Releasing them ends their sessions, which would outlive the demo.
func sessionLeases(b api.Board, node string, uid int) []string {
	var ids []string
	add := func(l *lease.Lease) {
		if l != nil && l.Node == node && l.UID == uid && l.Session != "" && !slices.Contains(ids, l.ID) {
			ids = append(ids, l.ID)
		}
	}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			add(g.Lease)
			for i := range g.Shares {
				add(&g.Shares[i])
			}
		}
	}
	for i := range b.Services {
		add(&b.Services[i])
	}
	return ids
}
