package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// ErrUnreachable: the request could not be delivered, so it was not carried
// out.
var ErrUnreachable = errors.New("node unreachable")

// pendingRequest is a Request waiting for its response.
type pendingRequest struct {
	node string
	ch   chan *responseMsg
}

// pending are the Requests this agent sent that wait for their responses,
// by correlation id.
type pending struct {
	nextID atomic.Uint64
	mu     sync.Mutex
	reqs   map[uint64]*pendingRequest
}

// add waits for the response of node to a new request: its id, and where
// the response will come.
func (p *pending) add(node string) (uint64, <-chan *responseMsg) {
	id := p.nextID.Add(1)
	if id == 0 {
		id = p.nextID.Add(1)
	}
	ch := make(chan *responseMsg, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reqs == nil {
		p.reqs = make(map[uint64]*pendingRequest)
	}
	p.reqs[id] = &pendingRequest{node: node, ch: ch}
	return id, ch
}

// drop stops waiting for request id.
func (p *pending) drop(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.reqs, id)
}

// take is the request waiting for m (nil: none, or m is not from the node
// it was sent to), no longer waiting.
func (p *pending) take(m *responseMsg) *pendingRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.reqs[m.ID]
	if r == nil || r.node != m.From {
		return nil
	}
	delete(p.reqs, m.ID)
	return r
}

// Request asks the agent of node to act and waits for its answer. It goes
// over memberlist's reliable channel (a TCP stream, encrypted with the
// cluster key) with a correlation id; the answer comes back the same way.
// It waits until ctx is done or RequestTimeout passes, whichever is first,
// and is never retried here: whether a request may be sent again is its
// sender's business (a claim carries a request id that makes it safe).
//
// Errors: ErrUnknownNode and ErrNodeDown at once, without sending;
// ErrUnreachable when the request could not be delivered (not carried
// out); ErrNoResponse or ctx's error when it was sent but no answer came
// (perhaps carried out: look at the node's state) — also when this Cluster
// shuts down while the answer is awaited (then wrapping ErrClosed too);
// ErrClosed alone when it was shut down before sending. A refusal by
// the other agent is a Response with ErrCode set, not an error. A request
// to this node itself is handed to HandleRequest directly.
func (c *Cluster) Request(ctx context.Context, node string, req Request) (Response, error) {
	if c.closed() {
		return Response{}, fmt.Errorf("request %s on %s: %w", req.Op, node, ErrClosed)
	}
	if !validToken(req.Op, maxShortString) {
		return Response{}, fmt.Errorf("request on %s: bad op %q", node, trunc(req.Op))
	}
	if node == c.cfg.NodeName {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
			defer cancel()
		}
		return c.d.HandleRequest(ctx, node, req), nil
	}
	c.stats.remoteRequests.Add(1)
	resp, err := c.request(ctx, node, req)
	if err != nil {
		c.stats.remoteErrs.Add(1)
		return Response{}, fmt.Errorf("request %s on %s: %w", req.Op, node, err)
	}
	return resp, nil
}

