// Package proxy is the agents' opt-in proxy for services (issue 33, agent
// config [services] proxy): one TCP port per service, the same on every
// node, that forwards each connection round-robin to the service's
// healthy replicas wherever they run, so one address survives restarts
// and moves.
//
// A proxy never dials a replica's port on another node. It connects to
// the agent of the replica's node at that agent's backend port (the first
// of the range), names the replica's lease in a small preface, and that
// agent checks at that moment that the socket listening on the replica's
// port is the replica's own (its session's process, its owner's uid) and
// connects to it over its own loopback. A replica on the proxy's own node
// is dialed the same way, in process. So another user who binds a
// replica's port between a crash and the restart gets no traffic, and a
// replica bound to 127.0.0.1 is served too: its own node's agent reaches
// it on the loopback.
//
// The agent holds every port of the range open while it runs, assigned
// or not: a port it published for a service and opened only later could
// be bound first by another user on the node, who would then receive the
// service's clients. A connection to a port no service has is closed at
// once. While the agent is down (a restart) nothing holds the range.
//
// The proxy keeps no state of its own beyond its listeners and counters:
// which ports to open and where each service's healthy replicas are is
// read from the agent's view of the cluster at every change.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/agent/notify"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Defaults of Config's bounds.
const (
	DefaultMaxConns       = 1024
	DefaultMaxPerService  = 256
	DefaultDialTimeout    = 5 * time.Second
	DefaultIdleTimeout    = 10 * time.Minute
	defaultPrefaceTimeout = 5 * time.Second
	// resync is how often the proxy reads the view without being told of
	// a change (a listener that failed to open is tried again).
	resync = 2 * time.Second
)

// Config is what the proxy is told by the agent's config.
type Config struct {
	// Node is this agent's node name.
	Node string
	// Ports is the range: its first port is the backend, the rest the
	// services' (service.PortRange).
	Ports service.PortRange
	// Host is the address the proxy listens on ("" or "0.0.0.0": every
	// address); the agents use the one they gossip on.
	Host string
	// MaxConns bounds the connections the proxy forwards at once, and
	// separately those its backend serves; MaxPerService bounds one
	// service's on this node. Beyond them a connection is closed as soon
	// as it is accepted, and counted refused.
	MaxConns, MaxPerService int
	// DialTimeout bounds reaching a replica (the backend's dial, its
	// owner check and its answer); IdleTimeout closes a connection after
	// that long without a byte either way.
	DialTimeout, IdleTimeout time.Duration
	Log                      *slog.Logger
}

// Deps are what the proxy reads and calls. Every function may be called
// from any goroutine, at once.
type Deps struct {
	// View is the cluster as this agent sees it now.
	View func() queue.ClusterView
	// DialLocal connects to a replica of this node by its lease id, owner
	// checked at that moment (agent/node's ServiceDialer).
	DialLocal func(ctx context.Context, lease string) (net.Conn, error)
	// Changed wakes the proxy when the view may have changed.
	Changed *notify.Signal
}

// Key names a service: its owner and name, unique across the cluster.
type Key struct {
	User, Name string
}

// Count is one service's connections through this node's proxy since the
// agent started, for the metrics.
type Count struct {
	Key
	Port int
	// Forwarded reached a replica; Refused were closed because a bound
	// was reached; Failed found no healthy replica that answered.
	Forwarded, Refused, Failed uint64
}

// Proxy is one agent's proxy: its services' listeners and its backend.
type Proxy struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	backend net.Listener
	// routes is where each port's connections go now, replaced whole at
	// every reconcile.
	routes atomic.Pointer[map[int]*route]
	// active counts the connections forwarded now, and backActive those
	// the backend serves.
	active, backActive atomic.Int64

	mu sync.Mutex
	// fronts are the listeners of the range's service ports, every one
	// that could be opened, assigned or not.
	fronts map[int]*front
	counts map[Key]*counter
	conns  map[net.Conn]struct{}
	// failedOpen are ports whose listener did not open, logged once;
	// twice the ports two services carried, logged once each.
	failedOpen map[int]bool
	twice      map[[2]Key]bool
}

// route is one service's port: who it is, and its healthy replicas.
type route struct {
	key      Key
	replicas []replica
}

// replica is a healthy replica as the proxy reaches it.
type replica struct {
	lease string
	// backend is the HOST:PORT of its node's backend; empty when it runs
	// on this node (dialed in process).
	backend string
}

// front is a service port's listener.
type front struct {
	port   int
	ln     net.Listener
	active atomic.Int64
	next   atomic.Uint64
}

// counter is a service's connection counts.
type counter struct {
	port                       int
	forwarded, refused, failed atomic.Uint64
}

