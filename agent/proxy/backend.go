package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// The backend: where the other agents' proxies reach this node's
// replicas (preface.go has its protocol).

// serveBackend accepts other agents' proxies' connections until Close.
func (p *Proxy) serveBackend() {
	for {
		c, err := p.backend.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("services proxy: backend accept", "err", err)
			}
			return
		}
		if !p.take(&p.backActive, p.cfg.MaxConns) {
			c.Close()
			continue
		}
		if !p.track(c) {
			p.backActive.Add(-1)
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.backActive.Add(-1)
			defer p.untrack(c)
			p.serveOne(c)
		}()
	}
}

// serveOne reads a preface, connects to the replica it names when that
// is a registered service's replica of this node whose listener passes
// the owner check, answers, and copies both ways.
func (p *Proxy) serveOne(c net.Conn) {
	c.SetDeadline(time.Now().Add(min(p.cfg.DialTimeout, defaultPrefaceTimeout)))
	id, err := DecodePreface(byteReader{c})
	if err != nil {
		c.Close()
		return
	}
	up, err := p.dialRegistered(id)
	if err != nil {
		c.Write(answer(err))
		c.Close()
		return
	}
	if _, err := c.Write(answer(nil)); err != nil {
		c.Close()
		up.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if !p.track(up) {
		c.Close()
		return
	}
	defer p.untrack(up)
	pipe(c, up, p.cfg.IdleTimeout)
}

// dialRegistered dials lease id's replica when it is one of this node's
// services with a proxy port: the backend reaches nothing else.
func (p *Proxy) dialRegistered(id string) (net.Conn, error) {
	v := p.deps.View()
	self := v.Local()
	registered := false
	if self != nil {
		for _, l := range self.Leases {
			if l.ID == id && l.IsService() && l.Service.ProxyPort > 0 {
				registered = true
				break
			}
		}
	}
	if !registered {
		return nil, fmt.Errorf("no service of %s with a proxy port holds lease %s", p.cfg.Node, id)
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	return p.deps.DialLocal(ctx, id)
}
