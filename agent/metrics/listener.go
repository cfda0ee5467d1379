package metrics

import (
	"container/list"
	"net"
	"sync"
)

// MaxConns bounds the connections the metrics port holds open at once. A
// scrape is one short request, and Prometheus keeps one connection per
// target; the bound is for strangers, who could otherwise hold a file
// descriptor of the root agent each (an idle connection lasts until its
// header timeout, and they reconnect), and the agent's descriptors are
// shared with its gossip, SSH and socket listeners.
const MaxConns = 64

// boundedListener keeps at most max connections open: past that, accepting
// a new one closes the oldest still open. A new connection is never
// refused, so a flood that holds the slots cannot keep a scrape out (it
// can only cut one short by opening max connections while it runs, which
// a scrape that takes milliseconds rarely meets).
type boundedListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open *list.List // of *boundedConn, oldest first
}

func newBoundedListener(ln net.Listener, max int) *boundedListener {
	return &boundedListener{Listener: ln, max: max, open: list.New()}
}

func (l *boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	bc := &boundedConn{Conn: c, l: l}
	var evict *boundedConn
	l.mu.Lock()
	if l.open.Len() >= l.max {
		evict = l.open.Remove(l.open.Front()).(*boundedConn)
		evict.elem = nil
	}
	bc.elem = l.open.PushBack(bc)
	l.mu.Unlock()
	if evict != nil {
		evict.Conn.Close()
	}
	return bc, nil
}

// held reports how many connections the listener holds open.
func (l *boundedListener) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open.Len()
}

// boundedConn gives its slot back when closed, once.
type boundedConn struct {
	net.Conn
	l    *boundedListener
	elem *list.Element // nil once out of the list; guarded by l.mu
}

func (c *boundedConn) Close() error {
	c.l.mu.Lock()
	if c.elem != nil {
		c.l.open.Remove(c.elem)
		c.elem = nil
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}
