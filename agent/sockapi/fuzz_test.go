package sockapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/agent/sockapi"
)

// FuzzLocalAPI sends arbitrary bodies to every write endpoint of the local
// API. Whatever arrives, the agent answers with JSON, never a 500 from a bad
// body, and never panics.
func FuzzLocalAPI(f *testing.F) {
	seeds := []struct {
		path string
		body string
	}{
		{"/v1/claim", `{"count":1}`},
		{"/v1/claim", `{"gpus":[0,2],"duration":"2h","note":"x","kind":"batch","force":true}`},
		{"/v1/claim", `{"count":1,"run":{"name":"t","command":["true"]}}`},
		{"/v1/claim", `{"count":-3,"duration":"-1h"}`},
		{"/v1/claim", `{"node":"node09","count":1}`},
		{"/v1/claim", `{"count":1,"request_id":"abcdefgh12345678"}`},
		{"/v1/claim", `{"count":1,"note":"\u202eevil\u200b"}`},
		{"/v1/release", `{"ids":["node01-1"]}`},
		{"/v1/release", `{"all":true}`},
		{"/v1/extend", `{"id":"node01-1","duration":"1h"}`},
		{"/v1/adopt", `{"pid":1}`},
		{"/v1/adopt/container", `{"container":"3f2a9c1b7d4e"}`},
		{"/v1/adopt/container", `{"container":"3F2A9C1B7D4E0000000000000000000000000000000000000000000000000000"}`},
		{"/v1/adopt/container", `{"container":"\u001b[2J"}`},
		{"/v1/attach", `{"id":""}`},
		{"/v1/queue/submit", `{"claim":{"count":1,"run":{"name":"a:b","command":["true"]}}}`},
		{"/v1/queue/cancel", `{"id":"node01-q1"}`},
		{"/v1/usage", `{"window":"1h"}`},
		{"/v1/usage/daily", `{"window":"400d"}`},
		{"/v1/claim", `{bad`},
		{"/v1/claim", `{"count":1}{"count":2}`},
		{"/v1/claim", `{"count":1e99}`},
	}
	for _, s := range seeds {
		f.Add(s.path, []byte(s.body))
	}
	n := agenttest.Start(f, agenttest.Options{Sim: "4xH100-80GB", Quiet: true})
	h := sockapi.Handler(n.Agent.Service())
	paths := map[string]bool{"/v1/claim": true, "/v1/release": true, "/v1/extend": true, "/v1/adopt": true, "/v1/adopt/container": true, "/v1/attach": true,
		"/v1/queue/submit": true, "/v1/queue/cancel": true, "/v1/usage": true, "/v1/usage/daily": true}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		if !paths[path] {
			return
		}
		req := sockapi.WithCaller(httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)), os.Getuid())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: answer is not JSON: %q", path, body, rec.Body)
		}
	})
}
