package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// MaxBody bounds every request and response body on the socket; a board of
// 32 nodes × 8 GPUs is well under it.
const MaxBody = 8 << 20

// Error is a refusal or failure reported by the agent.
type Error struct {
	Status int
	Code   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Client talks to one agent over its unix socket. It is safe for concurrent use.
type Client struct {
	socket  string
	noRetry bool
}

// WithoutRetry returns a client that never sends a request twice, for
// tests that must see every lost answer.
func (c *Client) WithoutRetry() *Client {
	cp := *c
	cp.noRetry = true
	return &cp
}

// NewClient returns a client for the agent at socket. Nothing is dialled yet.
// Every connection (each request and the /v1/watch stream) is made by
// dialAgent, which sends nothing to an impostor (transport.go).
func NewClient(socket string) *Client {
	return &Client{socket: socket}
}

// dialAgent connects to the agent at socket only if it is the agent: the
// socket must pass CheckSocket (its directory private to root or the caller),
// and the process serving it must run as root (the system agent) or as the
// caller (a personal agent). Both are checked before a byte is written, so an
// impostor never sees a request, a command line or a token.
func dialAgent(ctx context.Context, socket string) (net.Conn, error) {
	real, err := CheckSocket(socket)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", real)
	if err != nil {
		return nil, err
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("dial %s: not a unix socket connection", socket)
	}
	uid, err := peerUID(uc)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if me := os.Geteuid(); uid != 0 && uid != me {
		conn.Close()
		return nil, &UntrustedError{Socket: socket, Reason: fmt.Sprintf("it is served by %s, not by root or you, so it could be posing as the dibs agent (nothing was sent); %s", describeUID(uid), useInstead)}
	}
	return conn, nil
}

// Socket is the path this client dials.
func (c *Client) Socket() string { return c.socket }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = b
	}
	resp, err := c.roundTrip(ctx, method, path, body)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.close()
	return decodeResponse(resp, out)
}

func decodeResponse(resp *response, out any) error {
	lr := io.LimitReader(resp.body, MaxBody+1)
	if resp.status/100 != 2 {
		var eb ErrorBody
		b, _ := io.ReadAll(lr)
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("agent answered %s: %s", resp.statusText, strings.TrimSpace(string(b)))
		}
		return &Error{Status: resp.status, Code: string(eb.Code), Msg: eb.Error}
	}
	if out == nil {
		return nil
	}
	b, err := io.ReadAll(lr)
	if err != nil {
		return fmt.Errorf("read agent answer: %w", err)
	}
	if len(b) > MaxBody {
		return fmt.Errorf("agent answer is over %d bytes", MaxBody)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode agent answer: %w", err)
	}
	return nil
}

// dialError turns "no such file" into how to start an agent, and passes a
// refusal on as the one line it is.
func (c *Client) dialError(err error) error {
	var untrusted *UntrustedError
	switch {
	case errors.As(err, &untrusted):
		return untrusted
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("no dibs agent at %s: start one with `dibs agent --sim 4xH100-80GB` (or `sudo systemctl start dibs`), or point --socket / DIBS_SOCKET at a running one", c.socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("the dibs agent at %s is not running (stale socket): start it with `dibs agent`", c.socket)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("permission denied reaching %s: the agent's socket should be mode 0666 in a directory everyone may enter", c.socket)
	}
	return fmt.Errorf("talk to agent at %s: %w", c.socket, err)
}

// Board returns the whole cluster as the agent sees it.
func (c *Client) Board(ctx context.Context) (Board, error) {
	var b Board
	err := c.do(ctx, "GET", "/v1/board", nil, &b)
	return b, err
}

// Claim asks for GPUs (and, with req.Run, a session on them).
//
// A claim is idempotent: it carries a request id (one is made when req has
// none), and when the answer is lost — the connection broke, the agent
// restarted — it is sent again with the same id for a while, so the person
// gets the lease that was granted instead of none or two.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (ClaimResponse, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	var r ClaimResponse
	err := c.retry(ctx, func() error { return c.do(ctx, "POST", "/v1/claim", req, &r) })
	return r, err
}

// NewRequestID makes a random id for an idempotent request.
func NewRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RetryFor is how long an idempotent request is retried while its answer is
// lost (the agent restarting takes well under a second).
const RetryFor = 15 * time.Second