func (c *Cluster) request(ctx context.Context, node string, req Request) (Response, error) {
	target, err := c.target(node)
	if err != nil {
		return Response{}, err
	}
	ml := c.list()
	if ml == nil {
		return Response{}, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	deadline := time.Now().Add(timeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	id, ch := c.pending.add(node)
	defer c.pending.drop(id)
	msg, err := c.codec.encode(msgRequest, &requestMsg{
		ID: id, From: c.cfg.NodeName, Reply: c.localAddr,
		Op: req.Op, Body: req.Body,
		TimeoutMS: max(1, time.Until(deadline).Milliseconds()),
	})
	if err != nil {
		return Response{}, err
	}

	sent := make(chan error, 1)
	go func() { sent <- ml.SendReliable(&target, msg) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case r := <-ch:
			return Response{Body: r.Body, ErrCode: r.ErrCode, ErrMsg: r.ErrMsg}, nil
		case err := <-sent:
			if err != nil {
				return Response{}, fmt.Errorf("%w: %v", ErrUnreachable, err)
			}
			c.stats.messagesOut.Add(1)
			sent = nil
		case <-timer.C:
			if ctxDeadline {
				return Response{}, fmt.Errorf("%w: waiting for the response: %w", ErrNoResponse, context.DeadlineExceeded)
			}
			return Response{}, fmt.Errorf("%w within %v: it may or may not have been carried out; check the node's state before retrying",
				ErrNoResponse, timeout.Round(time.Millisecond))
		case <-ctx.Done():
			return Response{}, fmt.Errorf("%w: waiting for the response: %w", ErrNoResponse, ctx.Err())
		case <-c.stopCh:
			// The request may have reached the node and been carried out;
			// only its answer is lost with this side's shutdown, so it is
			// not a refusal.
			return Response{}, fmt.Errorf("%w: this node's gossip shut down while waiting for the response, so the request may or may not have been carried out: %w", ErrNoResponse, ErrClosed)
		}
	}
}

// deliver hands a response to the Request waiting for it.
func (c *Cluster) deliver(m *responseMsg) {
	p := c.pending.take(m)
	if p == nil {
		c.stats.dropped.Add(1) // late (timed out) or not ours
		return
	}
	p.ch <- m // buffered, and deleted from reqs: sent at most once
}

// serve runs HandleRequest on a worker goroutine, never on memberlist's,
// and sends the response back to the requester.
func (c *Cluster) serve(m *requestMsg) {
	select {
	case c.workers <- struct{}{}:
	default:
		c.stats.dropped.Add(1)
		c.dropped("request", m.From, "gossip: dropped request %s from %s: %d requests already running", m.Op, m.From, c.cfg.MaxConcurrentRequests)
		return
	}
	if !c.goTracked(func() {
		defer func() { <-c.workers }()
		c.answer(m)
	}) {
		<-c.workers
	}
}

func (c *Cluster) answer(m *requestMsg) {
	c.stats.requestsServed.Add(1)
	timeout := time.Duration(m.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > 10*c.cfg.RequestTimeout {
		timeout = c.cfg.RequestTimeout
	}
	// Leave the answer time to travel before the requester gives up.
	timeout -= min(100*time.Millisecond, timeout/10)
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	resp := c.handle(ctx, m)
	cancel()
	out, err := c.codec.encode(msgResponse, &responseMsg{ID: m.ID, From: c.cfg.NodeName, Body: resp.Body, ErrCode: resp.ErrCode, ErrMsg: resp.ErrMsg})
	if err != nil {
		c.cfg.Logf("gossip: answer %s from %s: %v", m.Op, m.From, err)
		out, err = c.codec.encode(msgResponse, &responseMsg{ID: m.ID, From: c.cfg.NodeName, ErrCode: refusal.CodeUnavailable,
			ErrMsg: fmt.Sprintf("%s could not send its answer: %v", c.cfg.NodeName, err)})
		if err != nil {
			return
		}
	}
	to, err := replyNode(m)
	if err != nil {
		c.stats.dropped.Add(1)
		c.cfg.Logf("gossip: answer %s from %s: %v", m.Op, m.From, err)
		return
	}
	ml := c.list()
	if ml == nil {
		return
	}
	if err := ml.SendReliable(&to, out); err != nil {
		c.cfg.Logf("gossip: answer %s from %s: %v", m.Op, m.From, err)
		return
	}
	c.stats.messagesOut.Add(1)
}

// handle calls HandleRequest, turning a panic into a refusal so one bad
// request cannot take the agent down.
func (c *Cluster) handle(ctx context.Context, m *requestMsg) (resp Response) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logf("gossip: request %s from %s panicked: %v", m.Op, m.From, p)
			resp = Response{ErrCode: refusal.CodeUnavailable, ErrMsg: fmt.Sprintf("internal error on %s", c.cfg.NodeName)}
		}
	}()
	return c.d.HandleRequest(ctx, m.From, Request{Op: m.Op, Body: m.Body})
}

// replyNode is where the response to m goes.
func replyNode(m *requestMsg) (memberlist.Node, error) {
	host, port, err := net.SplitHostPort(m.Reply)
	if err != nil {
		return memberlist.Node{}, fmt.Errorf("bad reply address %q: %w", trunc(m.Reply), err)
	}
	ip := net.ParseIP(host)
	p, err := strconv.ParseUint(port, 10, 16)
	if ip == nil || err != nil || p == 0 {
		return memberlist.Node{}, fmt.Errorf("bad reply address %q", trunc(m.Reply))
	}
	return memberlist.Node{Name: m.From, Addr: ip, Port: uint16(p)}, nil
}

// goTracked runs f on a goroutine Shutdown waits for, unless Shutdown has
// begun (then it returns false and does not run f).
func (c *Cluster) goTracked(f func()) bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.stopping {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}
