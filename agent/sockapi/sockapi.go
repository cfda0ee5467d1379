// Package sockapi is the local API's front door: HTTP+JSON on a unix
// socket. The kernel names the caller (SO_PEERCRED) when the connection is
// accepted; the service is bound to that caller once, and handlers only
// decode, call it, and encode. Every connection is bounded in time and
// every uid in how many it may hold, so no user can starve the others.
package sockapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/lograte"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// MaxRequestBody bounds what a client may send; real requests are tiny.
const MaxRequestBody = 64 << 10

// Limits bound what one caller can hold open.
type Limits struct {
	// PerUID caps the connections one uid may hold at once (root too);
	// beyond it new connections are closed at once (default 64).
	PerUID int
	// ReadTimeout bounds reading a whole request, body included (default
	// 10 s): a body sent a byte a second is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a reply (default 30 s); a watch stream
	// gets it anew for every board it sends.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request (default
	// 30 s).
	IdleTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.PerUID <= 0 {
		l.PerUID = 64
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = 10 * time.Second
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 30 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 30 * time.Second
	}
	return l
}

// Observer hears how long each answered request took, by endpoint
// ("claim", "release", "queue/submit", ...) and HTTP status: the agent's
// metrics time the front door with it. It is called on the request's
// goroutine once the answer is written, and must not block. The watch
// stream, which lasts as long as its reader wants, is not timed.
type Observer interface {
	ObserveRequest(endpoint string, code int, d time.Duration)
}

// Server serves the local API for one service.
type Server struct {
	svc    *core.Service
	path   string
	limits Limits
	obs    Observer
	log    *slog.Logger

	ln   *capListener
	http *http.Server
	done chan struct{}
}

// Listen opens the socket at path, in a directory that must be this
// process's own (root's, for the system agent) and not writable by anyone
// else, so no user can swap the socket. The socket is mode 0666: anyone may
// connect, the kernel says who they are. A socket another agent answers on
// is never taken over. obs, when not nil, hears every request's duration.
func Listen(path string, svc *core.Service, limits Limits, obs Observer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Dir(path)
	mode := os.FileMode(0o755) // every user must reach the system agent's socket
	if os.Geteuid() != 0 {
		mode = 0o700
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if err := checkOwnDir(dir); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("another dibs agent is already serving %s: stop it first, or use --socket", path)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%s exists and is not a socket: remove it or choose another --socket", path)
	}
	os.Remove(path)
	ul, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Clients refuse a socket below a directory others could swap: so does
	// the agent, before it opens the socket to everyone.
	if _, err := api.CheckSocket(path); err != nil {
		ul.Close()
		return nil, fmt.Errorf("will not serve %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ul.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	s := &Server{svc: svc, path: path, limits: limits.withDefaults(), obs: obs, log: log, done: make(chan struct{})}
	s.ln = &capListener{Listener: ul, perUID: s.limits.PerUID, open: map[int]int{}, log: log, refusals: lograte.New(0, 0, nil)}
	s.http = &http.Server{
		Handler:           s.Routes(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       s.limits.ReadTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peerConn); ok {
				return context.WithValue(ctx, callerKey{}, pc.uid)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("local API stopped", "err", err)
		}
	}()
	return s, nil
}

// checkOwnDir refuses a socket directory someone else could write to.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("socket dir %s is not a directory", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("socket dir %s belongs to uid %d, not to this agent (uid %d): use a directory the agent owns (e.g. /run/dibs)", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("socket dir %s is writable by others (mode %o): make it 0755", dir, fi.Mode().Perm())
	}
	return nil
}

// Path is the socket.
func (s *Server) Path() string { return s.path }

// Close stops serving and removes the socket.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	s.http.Close()
	<-s.done
	os.Remove(s.path)
}

type callerKey struct{}

// bound is the service bound to the connection's caller.
func (s *Server) bound(r *http.Request) (*core.Bound, error) {
	uid, ok := r.Context().Value(callerKey{}).(int)
	if !ok {
		return nil, errors.New("cannot tell who is calling (SO_PEERCRED failed)")
	}
	return s.svc.ForUID(uid), nil
}

