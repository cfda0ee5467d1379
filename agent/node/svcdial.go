package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// ServiceDialer connects the proxy (agent/proxy) to this node's service
// replicas, owner-checked at the moment of each connection (issue 33):
// between a replica's crash and its restart another user may bind its
// port, and that user must get no traffic. The check is the supervisor's
// (launch.Launcher.ListenerOf: the socket listening on the port is held by
// a process of the replica's session tree, running as its owner); the
// socket it found is remembered by its inode, which names that socket for
// as long as it lives, so most connections cost one look at the kernel's
// listeners (launch.Listening, sock_diag) and no tmux call. Safe for
// concurrent use.
type ServiceDialer struct {
	n *Node
	// listening are the sockets listening on a port in the agent's own
	// network namespace, where it dials (launch.Listening).
	listening func(port int) []launch.Socket

	mu sync.Mutex
	// owned is each lease's socket last found to be its replica's own;
	// refused the sockets last found on its port that were not.
	owned   map[string]ownedSocket
	refused map[string]refusedSockets
}

// refusedSockets are the sockets listening on a replica's port that the
// owner check refused, until when that answer stands.
type refusedSockets struct {
	sockets []launch.Socket
	until   time.Time
}

// ownedSocket is a replica's listening socket as the owner check found it.
type ownedSocket struct {
	token uint64
	sock  launch.Socket
}

// ServiceDialer is the node's dialer of its own replicas, for the proxy.
func (n *Node) ServiceDialer() *ServiceDialer {
	return &ServiceDialer{n: n, listening: launch.Listening, owned: map[string]ownedSocket{}, refused: map[string]refusedSockets{}}
}

// Dial connects over this node's loopback to the replica of service lease
// id, which must be a live service lease of this node with a port. It
// refuses when the socket listening on that port is not the replica's
// own (another user's, or nobody's): the socket the check found (now, or
// for an earlier connection) must still be the one listening where it
// dialed once the connection is made. A listening socket never listens
// again once closed, and no other can listen on its address while it
// does, so a connection that reached another user's socket — bound in
// between — is closed before a byte goes through. ctx bounds the check
// and the dial.
func (d *ServiceDialer) Dial(ctx context.Context, id string) (net.Conn, error) {
	l, ok := d.lease(id)
	if !ok {
		return nil, fmt.Errorf("no service with a port holds lease %s on %s", id, d.n.cfg.Name)
	}
	conn, err := d.dial(ctx, l)
	if err != nil && d.known(l) {
		// The socket remembered is gone (the replica restarted): once
		// more with the check asked again.
		d.forget(l.ID)
		conn, err = d.dial(ctx, l)
	}
	return conn, err
}

// dial connects to l's replica's own socket and checks, once connected,
// that it still listens where it was dialed.
func (d *ServiceDialer) dial(ctx context.Context, l lease.Lease) (net.Conn, error) {
	port := l.Service.Port
	sock, err := d.ownSocket(ctx, l)
	if err != nil {
		return nil, err
	}
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "tcp", dialAddr(sock.Addr).String())
	if err != nil {
		return nil, fmt.Errorf("service %s of %s on port %d: %w", l.Service.Name, l.User, port, err)
	}
	if !slices.Contains(d.listening(port), sock) {
		conn.Close()
		return nil, fmt.Errorf("service %s of %s: its listener on port %d went away as it was dialed", l.Service.Name, l.User, port)
	}
	return conn, nil
}

// known reports whether a socket of l's is remembered.
func (d *ServiceDialer) known(l lease.Lease) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.owned[l.ID]
	return ok && o.token == l.Token
}

// lease is id's live service lease of this node, with a port.
func (d *ServiceDialer) lease(id string) (lease.Lease, bool) {
	for _, l := range d.n.State().Leases {
		if l.ID == id {
			ok := l.IsService() && l.Service.Port > 0 && l.Session != "" && l.ReservedUntil.IsZero()
			return l, ok
		}
	}
	return lease.Lease{}, false
}

