package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// maxRequestBody bounds what a client may send; real requests are tiny.
const maxRequestBody = 64 << 10

type peerKey struct{}

type peer struct {
	uid int
	pid int
	err error
}

// listen opens the unix socket (mode 0666: anyone may connect; the kernel
// says who they are). A socket another agent answers on is never stolen.
func (a *Agent) listen() error {
	path := a.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("another dibs agent is already serving %s: stop it first, or use --socket", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	a.ln = ln
	a.httpSrv = &http.Server{
		Handler:           a.routes(),
		ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerOf(c))
		},
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logf("local API: %v", err)
		}
	}()
	return nil
}

func (a *Agent) stopListening() {
	if a.httpSrv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.httpSrv.Shutdown(ctx)
	a.httpSrv = nil
	os.Remove(a.cfg.Socket)
}

// peerOf reads the connecting process's credentials from the kernel.
func peerOf(c net.Conn) peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{err: errors.New("not a unix socket")}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{err: err}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{err: err}
	}
	if cerr != nil {
		return peer{err: cerr}
	}
	return peer{uid: int(cred.Uid), pid: int(cred.Pid)}
}

// CallerFor builds the identity of a uid: its name from the account
// database, admin if it is root or in the admin group.
func (a *Agent) CallerFor(uid int) lease.Caller {
	c := lease.Caller{UID: uid, User: fmt.Sprintf("uid%d", uid)}
	u, err := a.users.lookup(uid)
	if err == nil {
		c.User = u.Name
		c.Admin = uid == 0 || a.deps.Users.InGroup(u, a.cfg.Policy.AdminGroup)
	}
	return c
}

func (a *Agent) caller(r *http.Request) (lease.Caller, error) {
	p, ok := r.Context().Value(peerKey{}).(peer)
	if !ok || p.err != nil {
		return lease.Caller{}, errors.New("cannot tell who is calling (SO_PEERCRED failed)")
	}
	return a.CallerFor(p.uid), nil
}

// mayWrite refuses changes from other users when the agent cannot act for
// them (it does not run as root).
func (a *Agent) mayWrite(c lease.Caller) error {
	if euid := os.Geteuid(); euid != 0 && euid != c.UID {
		return &lease.Error{Code: lease.CodeForbidden, Msg: fmt.Sprintf("this agent runs as uid %d, not as root, and serves only that user: ask whoever installs dibs to run it as root", euid)}
	}
	return nil
}

func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/board", a.handleBoard)
	mux.HandleFunc("GET /v1/watch", a.handleWatch)
	mux.HandleFunc("GET /v1/status", a.handleStatus)
	mux.HandleFunc("POST /v1/claim", handle(a, true, a.Claim))
	mux.HandleFunc("POST /v1/release", handle(a, true, a.Release))
	mux.HandleFunc("POST /v1/extend", handle(a, true, a.Extend))
	mux.HandleFunc("POST /v1/adopt", handle(a, true, a.Adopt))
	mux.HandleFunc("POST /v1/queue/submit", handle(a, true, a.Submit))
	mux.HandleFunc("GET /v1/queue", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.caller(r); err != nil {
			writeError(w, http.StatusForbidden, "", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, a.Queue())
	})
	mux.HandleFunc("POST /v1/queue/cancel", handle(a, true, func(ctx context.Context, c lease.Caller, req struct {
		ID string `json:"id"`
	}) (struct{}, error) {
		return struct{}{}, a.Cancel(ctx, c, req.ID)
	}))
	mux.HandleFunc("POST /v1/usage", handle(a, false, func(ctx context.Context, c lease.Caller, req struct {
		Window string `json:"window"`
	}) (api.UsageReport, error) {
		w := 7 * 24 * time.Hour
		if req.Window != "" {
			d, err := lease.ParseDuration(req.Window)
			if err != nil {
				return api.UsageReport{}, err
			}
			w = d
		}
		return a.Usage(ctx, c, w)
	}))
	mux.HandleFunc("POST /v1/attach", handle(a, false, func(ctx context.Context, c lease.Caller, req struct {
		ID string `json:"id"`
	}) (api.AttachResponse, error) {
		return a.Attach(ctx, c, req.ID)
	}))
	return mux
}

// handle decodes a JSON body strictly, calls the domain, encodes the answer.
func handle[Req, Resp any](a *Agent, write bool, f func(context.Context, lease.Caller, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := a.caller(r)
		if err != nil {
			writeError(w, http.StatusForbidden, "", err.Error())
			return
		}
		if write {
			if err := a.mayWrite(c); err != nil {
				writeErr(w, err)
				return
			}
		}
		var req Req
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, lease.CodeInvalid, "malformed request body: "+err.Error())
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, lease.CodeInvalid, "malformed request body: more than one JSON value")
			return
		}
		resp, err := f(r.Context(), c, req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code lease.Code, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: msg, Code: code})
}

// writeErr maps a refusal's code to an HTTP status; anything else is a 500
// with its message, so the person still reads what went wrong.
func writeErr(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	code := lease.CodeOf(err)
	switch code {
	case lease.CodeInvalid:
		status = http.StatusBadRequest
	case lease.CodeConflict:
		status = http.StatusConflict
	case lease.CodeNotFound:
		status = http.StatusNotFound
	case lease.CodeForbidden:
		status = http.StatusForbidden
	case lease.CodeUnavailable:
		status = http.StatusServiceUnavailable
	}
	writeError(w, status, code, oneLine(err.Error()))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func (a *Agent) handleBoard(w http.ResponseWriter, r *http.Request) {
	c, err := a.caller(r)
	if err != nil {
		writeError(w, http.StatusForbidden, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, a.Board(c))
}

// handleWatch streams the board as JSON lines: now, then after every change.
// Bursts of changes are coalesced so a slow reader is never sent stale boards.
func (a *Agent) handleWatch(w http.ResponseWriter, r *http.Request) {
	c, err := a.caller(r)
	if err != nil {
		writeError(w, http.StatusForbidden, "", err.Error())
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "", "streaming unsupported")
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	ctx := r.Context()
	for {
		ch := a.changes()
		if err := enc.Encode(a.Board(c)); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-a.ctx.Done():
			return
		case <-ch:
		}
	}
}

func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	if _, err := a.caller(r); err != nil {
		writeError(w, http.StatusForbidden, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, a.Status())
}

// Status reports the agent's view of itself and the cluster.
func (a *Agent) Status() api.Status {
	a.mu.Lock()
	s := api.Status{
		Node: a.cfg.NodeName, Version: Version, StartedAt: a.startedAt.Round(0),
		Backend: string(a.snap.Host.Backend), DataDir: a.cfg.DataDir, Socket: a.cfg.Socket,
		Leases: a.table.Len(), LastToken: a.table.LastToken(),
	}
	a.mu.Unlock()
	s.Members, s.Gossip = a.cluster.status(a.now())
	return s
}