// Handler is the API for svc without a socket: tests and fuzzing serve it
// with the caller put in each request by WithCaller.
func Handler(svc *core.Service) http.Handler {
	s := &Server{svc: svc, limits: Limits{}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	return s.Routes()
}

// Routes is the API's handler.
func (s *Server) Routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, endpoint string, h http.HandlerFunc) {
		mux.HandleFunc(method+" /v1/"+endpoint, s.timed(endpoint, h))
	}
	handle("GET", "board", get(s, (*core.Bound).Board))
	handle("GET", "status", get(s, (*core.Bound).Status))
	handle("GET", "queue", get(s, (*core.Bound).Queue))
	mux.HandleFunc("GET /v1/watch", s.handleWatch)
	handle("POST", "claim", post(s, (*core.Bound).Claim))
	handle("POST", "release", post(s, (*core.Bound).Release))
	handle("POST", "extend", post(s, (*core.Bound).Extend))
	handle("POST", "adopt", post(s, (*core.Bound).Adopt))
	handle("POST", "adopt/container", post(s, (*core.Bound).AdoptContainer))
	handle("POST", "queue/submit", post(s, (*core.Bound).Submit))
	handle("POST", "queue/cancel", post(s, func(b *core.Bound, ctx context.Context, r idRequest) (struct{}, error) {
		return struct{}{}, b.Cancel(ctx, r.ID)
	}))
	handle("POST", "queue/entry", post(s, func(b *core.Bound, ctx context.Context, r idRequest) (api.EntryStatus, error) {
		return b.EntryStatus(ctx, r.ID)
	}))
	handle("POST", "leave", post(s, func(b *core.Bound, ctx context.Context, _ struct{}) (api.LeaveResponse, error) {
		return b.Leave(ctx)
	}))
	handle("POST", "attach", post(s, func(b *core.Bound, ctx context.Context, r idRequest) (api.AttachResponse, error) {
		return b.Attach(ctx, r.ID)
	}))
	handle("POST", "usage", post(s, func(b *core.Bound, ctx context.Context, r struct {
		Window string `json:"window"`
	}) (api.UsageReport, error) {
		return b.Usage(ctx, r.Window)
	}))
	handle("POST", "history", post(s, (*core.Bound).History))
	handle("POST", "samples", post(s, func(b *core.Bound, ctx context.Context, r samplesRequest) (api.SamplesReport, error) {
		return b.Samples(ctx, r.Node, r.GPU, r.Since)
	}))
	handle("POST", "usage/daily", post(s, func(b *core.Bound, ctx context.Context, r struct {
		Window string `json:"window"`
	}) (api.DailyUsageReport, error) {
		return b.UsageByDay(ctx, r.Window)
	}))
	mux.HandleFunc("POST /v1/doctor", post(s, (*core.Bound).Doctor))
	mux.HandleFunc("POST /v1/run", post(s, func(b *core.Bound, ctx context.Context, r idRequest) (api.RunRecord, error) { return b.Run(ctx, r.ID) }))
	// Bookings.
	handle("POST", "book", post(s, (*core.Bound).Book))
	handle("GET", "bookings", get(s, (*core.Bound).Bookings))
	handle("POST", "unbook", post(s, func(b *core.Bound, ctx context.Context, r idRequest) (struct{}, error) {
		return struct{}{}, b.Unbook(ctx, r.ID)
	}))
	s.eventRoutes(mux)
	return mux
}

// samplesRequest names one GPU whose samples are asked for.
type samplesRequest struct {
	Node  string    `json:"node,omitempty"`
	GPU   int       `json:"gpu"`
	Since time.Time `json:"since,omitzero"`
}

// timed reports h's duration and status to the observer, if there is one.
func (s *Server) timed(endpoint string, h http.HandlerFunc) http.HandlerFunc {
	if s.obs == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h(rec, r)
		s.obs.ObserveRequest(endpoint, rec.code, time.Since(start))
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// WithCaller is a request as if uid had connected: for tests and fuzzing
// of Routes without a socket.
func WithCaller(r *http.Request, uid int) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, uid))
}

type idRequest struct {
	ID string `json:"id"`
}

