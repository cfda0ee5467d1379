package gossip

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// This file is the Cluster's joining: the configured peers at start, and
// the missing ones again later, so a healed partition does not stay split.

// memberNodes copies the memberlist nodes of every member but this one.
func (c *Cluster) memberNodes() []memberlist.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]memberlist.Node, 0, len(c.peers))
	for _, r := range c.peers {
		if r.member {
			out = append(out, r.node)
		}
	}
	return out
}

// joinOnce joins the given peers in parallel and returns how many answered,
// waiting at most wait. Failures are logged when loud: while this agent has
// reached nobody yet (a wrong address, a firewall). Once it has, a peer it
// cannot re-join is away — restarting, or down — which `dibs status` and
// the board show; a restart of a peer must not fill the log with warnings.
func (c *Cluster) joinOnce(peers []string, wait time.Duration, loud bool) int {
	ml := c.list()
	if ml == nil || len(peers) == 0 {
		return 0
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ml.Join([]string{p}); err != nil {
				if loud && !c.closed() && c.Err() == nil {
					c.cfg.Logf("gossip: join %s: %s", p, joinProblem(err))
				}
				return
			}
			ok.Add(1)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	case <-c.stopCh:
	}
	return int(ok.Load())
}

// joinLoop keeps the configured peers joined: with backoff until some peer
// answers, then every RejoinInterval for configured peers that are not
// alive members, and shortly after every membership loss.
func (c *Cluster) joinLoop(up bool) {
	defer c.wg.Done()
	if len(c.cfg.Join) == 0 {
		return
	}
	backoff := time.Second
	timer := time.NewTimer(c.nextJoinWait(up, &backoff))
	defer timer.Stop()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.rejoinCh:
			// Let a burst of losses settle into one attempt.
			select {
			case <-c.stopCh:
				return
			case <-time.After(time.Second):
			}
		case <-timer.C:
		}
		if missing := c.missingPeers(); len(missing) > 0 {
			c.stats.rejoins.Add(1)
			if c.joinOnce(missing, c.cfg.TCPTimeout+time.Second, !up) > 0 {
				up = true
			}
			if c.closed() {
				return
			}
		}
		if c.numMembers.Load() > 1 {
			up = true
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(c.nextJoinWait(up, &backoff))
	}
}

func (c *Cluster) nextJoinWait(up bool, backoff *time.Duration) time.Duration {
	if up {
		*backoff = time.Second
		return c.cfg.RejoinInterval
	}
	w := *backoff
	*backoff = min(2**backoff, 30*time.Second)
	return w
}

// missingPeers lists the configured peers that are not alive members.
func (c *Cluster) missingPeers() []string {
	alive := make(map[string]bool)
	for _, n := range c.memberNodes() {
		alive[n.Address()] = true
	}
	self := c.localAddr
	var out []string
	for _, p := range c.cfg.Join {
		p, err := normalizePeer(p)
		if err != nil {
			continue
		}
		host, port, _ := net.SplitHostPort(p)
		ips := []string{host}
		if net.ParseIP(host) == nil {
			ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			addrs, err := net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			if err != nil {
				out = append(out, p) // let memberlist report it
				continue
			}
			ips = addrs
		}
		up := false
		for _, ip := range ips {
			a := net.JoinHostPort(net.ParseIP(ip).String(), port)
			if alive[a] || a == self {
				up = true
				break
			}
		}
		if !up {
			out = append(out, p)
		}
	}
	return out
}