// ownSocket is the socket listening on l's port that the owner check
// finds to be its replica's own: the one remembered (Dial checks after
// dialing that it still listens, and forgets it when not), else the check
// asked again.
func (d *ServiceDialer) ownSocket(ctx context.Context, l lease.Lease) (launch.Socket, error) {
	port := l.Service.Port
	d.mu.Lock()
	o, ok := d.owned[l.ID]
	d.mu.Unlock()
	if ok && o.token == l.Token {
		return o.sock, nil
	}
	d.forget(l.ID)
	listening := d.listening(port)
	notOwn := fmt.Errorf("the listener on port %d is not service %s's own (%s's session): no traffic goes to it", port, l.Service.Name, l.User)
	if len(listening) == 0 {
		return launch.Socket{}, fmt.Errorf("nothing listens on port %d for service %s of %s", port, l.Service.Name, l.User)
	}
	now := d.n.deps.Clock.Now()
	d.mu.Lock()
	r, ok := d.refused[l.ID]
	d.mu.Unlock()
	if ok && now.Before(r.until) && slices.Equal(r.sockets, listening) {
		// The same sockets were found not the replica's a moment ago:
		// a stranger's listener costs no tmux call per connection.
		return launch.Socket{}, notOwn
	}
	lf, _ := d.n.deps.Sessions.(listenerFinder)
	if lf == nil {
		return launch.Socket{}, fmt.Errorf("this node cannot check who listens on a port")
	}
	u, err := d.n.holder(l)
	if err != nil {
		return launch.Socket{}, err
	}
	who, err := lf.ListenerOf(ctx, u, l.Session, port)
	if err != nil {
		return launch.Socket{}, err
	}
	if who.PID == 0 {
		d.refuse(l.ID, listening, now)
		return launch.Socket{}, notOwn
	}
	// Of the owner's sockets, one the agent sees in its own network
	// namespace (where it dials), IPv4 first.
	var pick launch.Socket
	for _, s := range launch.SocketsOf(who.PID, u.UID, port) {
		if slices.Contains(listening, s) && (!pick.Addr.IsValid() || s.Addr.Addr().Is4() && !pick.Addr.Addr().Is4()) {
			pick = s
		}
	}
	if !pick.Addr.IsValid() {
		d.refuse(l.ID, listening, now)
		return launch.Socket{}, notOwn
	}
	live := map[string]bool{}
	for _, l := range d.n.State().Leases {
		live[l.ID] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.owned {
		if !live[id] { // ended: what is remembered stays as few as the node's services
			delete(d.owned, id)
		}
	}
	for id := range d.refused {
		if !live[id] {
			delete(d.refused, id)
		}
	}
	delete(d.refused, l.ID)
	d.owned[l.ID] = ownedSocket{token: l.Token, sock: pick}
	return pick, nil
}

// refuseFor is how long sockets found not a replica's own are refused
// without asking again.
const refuseFor = time.Second

// refuse remembers that the sockets listening on a lease's port were not
// its replica's own at now.
func (d *ServiceDialer) refuse(id string, sockets []launch.Socket, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refused[id] = refusedSockets{sockets: sockets, until: now.Add(refuseFor)}
}

func (d *ServiceDialer) forget(id string) {
	d.mu.Lock()
	delete(d.owned, id)
	d.mu.Unlock()
}

// dialAddr is where to reach a socket listening on a: its own address,
// or the loopback of its family when it listens on every address (a
// socket on [::] is reached on [::1], so that a v6-only one is not taken
// for an IPv4 listener of another user on 127.0.0.1).
func dialAddr(a netip.AddrPort) netip.AddrPort {
	switch {
	case a.Addr() == netip.IPv4Unspecified():
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), a.Port())
	case a.Addr() == netip.IPv6Unspecified():
		return netip.AddrPortFrom(netip.IPv6Loopback(), a.Port())
	}
	return a
}