// get serves a read.
func get[Resp any](s *Server, f func(*core.Bound, context.Context) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := s.bound(r)
		if err != nil {
			writeError(w, http.StatusForbidden, "", err.Error())
			return
		}
		resp, err := f(b, r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		s.writeJSON(w, http.StatusOK, resp)
	}
}

// post decodes a JSON body strictly, calls the service, encodes the answer.
func post[Req, Resp any](s *Server, f func(*core.Bound, context.Context, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := s.bound(r)
		if err != nil {
			writeError(w, http.StatusForbidden, "", err.Error())
			return
		}
		var req Req
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, refusal.CodeInvalid, "malformed request body: "+words.OneLine(err.Error()))
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, refusal.CodeInvalid, "malformed request body: more than one JSON value")
			return
		}
		resp, err := f(b, r.Context(), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		s.writeJSON(w, http.StatusOK, resp)
	}
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
	writeJSON(w, status, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code refusal.Code, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: msg, Code: code})
}

// writeErr maps a refusal's code to an HTTP status; anything else is a 500
// with its message, so the person still reads what went wrong.
func writeErr(w http.ResponseWriter, err error) {
	err = node.ExplainDiskFailure(err)
	status := http.StatusInternalServerError
	code := refusal.CodeOf(err)
	switch code {
	case refusal.CodeInvalid:
		status = http.StatusBadRequest
	case refusal.CodeConflict:
		status = http.StatusConflict
	case refusal.CodeNotFound:
		status = http.StatusNotFound
	case refusal.CodeForbidden:
		status = http.StatusForbidden
	case refusal.CodeUnavailable:
		status = http.StatusServiceUnavailable
	case refusal.CodeNoAnswer:
		status = http.StatusGatewayTimeout
	}
	writeError(w, status, code, words.OneLine(err.Error()))
}

// handleWatch streams the board as JSON lines: now, then after every
// change. Each board gets its own write deadline, so a reader that stops
// reading is cut off, and one that keeps reading stays.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	b, err := s.bound(r)
	if err != nil {
		writeError(w, http.StatusForbidden, "", err.Error())
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	ctx := r.Context()
	boards, stop := b.Watch(ctx)
	defer stop()
	for board := range boards {
		if s.sendLine(rc, func() error { return enc.Encode(board) }) != nil {
			return
		}
	}
}

// sendLine writes one line of a stream (write) under its own write
// deadline and flushes it, so the client sees it at once and a reader that
// stops reading is cut off. An error means the client is gone.
func (s *Server) sendLine(rc *http.ResponseController, write func() error) error {
	rc.SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
	if err := write(); err != nil {
		return err
	}
	return rc.Flush()
}

// capListener reads each connection's peer credentials at accept and
// refuses a uid over its cap. Its refusals log one line per uid every few
// seconds, with the count of those held back: a user reconnecting in a
// loop cannot flood the agent's log.
type capListener struct {
	net.Listener
	perUID   int
	log      *slog.Logger
	refusals *lograte.Limiter

	mu   sync.Mutex
	open map[int]int
}

type peerConn struct {
	net.Conn
	uid  int
	once sync.Once
	done func()
}

func (c *peerConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// Accept implements net.Listener.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err != nil {
			l.refusals.Log(l.log, slog.LevelWarn, "", "local API: cannot read the caller's credentials; closing", "err", err)
			c.Close()
			continue
		}
		l.mu.Lock()
		if open := l.open[uid]; open >= l.perUID {
			l.mu.Unlock()
			l.refusals.Log(l.log, slog.LevelWarn, strconv.Itoa(uid), "local API: refusing connections over the per-user cap", "uid", uid, "open", open)
			c.Close()
			continue
		}
		l.open[uid]++
		l.mu.Unlock()
		return &peerConn{Conn: c, uid: uid, done: func() {
			l.mu.Lock()
			l.open[uid]--
			if l.open[uid] <= 0 {
				delete(l.open, uid)
			}
			l.mu.Unlock()
		}}, nil
	}
}

// peerUID reads the connecting process's uid from the kernel.
func peerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Uid), nil
}