// New opens the backend listener and returns a proxy that opens its
// services' ports once Run starts. The backend port must be free: an
// agent whose proxy cannot listen there does not start, with the reason.
func New(cfg Config, deps Deps) (*Proxy, error) {
	if err := cfg.Ports.Check(); err != nil {
		return nil, err
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxPerService <= 0 {
		cfg.MaxPerService = DefaultMaxPerService
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ln, err := net.Listen("tcp", listenAddr(cfg.Host, cfg.Ports.Backend()))
	if err != nil {
		return nil, fmt.Errorf("services proxy: the backend port %d (the first of proxy_ports %s) cannot be opened: %w", cfg.Ports.Backend(), cfg.Ports, err)
	}
	p := &Proxy{cfg: cfg, deps: deps, log: cfg.Log, backend: ln,
		fronts: map[int]*front{}, counts: map[Key]*counter{}, conns: map[net.Conn]struct{}{}, failedOpen: map[int]bool{}, twice: map[[2]Key]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	empty := map[int]*route{}
	p.routes.Store(&empty)
	p.mu.Lock()
	defer p.mu.Unlock()
	var taken []int
	for port := cfg.Ports.First + 1; port <= cfg.Ports.Last; port++ {
		if !p.holdLocked(port) {
			taken = append(taken, port)
		}
	}
	if len(taken) > 0 {
		p.log.Warn("services proxy: ports of proxy_ports are taken by another program; a service given one is not reachable here until it is freed",
			"ports", portList(taken), "range", cfg.Ports.String())
	}
	return p, nil
}

// holdLocked opens port's listener unless it is open; false when it
// cannot be opened now. p.mu is held.
func (p *Proxy) holdLocked(port int) bool {
	if p.fronts[port] != nil {
		return true
	}
	ln, err := net.Listen("tcp", listenAddr(p.cfg.Host, port))
	if err != nil {
		return false
	}
	f := &front{port: port, ln: ln}
	p.fronts[port] = f
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.serveFront(f)
	}()
	return true
}

// portList writes ports as the config would: runs as FIRST-LAST.
func portList(ports []int) string {
	var b strings.Builder
	for i := 0; i < len(ports); {
		j := i
		for j+1 < len(ports) && ports[j+1] == ports[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprint(&b, ports[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ports[i], ports[j])
		}
		i = j + 1
	}
	return b.String()
}

// BackendAddr is where the backend listens (HOST:PORT).
func (p *Proxy) BackendAddr() string { return p.backend.Addr().String() }

// Run serves the backend and keeps the services' ports open as the view
// changes, until Close.
func (p *Proxy) Run() {
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.serveBackend()
	}()
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(resync)
		defer t.Stop()
		for {
			var wake <-chan struct{}
			if p.deps.Changed != nil {
				wake = p.deps.Changed.Wait()
			}
			p.Reconcile(p.deps.View())
			select {
			case <-p.ctx.Done():
				return
			case <-wake:
			case <-t.C:
			}
		}
	}()
}

// Close stops every listener and every connection and waits for them.
func (p *Proxy) Close() {
	p.cancel()
	p.backend.Close()
	p.mu.Lock()
	for port, f := range p.fronts {
		f.ln.Close()
		delete(p.fronts, port)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Ports are the service ports the proxy serves now (a service has the
// port and its listener is open), sorted. Every other port of the range
// it holds open too, closing what connects.
func (p *Proxy) Ports() []int {
	routes := *p.routes.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for port := range p.fronts {
		if routes[port] != nil {
			out = append(out, port)
		}
	}
	slices.Sort(out)
	return out
}

// Held is how many of the range's service ports the proxy holds open.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for port := range p.fronts {
		if p.cfg.Ports.Holds(port) {
			n++
		}
	}
	return n
}

// Counts are the connection counts of the services the proxy serves now.
func (p *Proxy) Counts() []Count {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Count, 0, len(p.counts))
	for k, c := range p.counts {
		out = append(out, Count{Key: k, Port: c.port, Forwarded: c.forwarded.Load(), Refused: c.refused.Load(), Failed: c.failed.Load()})
	}
	slices.SortFunc(out, func(a, b Count) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// Reconcile points each live service's proxy port in v at its healthy
// replicas (state healthy, on a live node), and tries again to open any
// port of the range that could not be opened before (and a service's port
// outside it, given by a node with another range, while the service
// lives). A port that two services
// carry (two partitions each admitted one) goes to the lower owner and
// name, logged. A connection already forwarded stays where it is.
func (p *Proxy) Reconcile(v queue.ClusterView) {
	routes := map[int]*route{}
	backend := strconv.Itoa(p.cfg.Ports.Backend())
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, l := range n.Leases {
			if !l.IsService() || l.Service.ProxyPort <= 0 || l.Service.Port <= 0 {
				continue
			}
			k := Key{User: l.User, Name: l.Service.Name}
			r := routes[l.Service.ProxyPort]
			switch {
			case r == nil:
				r = &route{key: k}
				routes[l.Service.ProxyPort] = r
			case r.key != k:
				p.warnTwice(l.Service.ProxyPort, r.key, k)
				if cmp.Or(cmp.Compare(k.User, r.key.User), cmp.Compare(k.Name, r.key.Name)) > 0 {
					continue
				}
				*r = route{key: k}
			}
			if !n.Alive() || l.Service.State != service.Healthy {
				continue
			}
			rep := replica{lease: l.ID}
			if !n.Self {
				host, _, err := net.SplitHostPort(n.Addr)
				if err != nil || host == "" {
					continue // its agent's address is not known: not reachable
				}
				rep.backend = net.JoinHostPort(host, backend)
			}
			r.replicas = append(r.replicas, rep)
		}
	}
	for _, r := range routes {
		slices.SortFunc(r.replicas, func(a, b replica) int { return cmp.Compare(a.lease, b.lease) })
	}
	p.routes.Store(&routes)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return
	}
	for port, f := range p.fronts {
		if routes[port] == nil && !p.cfg.Ports.Holds(port) {
			// A port of another node's range (docs/operations.md: every
			// node should have the same one), open only while used.
			f.ln.Close()
			delete(p.fronts, port)
		}
	}
	for port := p.cfg.Ports.First + 1; port <= p.cfg.Ports.Last; port++ {
		p.holdLocked(port)
	}
	for port, r := range routes {
		c := p.counts[r.key]
		if c == nil || c.port != port {
			c = &counter{port: port}
			p.counts[r.key] = c
		}
		switch {
		case p.holdLocked(port):
			delete(p.failedOpen, port)
		case !p.failedOpen[port]:
			p.log.Warn("services proxy: a service's port is taken by another program here; trying again", "port", port, "service", r.key.Name, "user", r.key.User)
			p.failedOpen[port] = true
		}
	}
	for k, c := range p.counts {
		if r := routes[c.port]; r == nil || r.key != k {
			delete(p.counts, k)
		}
	}
}

// warnTwice logs, once per pair, a port that two services carry (two sides
// of a partition each admitted one): the first by owner and name keeps it.
func (p *Proxy) warnTwice(port int, a, b Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.twice[[2]Key{a, b}] || p.twice[[2]Key{b, a}] {
		return
	}
	p.twice[[2]Key{a, b}] = true
	p.log.Warn("two services carry one proxy port; the first by owner and name keeps it", "port", port,
		"service", a.Name, "user", a.User, "other", b.Name, "other_user", b.User)
}

// serveFront accepts a service port's connections until its listener
// closes.
func (p *Proxy) serveFront(f *front) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("services proxy: accept", "port", f.port, "err", err)
			}
			return
		}
		r := (*p.routes.Load())[f.port]
		if r == nil {
			c.Close() // no service has this port: held only so no one else takes it
			continue
		}
		ctr := p.counter(r)
		if !p.take(&p.active, p.cfg.MaxConns) {
			refuse(c, ctr)
			continue
		}
		if !p.take(&f.active, p.cfg.MaxPerService) {
			p.active.Add(-1)
			refuse(c, ctr)
			continue
		}
		if !p.track(c) {
			f.active.Add(-1)
			p.active.Add(-1)
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.active.Add(-1)
			defer f.active.Add(-1)
			defer p.untrack(c)
			p.forward(c, r, f, ctr)
		}()
	}
}