// retry runs f again while it fails without an answer from the agent,
// backing off, for at most RetryFor (or until ctx ends). Refusals and
// untrusted sockets are final.
func (c *Client) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(RetryFor)
	wait := 50 * time.Millisecond
	for {
		err := f()
		var ae *Error
		var ue *UntrustedError
		if err == nil || errors.As(err, &ae) || errors.As(err, &ue) || ctx.Err() != nil || time.Now().After(deadline) || c.noRetry {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Release ends leases.
func (c *Client) Release(ctx context.Context, req ReleaseRequest) (ReleaseResponse, error) {
	var r ReleaseResponse
	err := c.do(ctx, "POST", "/v1/release", req, &r)
	return r, err
}

// Extend moves a lease's end.
func (c *Client) Extend(ctx context.Context, req ExtendRequest) (ClaimResponse, error) {
	var r ClaimResponse
	err := c.do(ctx, "POST", "/v1/extend", req, &r)
	return r, err
}

// Adopt takes a running process into a lease.
func (c *Client) Adopt(ctx context.Context, req AdoptRequest) (ClaimResponse, error) {
	var r ClaimResponse
	err := c.do(ctx, "POST", "/v1/adopt", req, &r)
	return r, err
}

// AdoptContainer records a container on the caller's leased GPUs as theirs.
func (c *Client) AdoptContainer(ctx context.Context, req AdoptContainerRequest) (AdoptContainerResponse, error) {
	var r AdoptContainerResponse
	err := c.do(ctx, "POST", "/v1/adopt/container", req, &r)
	return r, err
}

// Attach says how to attach to a lease's session; an empty id means the
// caller's most recent lease with a session. The command it returns has
// passed CheckAttachCommand, so a caller may run it.
func (c *Client) Attach(ctx context.Context, id string) (AttachResponse, error) {
	var r AttachResponse
	if err := c.do(ctx, "POST", "/v1/attach", map[string]string{"id": id}, &r); err != nil {
		return r, err
	}
	if err := CheckAttachCommand(r.Command); err != nil {
		return AttachResponse{}, err
	}
	return r, nil
}

// Status returns the agent's view of itself and the cluster.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.do(ctx, "GET", "/v1/status", nil, &s)
	return s, err
}

// Watch streams the board: the current one at once, then a new one after each
// change anywhere in the cluster. The channel closes when ctx ends or the
// stream breaks; the error func then says why (nil after ctx ended).
func (c *Client) Watch(ctx context.Context) (<-chan Board, func() error) {
	return follow[Board](ctx, c, stream{method: "GET", path: "/v1/watch", buf: 1, latest: true, maxLine: MaxBody, what: "board"})
}

// Submit queues a request and returns at once with its id.
//
// Like Claim, it is idempotent: a lost answer is retried with the same
// request id, and the agent returns the entry it queued the first time.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (Submitted, error) {
	if req.Claim.RequestID == "" {
		req.Claim.RequestID = NewRequestID()
	}
	var r Submitted
	err := c.retry(ctx, func() error { return c.do(ctx, "POST", "/v1/queue/submit", req, &r) })
	return r, err
}

// Queue lists every waiting request in the cluster.
func (c *Client) Queue(ctx context.Context) (Queue, error) {
	var q Queue
	err := c.do(ctx, "GET", "/v1/queue", nil, &q)
	return q, err
}

// Cancel withdraws a queued request.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/queue/cancel", map[string]string{"id": id}, &struct{}{})
}

// EntryStatus reports where a request queued at this node stands, or how
// it ended.
func (c *Client) EntryStatus(ctx context.Context, id string) (EntryStatus, error) {
	var s EntryStatus
	err := c.do(ctx, "POST", "/v1/queue/entry", map[string]string{"id": id}, &s)
	return s, err
}

// Leave takes the agent's node out of the cluster for good; the agent then
// stops (root or an admin only).
func (c *Client) Leave(ctx context.Context) (LeaveResponse, error) {
	var r LeaveResponse
	err := c.do(ctx, "POST", "/v1/leave", struct{}{}, &r)
	return r, err
}

// History lists the ended runs and leases of every node that r's filter
// matches (`dibs history`).
func (c *Client) History(ctx context.Context, r HistoryRequest) (HistoryReport, error) {
	var h HistoryReport
	err := c.do(ctx, "POST", "/v1/history", r, &h)
	return h, err
}

// Samples is GPU gpu's recent readings on node (the agent's own when
// empty) since then, within the node's window.
func (c *Client) Samples(ctx context.Context, node string, gpu int, since time.Time) (SamplesReport, error) {
	var s SamplesReport
	err := c.do(ctx, "POST", "/v1/samples", struct {
		Node  string    `json:"node,omitempty"`
		GPU   int       `json:"gpu"`
		Since time.Time `json:"since,omitzero"`
	}{node, gpu, since}, &s)
	return s, err
}

// Usage reports GPU-hours per user since window ago, and fair-share factors.
func (c *Client) Usage(ctx context.Context, window string) (UsageReport, error) {
	var u UsageReport
	err := c.do(ctx, "POST", "/v1/usage", map[string]string{"window": window}, &u)
	return u, err
}
