package nemesis

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/service"
)

// The service client and the observer (issue 33). The client is one
// person running a few services with `dibs serve` through the agents'
// sockets, as the CLI does, stopping one now and then with `dibs stop`
// and killing a replica's process with SIGKILL; the observer asks every
// node's address for every service the client ever started, every
// SvcRound, and records which copy answered (Seen). The checker
// (check_service.go) reads both against the faults.

// svcRound is how often the observer asks every service on every node.
const svcRound = 200 * time.Millisecond

// svcPoll bounds one question to one copy.
const svcPoll = time.Second

// svcRules are the supervisor's numbers in a run: a short start-up
// allowance (the replica is a tiny server), the default backoff and crash
// loop.
var svcRules = service.Rules{StartAllowance: 10 * time.Second}

// svc is one service the client started (or tried to).
type svc struct {
	name string
	port int
	gpus int
	// acked: the serve was answered OK; unsure: it was not answered, and
	// may have been done.
	acked, unsure bool
	// stopping: a stop was tried; stopped: one was answered OK.
	stopping, stopped bool
	tries             int
	kills             []time.Time
}

// svcClient runs services against the cluster.
type svcClient struct {
	h    *harness
	rng  *rand.Rand
	exe  string
	dir  string
	want int

	mu   sync.Mutex
	all  []*svc // every service the observer asks about, in order started
	next int
	seen map[string]replicaAnswer // a service's last answer seen (any node)
}

func newSvcClient(h *harness) *svcClient {
	exe, err := os.Executable()
	if err != nil {
		h.tb.Fatalf("the service replicas are this test binary: %v", err)
	}
	dir := h.tb.TempDir()
	os.Chmod(dir, 0o755)
	return &svcClient{h: h, rng: rand.New(rand.NewPCG(h.opts.Seed, 7)), exe: exe, dir: dir, want: h.opts.Services, seen: map[string]replicaAnswer{}}
}

// run starts services and acts on them now and then until stop closes.
func (c *svcClient) run(stop <-chan struct{}) {
	for {
		c.step()
		select {
		case <-stop:
			return
		case <-time.After(c.h.between(2*time.Second, 6*time.Second)):
		}
	}
}

// step does one thing: finishes a stop not yet answered, starts a
// service when fewer than wanted run, or else now and then stops one or
// kills one's process.
func (c *svcClient) step() {
	c.mu.Lock()
	var pending, live []*svc
	gpus := 0
	for _, s := range c.all {
		switch {
		case s.stopping && !s.stopped && s.tries < 20:
			pending = append(pending, s)
		case !s.stopping && (s.acked || s.unsure):
			live = append(live, s)
			gpus += s.gpus
		}
	}
	c.mu.Unlock()
	switch r := c.rng.IntN(100); {
	case len(pending) > 0:
		c.stop(pending[0])
	case len(live) < c.want:
		// Half of them hold a GPU, as far as the per-person bound allows
		// (leases.service_gpus_per_user, 2 by default).
		g := 0
		if gpus < 2 && c.rng.IntN(2) == 0 {
			g = 1
		}
		c.serve(g)
	case r < 20:
		s := live[c.rng.IntN(len(live))]
		c.mu.Lock()
		s.stopping = true
		c.mu.Unlock()
		c.stop(s)
	case r < 35:
		c.kill(live[c.rng.IntN(len(live))])
	}
}

func (c *svcClient) via() *member {
	m := c.h.members[c.rng.IntN(len(c.h.members))]
	<-m.clock.running()
	return m
}

