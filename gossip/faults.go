package gossip

import (
	"net"
	"time"
)

// Faults decides what becomes of the traffic one agent sends, so the
// nemesis tests can partition, drop, delay and duplicate it on a machine
// whose kernel cannot (no netem, no root). Every packet and every stream
// memberlist sends — probes, gossip, push/pull, requests between agents —
// passes through it. Production agents have none.
type Faults interface {
	// Packet is the fate of one UDP packet to addr (HOST:PORT).
	Packet(addr string) PacketFate
	// Stream is called before a TCP stream to addr is opened: a non-nil
	// error refuses it, as an unreachable host would.
	Stream(addr string) error
}

// PacketFate is what happens to one packet.
type PacketFate struct {
	// Drop loses it.
	Drop bool
	// Delay sends it this much later.
	Delay time.Duration
	// Duplicate sends it twice.
	Duplicate bool
}

// send writes b to addr through write as the fault says. A delayed packet
// is copied, since memberlist reuses its buffers once WriteTo returns.
func (t *meteredTransport) send(b []byte, addr string, write func([]byte) (time.Time, error)) (time.Time, error) {
	if t.faults == nil {
		return write(b)
	}
	fate := t.faults.Packet(addr)
	switch {
	case fate.Drop:
		return time.Now(), nil
	case fate.Delay > 0:
		late := append([]byte(nil), b...)
		times := 1
		if fate.Duplicate {
			times = 2
		}
		time.AfterFunc(fate.Delay, func() {
			for range times {
				_, _ = write(late)
			}
		})
		return time.Now(), nil
	}
	at, err := write(b)
	if err == nil && fate.Duplicate {
		_, _ = write(b)
	}
	return at, err
}

// dial opens a stream to addr unless the faults refuse it; the stream
// reads another cluster's notice of its name (dialedConn).
func (t *meteredTransport) dial(addr string, open func() (net.Conn, error)) (net.Conn, error) {
	if t.faults != nil {
		if err := t.faults.Stream(addr); err != nil {
			return nil, err
		}
	}
	conn, err := open()
	if err != nil {
		return nil, err
	}
	return &dialedConn{Conn: &meteredConn{Conn: conn, stats: t.stats}, ours: t.label}, nil
}