// take counts one more connection in n unless it holds max already.
func (p *Proxy) take(n *atomic.Int64, max int) bool {
	if n.Add(1) > int64(max) {
		n.Add(-1)
		return false
	}
	return true
}

// refuse closes a connection beyond a bound, at once, and counts it.
func refuse(c net.Conn, ctr *counter) {
	c.Close()
	if ctr != nil {
		ctr.refused.Add(1)
	}
}

func (p *Proxy) counter(r *route) *counter {
	if r == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[r.key]
}

// track keeps c for Close; false when the proxy is closing (c closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// forward connects c to the next healthy replica of r that answers,
// round-robin, trying each once, and copies both ways.
func (p *Proxy) forward(c net.Conn, r *route, f *front, ctr *counter) {
	var up net.Conn
	if r != nil && len(r.replicas) > 0 {
		start := int(f.next.Add(1) - 1)
		for i := range r.replicas {
			rep := r.replicas[(start+i)%len(r.replicas)]
			conn, err := p.dialReplica(rep)
			if err == nil {
				up = conn
				break
			}
			p.log.Debug("services proxy: replica not reached", "service", r.key.Name, "user", r.key.User, "lease", rep.lease, "err", err)
		}
	}
	if up == nil {
		c.Close()
		if ctr != nil {
			ctr.failed.Add(1)
		}
		return
	}
	if ctr != nil {
		ctr.forwarded.Add(1)
	}
	if !p.track(up) {
		c.Close()
		return
	}
	defer p.untrack(up)
	pipe(c, up, p.cfg.IdleTimeout)
}

// dialReplica reaches rep: in process when it runs here, else through its
// node's backend, which owner-checks it and answers before any byte of
// the client's goes through.
func (p *Proxy) dialReplica(rep replica) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	if rep.backend == "" {
		return p.deps.DialLocal(ctx, rep.lease)
	}
	pre, err := EncodePreface(rep.lease)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", rep.backend)
	if err != nil {
		return nil, err
	}
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	if _, err := conn.Write(pre); err != nil {
		conn.Close()
		return nil, err
	}
	if err := readAnswer(byteReader{conn}); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// listenAddr is HOST:PORT, every address when host is empty.
func listenAddr(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