// serve starts a new service as `dibs serve NAME -g G --port P [--health
// /health] [--replicas 2] -- REPLICA` does, on a node named or wherever
// it fits: one claim a replica (a service without a GPU has two, half the
// time, placed apart), all or none — when one is refused, those started
// are stopped again, as the CLI does.
func (c *svcClient) serve(gpus int) {
	c.mu.Lock()
	c.next++
	s := &svc{name: fmt.Sprintf("svc%02d", c.next), port: agenttest.FreePort(c.h.tb), gpus: gpus}
	c.all = append(c.all, s)
	c.mu.Unlock()
	via := c.via()
	nodes := make([]string, len(c.h.members))
	for i, m := range c.h.members {
		nodes[i] = m.name
	}
	spec := service.Spec{Name: s.name, Port: s.port}
	if c.rng.IntN(2) == 0 {
		spec.Health = "/health"
	}
	if gpus == 0 && len(nodes) > 1 && c.rng.IntN(2) == 0 {
		spec.Replicas = 2
	}
	node := ""
	if spec.Replicas < 2 && c.rng.IntN(2) == 0 {
		node = nodes[c.rng.IntN(len(nodes))]
	}
	outcome := OK
	var started []SvcOp
	for i := range max(spec.Replicas, 1) {
		one := spec
		one.Replica = i
		req := api.ClaimRequest{Node: node, Count: gpus, Service: &one, RequestID: fmt.Sprintf("nemesis-svc-%016x", c.rng.Uint64()),
			Run: &api.RunSpec{Command: replicaCommand(c.exe, s.port, nodes), Dir: c.dir}}
		op := SvcOp{Kind: SvcServe, Service: s.name, Via: via.name, Node: node, GPUs: gpus, Port: s.port, Call: c.h.rec.now()}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := via.client.Claim(ctx, req)
		cancel()
		c.finish(&op, err)
		if err == nil {
			op.Node, op.LeaseID = r.Node, r.ID
			started = append(started, op)
		}
		c.h.rec.svcOp(op)
		if op.Outcome != OK {
			outcome = op.Outcome
			break
		}
	}
	if outcome != OK && len(started) > 0 {
		c.rollBack(via, s, started)
	}
	c.mu.Lock()
	s.acked, s.unsure = outcome == OK, outcome == Unknown
	c.mu.Unlock()
}

// rollBack stops the replicas of s started before one was refused, as
// `dibs serve` does: one release for them all.
func (c *svcClient) rollBack(via *member, s *svc, started []SvcOp) {
	var ids, nodes []string
	for _, op := range started {
		ids, nodes = append(ids, op.LeaseID), append(nodes, op.Node)
	}
	op := SvcOp{Kind: SvcStop, Service: s.name, Via: via.name, Node: strings.Join(nodes, ","), LeaseID: strings.Join(ids, ","), Call: c.h.rec.now()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := via.client.Release(ctx, api.ReleaseRequest{IDs: ids})
	c.finish(&op, err)
	c.mu.Lock()
	s.stopping, s.stopped = true, op.Outcome == OK
	c.mu.Unlock()
	c.h.rec.svcOp(op)
}

// stop stops s as `dibs stop NAME` does: the board names the leases of
// the caller's service of that name (every replica it lists, as
// `--replicas` has it), and one release ends them all or none.
func (c *svcClient) stop(s *svc) {
	via := c.via()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := SvcOp{Kind: SvcStop, Service: s.name, Via: via.name, Call: c.h.rec.now()}
	b, err := via.client.Board(ctx)
	if err == nil {
		var ids, nodes []string
		for _, l := range b.Services {
			if l.Service != nil && l.Service.Name == s.name && l.User == b.You.User {
				ids, nodes = append(ids, l.ID), append(nodes, l.Node)
			}
		}
		if len(ids) == 0 {
			err = &api.Error{Code: "not-found", Msg: fmt.Sprintf("you run no service named %s: dibs services lists them", s.name)}
		} else {
			op.LeaseID, op.Node = strings.Join(ids, ","), strings.Join(nodes, ",")
			_, err = via.client.Release(ctx, api.ReleaseRequest{IDs: ids})
		}
	}
	c.finish(&op, err)
	c.mu.Lock()
	s.tries++
	if op.Outcome == OK {
		s.stopped = true
	}
	c.mu.Unlock()
	c.h.rec.svcOp(op)
}

// kill kills the process of s's copy the observer saw last with SIGKILL,
// at most twice a service, so that no service crash-loops for the
// client's doing (five restarts in ten minutes would).
func (c *svcClient) kill(s *svc) {
	c.mu.Lock()
	a, ok := c.seen[s.name]
	if len(s.kills) >= 2 {
		ok = false
	}
	c.mu.Unlock()
	if !ok || !isReplica(a.PID, s.port) {
		return
	}
	op := SvcOp{Kind: SvcKill, Service: s.name, Node: a.Node, LeaseID: a.Lease, PID: a.PID, Call: c.h.rec.now()}
	err := syscall.Kill(a.PID, syscall.SIGKILL)
	op.Return = c.h.rec.now()
	if err != nil {
		op.Outcome, op.Err = Refused, err.Error()
	}
	c.mu.Lock()
	s.kills = append(s.kills, time.Now())
	c.mu.Unlock()
	c.h.rec.svcOp(op)
}

// isReplica reports whether pid is still a replica serving port (not a
// process that took its number since).
func isReplica(pid, port int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 2 && args[1] == replicaArg && args[2] == strconv.Itoa(port)
}

func (c *svcClient) finish(op *SvcOp, err error) {
	o := Op{}
	(&client{h: c.h}).finish(&o, err)
	op.Return, op.Outcome, op.Err = o.Return, o.Outcome, o.Err
}

// watched is every service the client ever started or tried to.
func (c *svcClient) watched() []*svc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// somewhere is a node the observer last saw answering for a service the
// client has not stopped ("" when none): where a partition past the
// grace is worth striking.
func (c *svcClient) somewhere() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var nodes []string
	for _, s := range c.all {
		if a, ok := c.seen[s.name]; ok && !s.stopping {
			nodes = append(nodes, a.Node)
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	return nodes[c.rng.IntN(len(nodes))]
}

// observer asks every node's address for every service, every svcRound,
// and records the runs of identical answers.
type observer struct {
	c     *svcClient
	nodes []string
	http  *http.Client
	// open is the run each (service, node) is in now.
	open map[[2]string]*Seen

	mu sync.Mutex
	// last is when the latest round began; up when each service last
	// answered on some node (at a round's start).
	last int64
	up   map[string]int64
}

func newObserver(c *svcClient) *observer {
	o := &observer{c: c, open: map[[2]string]*Seen{}, up: map[string]int64{},
		http: &http.Client{Timeout: svcPoll, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
			DialContext: (&net.Dialer{Timeout: svcPoll}).DialContext}}}
	for _, m := range c.h.members {
		o.nodes = append(o.nodes, m.name)
	}
	return o
}

// run observes until stop closes, then records the runs still open.
func (o *observer) run(stop <-chan struct{}) {
	defer o.flush()
	for {
		began := time.Now()
		o.round()
		select {
		case <-stop:
			return
		case <-time.After(svcRound - time.Since(began)):
		}
	}
}

type svcPollOne struct {
	svc, node string
	at        int64
	ans       replicaAnswer
	ok        bool
}

// round asks every node's address for every service once, at once.
func (o *observer) round() {
	start := o.c.h.rec.now()
	var polls []*svcPollOne
	ports := map[string]int{}
	for _, s := range o.c.watched() {
		ports[s.name] = s.port
		for i := range o.nodes {
			polls = append(polls, &svcPollOne{svc: s.name, node: o.nodes[i], at: start})
		}
	}
	var wg sync.WaitGroup
	for _, p := range polls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.ans, p.ok = o.ask(nodeAddr(slices.Index(o.nodes, p.node)), ports[p.svc])
			if p.ok && p.ans.Node != p.node {
				p.ok = false // not this node's copy: cannot be, but never count it so
			}
		}()
	}
	wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = start
	for _, p := range polls {
		o.saw(p)
		if p.ok {
			o.up[p.svc] = start
		}
	}
}

