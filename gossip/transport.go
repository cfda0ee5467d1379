package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dibs-gpu/dibs/internal/lograte"
)

// meteredTransport wraps memberlist's NetTransport to count every byte and
// packet memberlist moves (probes and push/pulls included, since that is the
// traffic an operator pays for), to tell a dialing agent of another cluster
// so (see namecheck.go), to cap the inbound streams held open (in total and
// per source address, closing those over a cap at accept and those that
// send nothing in time) and, in tests, to drop a fraction of incoming UDP
// packets.
type meteredTransport struct {
	inner    memberlist.NodeAwareTransport
	stats    *counters
	loss     float64
	faults   Faults
	label    string        // this cluster's name
	timeout  time.Duration // for reading an accepted stream's label
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
}

var _ memberlist.NodeAwareTransport = (*meteredTransport)(nil)

func newMeteredTransport(inner memberlist.NodeAwareTransport, stats *counters, cfg Config) *meteredTransport {
	t := &meteredTransport{
		inner:    inner,
		stats:    stats,
		loss:     cfg.testPacketLoss,
		label:    cfg.ClusterName,
		timeout:  cfg.TCPTimeout,
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
			// Reading the label waits for the dialer: one goroutine per
			// stream, as memberlist has for each.
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				sc, ok := screen(t.ctx, &meteredConn{Conn: conn, stats: t.stats}, t.label, t.timeout)
				if !ok {
					// The dialer always speaks first; silence is not a peer.
					t.stats.streamsRefused.Add(1)
					t.refused(conn.source, "sent nothing for "+t.timeout.String())
					conn.Close()
					return
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

// admit counts an accepted stream against the caps, or closes it at once
// when it is over one.
func (t *meteredTransport) admit(c net.Conn) (*countedConn, bool) {
	src := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	t.mu.Lock()
	why := ""
	switch {
	case t.openFrom[src] >= t.maxPerSource:
		why = fmt.Sprintf("%d streams already open from there", t.openFrom[src])
	case t.open >= t.maxStreams:
		why = fmt.Sprintf("%d streams already open", t.open)
	default:
		t.open++
		t.openFrom[src]++
	}
	t.mu.Unlock()
	if why != "" {
		t.stats.streamsRefused.Add(1)
		t.refused(src, why)
		c.Close()
		return nil, false
	}
	return &countedConn{Conn: c, source: src, t: t}, true
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
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		c.t.open--
		if c.t.openFrom[c.source]--; c.t.openFrom[c.source] <= 0 {
			delete(c.t.openFrom, c.source)
		}
		c.t.mu.Unlock()
	})
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
