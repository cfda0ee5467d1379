package sockapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/dibs-gpu/dibs/agent/core"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// eventRoutes are the routes of issue 14: events, notifications, job logs.
func (s *Server) eventRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/events", post(s, (*core.Bound).Events))
	mux.HandleFunc("POST /v1/events/follow", s.handleFollowEvents)
	mux.HandleFunc("POST /v1/notify", post(s, (*core.Bound).Notify))
	mux.HandleFunc("POST /v1/logs/find", post(s, func(b *core.Bound, ctx context.Context, r idRequest) ([]api.LogSource, error) {
		return b.LogSources(ctx, r.ID)
	}))
	mux.HandleFunc("POST /v1/logs/read", post(s, (*core.Bound).ReadLog))
}

// handleFollowEvents streams events as JSON lines: those asked for, then
// each new one. Every event gets its own write deadline, as the board
// stream's boards do; a stream with nothing to say for a while sends an
// empty line now and then, so a reader that went away is noticed.
func (s *Server) handleFollowEvents(w http.ResponseWriter, r *http.Request) {
	b, err := s.bound(r)
	if err != nil {
		writeError(w, http.StatusForbidden, "", err.Error())
		return
	}
	var req api.EventsRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, refusal.CodeInvalid, "malformed request body: "+words.OneLine(err.Error()))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	evs, _, err := b.FollowEvents(ctx, req)
	if err != nil {
		writeErr(w, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	enc := json.NewEncoder(w)
	keepAlive := time.NewTicker(30 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case e, ok := <-evs:
			if !ok {
				return
			}
			if s.sendLine(rc, func() error { return enc.Encode(e) }) != nil {
				return
			}
		case <-keepAlive.C:
			if s.sendLine(rc, func() error { _, err := w.Write([]byte("\n")); return err }) != nil {
				return
			}
		}
	}
}