// ask is one GET of a copy.
func (o *observer) ask(addr string, port int) (replicaAnswer, bool) {
	resp, err := o.http.Get("http://" + net.JoinHostPort(addr, strconv.Itoa(port)) + "/")
	if err != nil {
		return replicaAnswer{}, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil || resp.StatusCode != http.StatusOK {
		return replicaAnswer{}, false
	}
	return parseAnswer(string(body))
}

// saw adds one poll to its (service, node)'s runs.
func (o *observer) saw(p *svcPollOne) {
	k := [2]string{p.svc, p.node}
	cur := o.open[k]
	if cur != nil && p.ok && cur.Token == p.ans.Token && cur.PID == p.ans.PID {
		cur.To = p.at
		return
	}
	if cur != nil {
		o.c.h.rec.seen(*cur)
		delete(o.open, k)
	}
	if p.ok {
		o.open[k] = &Seen{Service: p.svc, Node: p.node, Lease: p.ans.Lease, PID: p.ans.PID, Token: p.ans.Token, From: p.at, To: p.at}
		o.c.mu.Lock()
		o.c.seen[p.svc] = p.ans
		o.c.mu.Unlock()
	}
}

func (o *observer) flush() {
	for k, s := range o.open {
		o.c.h.rec.seen(*s)
		delete(o.open, k)
	}
}

// settle waits, once the faults are over, until every service the client
// runs (started, not stopped) answered in the observer's latest round, or
// the bound within which each must answer passes: the history then ends
// with each one's verdict in it.
func (c *svcClient) settle(o *observer, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		last, up := o.last, maps.Clone(o.up)
		o.mu.Unlock()
		all := true
		for _, s := range c.watched() {
			c.mu.Lock()
			running := s.acked && !s.stopping
			c.mu.Unlock()
			if running && up[s.name] != last {
				all = false
			}
		}
		if all && last > 0 {
			return
		}
		time.Sleep(svcRound)
	}
}
