package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dibs-gpu/dibs/base/lograte"
)

// meteredTransport wraps memberlist's NetTransport to count every byte and
// packet memberlist moves (probes and push/pulls included, since that is the
// traffic an operator pays for), to tell a dialing agent of another cluster
// so (see namecheck.go), to cap the inbound streams held open (in total and
// per source address) while keeping room for members (see admit), and, in
// tests, to drop a fraction of incoming UDP packets.
type meteredTransport struct {
	inner  memberlist.NodeAwareTransport
	stats  *counters
	loss   float64
	faults Faults
	label  string   // this cluster's name
	keys   [][]byte // the cluster key, to check a stream's first frame; nil when insecure
	// budget is how long an accepted stream has to send its label and
	// first frame before it is closed; see admit.
	budget   time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	maxStreams, maxPerSource int
	logf                     func(format string, args ...any)
	refusals                 *lograte.Limiter
	mu                       sync.Mutex
	open                     int            // inbound streams not yet closed
	openFrom                 map[string]int // the same, by source address
	unproven                 []*countedConn // open streams not yet proven, oldest first
}

var _ memberlist.NodeAwareTransport = (*meteredTransport)(nil)

func newMeteredTransport(inner memberlist.NodeAwareTransport, stats *counters, cfg Config) *meteredTransport {
	t := &meteredTransport{
		inner:    inner,
		stats:    stats,
		loss:     cfg.testPacketLoss,
		label:    cfg.ClusterName,
		budget:   min(cfg.TCPTimeout, proofBudget),
		faults:   cfg.Faults,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		stop:     make(chan struct{}),

		maxStreams:   cfg.MaxInboundStreams,
		maxPerSource: cfg.MaxInboundStreamsPerSource,
		logf:         cfg.Logf,
		refusals:     lograte.New(0, 0, nil),
		openFrom:     map[string]int{},
	}
	if !cfg.Insecure {
		t.keys = [][]byte{cfg.Key}
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(2)
	go t.pumpPackets()
	go t.pumpStreams()
	return t
}

func (t *meteredTransport) pumpPackets() {
	defer t.wg.Done()
	for {
		select {
		case p := <-t.inner.PacketCh():
			t.stats.bytesIn.Add(uint64(len(p.Buf)))
			if t.loss > 0 && rand.Float64() < t.loss {
				continue
			}
			select {
			case t.packetCh <- p:
			case <-t.stop:
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *meteredTransport) pumpStreams() {
	defer t.wg.Done()
	for {
		select {
		case raw := <-t.inner.StreamCh():
			conn, ok := t.admit(raw)
			if !ok {
				continue
			}
			// Reading the label and the first frame waits for the dialer:
			// one goroutine per stream, as memberlist has for each.
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				sc, ok := screen(t.ctx, &meteredConn{Conn: conn, stats: t.stats}, t.label, t.budget)
				if !ok {
					// The dialer always speaks first; silence is not a peer.
					// (One closed to make room was counted then.)
					if !conn.evicted.Load() {
						t.stats.streamsRefused.Add(1)
						t.refused(conn.source, "sent nothing for "+t.budget.String())
					}
					conn.Close()
					return
				}
				if sc.label == t.label && provesKey(sc, t.keys, t.label, t.budget) {
					t.prove(conn)
				}
				select {
				case t.streamCh <- sc:
				case <-t.stop:
					conn.Close()
				}
			}()
		case <-t.stop:
			return
		}
	}
}

func (t *meteredTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *meteredTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.stats.bytesOut.Add(uint64(len(b)))
	return t.send(b, addr, func(b []byte) (time.Time, error) { return t.inner.WriteTo(b, addr) })
}

func (t *meteredTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.stats.bytesOut.Add(uint64(len(b)))
	return t.send(b, a.Addr, func(b []byte) (time.Time, error) { return t.inner.WriteToAddress(b, a) })
}

func (t *meteredTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *meteredTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.dial(addr, func() (net.Conn, error) { return t.inner.DialTimeout(addr, timeout) })
}

func (t *meteredTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.dial(a.Addr, func() (net.Conn, error) { return t.inner.DialAddressTimeout(a, timeout) })
}

func (t *meteredTransport) StreamCh() <-chan net.Conn { return t.streamCh }

func (t *meteredTransport) Shutdown() error {
	err := t.inner.Shutdown()
	t.stopOnce.Do(func() { close(t.stop); t.cancel() })
	t.wg.Wait()
	return err
}

// Keeping room for members. The caps (MaxInboundStreams in all,
// MaxInboundStreamsPerSource from one address) bound what strangers can make
// the agent hold, but a cap that refuses the newest stream lets whoever
// fills it first shut the members out — and the likely stranger is a user on
// a member node, connecting from that member's own address, so room per
// address does not help. So a stream earns its slot: it is proven once its
// first frame decrypts with the cluster key and carries this cluster's
// label (what only a member can send; provesKey), and until then it is
// unproven. Unproven streams have budget (at most proofBudget) to send their
// label and first frame, and when a cap is reached the oldest unproven
// stream under it is closed to make room, instead of the new one being
// refused. A member's stream is proven within a round trip of connecting
// (memberlist writes the whole first message at once), so however many
// strangers connect, from however many addresses, they only push one
// another out; a new stream is refused only when every slot under the cap
// holds a proven one.

// proofBudget is how long an unproven stream may take to send its label and
// first frame. A member sends both at once, so on any LAN they arrive within
// milliseconds; a push/pull of several megabytes over a slow link is the
// longest (and it is only pushed out by a flood, never refused).
const proofBudget = 2 * time.Second

// maxProofFrame is the largest first frame read to check it before
// memberlist reads it: requests, answers, pings and the push/pull of a
// small cluster are far below it. A larger frame is handed on unproven
// (memberlist still reads and checks it); the bound keeps what strangers
// can make the agent buffer to MaxInboundStreams × 64 KiB.
const maxProofFrame = 64 << 10

// admit counts an accepted stream against the caps. Over a cap it makes room
// by closing the oldest unproven stream under that cap; only when there is
// none is the new stream closed at once.
func (t *meteredTransport) admit(c net.Conn) (*countedConn, bool) {
	src := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	cc := &countedConn{Conn: c, source: src, t: t}
	for range 2 {
		evict, why := t.take(cc)
		if why == "" {
			return cc, true
		}
		if evict == nil {
			break
		}
		// Close frees its slot; pumpStreams is the only caller of admit,
		// so the slot is still free when the loop comes round.
		t.stats.streamsRefused.Add(1)
		t.refused(evict.source, "not proven to hold the key while the slots were full ("+why+")")
		evict.evicted.Store(true)
		evict.Close()
	}
	t.stats.streamsRefused.Add(1)
	t.refused(src, "every slot holds a stream proven to come from a member")
	c.Close()
	return nil, false
}

// take counts cc against the caps when there is room (why is empty);
// else why says which cap is full, and evict is the oldest unproven stream
// under it (nil: none).
func (t *meteredTransport) take(cc *countedConn) (evict *countedConn, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	src := cc.source
	switch {
	case t.openFrom[src] >= t.maxPerSource:
		return t.oldestUnproven(src), fmt.Sprintf("%d streams already open from there", t.openFrom[src])
	case t.open >= t.maxStreams:
		return t.oldestUnproven(""), fmt.Sprintf("%d streams already open", t.open)
	}
	t.open++
	t.openFrom[src]++
	t.unproven = append(t.unproven, cc)
	return nil, ""
}

// forget gives back the slot of a stream that closed.
func (t *meteredTransport) forget(c *countedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unproven = slices.DeleteFunc(t.unproven, func(u *countedConn) bool { return u == c })
	t.open--
	if t.openFrom[c.source]--; t.openFrom[c.source] <= 0 {
		delete(t.openFrom, c.source)
	}
}

// oldestUnproven is the unproven stream open longest, from src if it is
// not empty. t.mu is held.
func (t *meteredTransport) oldestUnproven(src string) *countedConn {
	for _, c := range t.unproven {
		if src == "" || c.source == src {
			return c
		}
	}
	return nil
}

// prove marks c as a member's stream: it is no longer pushed out to make
// room.
func (t *meteredTransport) prove(c *countedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unproven = slices.DeleteFunc(t.unproven, func(u *countedConn) bool { return u == c })
}

// refused logs a refused stream, at most once per source every few seconds.
func (t *meteredTransport) refused(src, why string) {
	if ok, n := t.refusals.Allow("stream", src); ok {
		more := ""
		if n > 0 {
			more = fmt.Sprintf(" (and %d more refused)", n)
		}
		t.logf("gossip: closed a stream from %s: %s%s", src, why, more)
	}
}

// countedConn is an inbound stream counted against the caps until it
// closes.
type countedConn struct {
	net.Conn
	source string
	t      *meteredTransport
	once   sync.Once
	// evicted: closed to make room for another stream (see admit).
	evicted atomic.Bool
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.t.forget(c) })
	return c.Conn.Close()
}

// meteredConn counts a stream's bytes.
type meteredConn struct {
	net.Conn
	stats *counters
}

func (c *meteredConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.stats.bytesIn.Add(uint64(n))
	return n, err
}

func (c *meteredConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.stats.bytesOut.Add(uint64(n))
	return n, err
}
