package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
)

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		status   int
		body     string
		err      string // substring of the head's error
		bodyErr  string // substring of the body's error
	}{
		{name: "content length", in: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{}\n\nextra", status: 200, body: "{}\n\n"},
		{name: "chunked with extension and trailer", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n", status: 200, body: "abc0123456789abcdef"},
		{name: "until the connection closes", in: "HTTP/1.0 200 OK\r\n\r\nall of it", status: 200, body: "all of it"},
		{name: "bare LF lines", in: "HTTP/1.1 404 Not Found\nContent-Length: 2\n\nno", status: 404, body: "no"},
		{name: "informational answer skipped", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", status: 201, body: "x"},
		{name: "no content", in: "HTTP/1.1 204 No Content\r\n\r\n", status: 204, body: ""},
		{name: "short body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", status: 200, body: "abc", bodyErr: "unexpected EOF"},
		{name: "chunked cut short", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", status: 200, body: "ab", bodyErr: "unexpected EOF"},
		{name: "chunk without CRLF", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n", status: 200, body: "ab", bodyErr: "not ended by CRLF"},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, bodyErr: "chunk size"},
		{name: "negative chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", status: 200, bodyErr: "chunk size"},
		{name: "huge chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", status: 200, bodyErr: "chunk size"},
		{name: "not HTTP", in: "SSH-2.0-OpenSSH\r\n\r\n", err: "status line"},
		{name: "bad status code", in: "HTTP/1.1 2000 OK\r\n\r\n", err: "status line"},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", err: "header line"},
		{name: "bad content length", in: "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", err: "Content-Length"},
		{name: "two content lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", err: "Content-Length"},
		{name: "other transfer encoding", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "Transfer-Encoding"},
		{name: "head cut short", in: "HTTP/1.1 200 OK\r\nContent-Le", err: "unexpected EOF"},
		{name: "endless header", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeader) + "\r\n\r\n", err: "header over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := readResponse(bufio.NewReaderSize(strings.NewReader(tc.in), 64))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("readResponse: got error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("readResponse: %v", err)
			}
			if r.status != tc.status {
				t.Errorf("status: got %d, want %d", r.status, tc.status)
			}
			b, err := io.ReadAll(r.body)
			if string(b) != tc.body {
				t.Errorf("body: got %q, want %q", b, tc.body)
			}
			if (tc.bodyErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.bodyErr)) {
				t.Errorf("body error: got %v, want one with %q", err, tc.bodyErr)
			}
		})
	}
}

// FuzzReadResponse feeds the answer reader arbitrary bytes: it must never
// panic, and never return more body than it was given.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"HTTP/1.0 500 Internal Server Error\r\n\r\n{\"error\":\"x\"}",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 99999999999999999999\n\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := readResponse(bufio.NewReaderSize(strings.NewReader(string(in)), 16))
		if err != nil {
			return
		}
		if r.status < 200 || r.status > 999 {
			t.Fatalf("status %d accepted", r.status)
		}
		b, _ := io.ReadAll(io.LimitReader(r.body, int64(len(in))+1))
		if len(b) > len(in) {
			t.Fatalf("a %d-byte answer gave a %d-byte body", len(in), len(b))
		}
	})
}

// privateSocket is a socket path in a directory only this user may write,
// as dialAgent demands.
func privateSocket(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "dibs.sock")
}

// serveHTTP runs a real net/http server (what the agent runs) on a private
// socket and returns a client for it.
func serveHTTP(t *testing.T, h http.Handler) *Client {
	t.Helper()
	sock := privateSocket(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return NewClient(sock).WithoutRetry()
}

// TestClientAgainstNetHTTP holds the hand-written client to what the
// agent's net/http server sends: small answers with a length, large ones
// chunked, errors with their JSON body, and the request as the server
// reads it.
func TestClientAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("x", 3<<20) // past net/http's buffer: chunked
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		var in map[string]string
		if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, "bad request", 400)
			return
		}
		json.NewEncoder(w).Encode(UsageReport{Missing: []string{in["window"]}})
	})
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Status{Node: big})
	})
	mux.HandleFunc("/v1/queue", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(409)
		json.NewEncoder(w).Encode(ErrorBody{Error: "the queue is paused", Code: refusal.Code("paused")})
	})
	mux.HandleFunc("/v1/board", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "teapot", 418)
	})
	cl := serveHTTP(t, mux)
	ctx := context.Background()

	u, err := cl.Usage(ctx, "7d")
	if err != nil || len(u.Missing) != 1 || u.Missing[0] != "7d" {
		t.Fatalf("Usage: got %+v, %v; want the window echoed", u, err)
	}
	s, err := cl.Status(ctx)
	if err != nil || s.Node != big {
		t.Fatalf("Status (a chunked 3 MiB answer): got %d bytes, %v", len(s.Node), err)
	}
	_, err = cl.Queue(ctx)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "paused" || ae.Msg != "the queue is paused" {
		t.Fatalf("Queue: got %#v, want the agent's 409 refusal", err)
	}
	_, err = cl.Board(ctx)
	if !errors.As(err, &ae) || ae.Status != 418 || ae.Msg != "agent answered 418 I'm a teapot: teapot" {
		t.Fatalf("Board: got %v, want the status and the plain body", err)
	}
}

// TestClientOverlongAnswer: an answer past MaxBody is refused, not read
// into memory without end.
func TestClientOverlongAnswer(t *testing.T) {
	cl := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"node":"`))
		chunk := []byte(strings.Repeat("y", 1<<20))
		for i := 0; i <= MaxBody>>20; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Write([]byte(`"}`))
	}))
	_, err := cl.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("Status: got %v, want the answer refused as over %d bytes", err, MaxBody)
	}
}

// TestWatchStreamsAndStops: the board stream delivers each board as it is
// flushed, and ending the context ends it at once with no error.
func TestWatchStreamsAndStops(t *testing.T) {
	release := make(chan struct{})
	cl := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 2 {
			json.NewEncoder(w).Encode(Board{GeneratedAt: time.Unix(int64(i+1), 0).UTC()})
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	ch, errf := cl.Watch(ctx)
	for want := int64(1); want <= 2; want++ {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatalf("stream closed early: %v", errf())
			}
			// Only the newest is kept when the reader is behind.
			if got := b.GeneratedAt.Unix(); got != want && got != 2 {
				t.Fatalf("board %d: got generated %d", want, got)
			}
			if b.GeneratedAt.Unix() == 2 {
				want = 3
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no board within 5 s")
		}
	}
	start := time.Now()
	cancel()
	for range ch {
	}
	if err := errf(); err != nil {
		t.Fatalf("after cancel: got %v, want nil", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the stream took %v to end after cancel", d)
	}
}

// TestRequestCancelled: a request whose context ends while the agent
// thinks returns the context's error promptly.
func TestRequestCancelled(t *testing.T) {
	release := make(chan struct{})
	cl := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cl.Status(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Status: got %v, want the deadline's error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Status returned %v after its deadline", d)
	}
}
