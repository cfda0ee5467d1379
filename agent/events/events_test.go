package events

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
)

var t0 = time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)

func testLease() lease.Lease {
	return lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{3}, User: "alice", UID: 1001,
		StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 5*time.Second, what, cond)
}

// TestLogRecordsReadsAndNotices: events are readable at once (before the
// writer has them in the store), in order, by filter; an event with a
// notice hands it on; a reopened log numbers on from where it was.
func TestLogRecordsReadsAndNotices(t *testing.T) {
	store := NewMemStore(100)
	var mu sync.Mutex
	var notices []event.Notice
	l := New(Config{Node: "node01"}, Deps{Store: store, Notice: func(n event.Notice) {
		mu.Lock()
		notices = append(notices, n)
		mu.Unlock()
	}})
	if err := l.Open(); err != nil {
		t.Fatal(err)
	}
	changed := l.Changes()
	l.Record(event.LeaseEvent(event.EventClaim, testLease(), t0))
	select {
	case <-changed:
	default:
		t.Error("recording did not wake followers")
	}
	evs, _, err := l.Events(event.EventFilter{}, 10)
	if err != nil || len(evs) != 1 || evs[0].Seq != 1 || evs[0].Node != "node01" {
		t.Fatalf("events before any write = %+v, %v", evs, err)
	}
	l.Run()
	l.Record(event.WarnEvent(testLease(), "10m", t0.Add(50*time.Minute)))
	l.Record(event.EndEvent(testLease(), lease.EndExpired, "", t0.Add(time.Hour)))
	eventually(t, "the writer to store the events", func() bool { last, _ := store.LastEventSeq(); return last == 3 })
	eventually(t, "two notices (the warning and the end; not the claim)", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(notices) == 2
	})
	evs, _, _ = l.Events(event.EventFilter{After: 1}, 10)
	if len(evs) != 2 || evs[0].Kind != event.EventWarn || evs[1].Kind != event.EventEnd {
		t.Errorf("after 1: %+v, want the warning then the end", evs)
	}
	l.Close()
	l2 := New(Config{Node: "node01"}, Deps{Store: store})
	l2.Open()
	l2.Record(event.LeaseEvent(event.EventExtend, testLease(), t0))
	if evs, _, _ := l2.Events(event.EventFilter{After: 3}, 10); len(evs) != 1 || evs[0].Seq != 4 {
		t.Errorf("a reopened log numbered %+v, want 4", evs)
	}
}

// TestLogPrunesPastKeep: events older than Keep go at Open.
func TestLogPrunesPastKeep(t *testing.T) {
	store := NewMemStore(100)
	old := event.LeaseEvent(event.EventClaim, testLease(), time.Now().Add(-20*24*time.Hour))
	old.Seq = 1
	fresh := event.LeaseEvent(event.EventClaim, testLease(), time.Now())
	fresh.Seq = 2
	store.AppendEvents([]event.Event{old, fresh})
	l := New(Config{Node: "node01", Keep: 14 * 24 * time.Hour}, Deps{Store: store})
	l.Open()
	evs, _, _ := l.Events(event.EventFilter{}, 10)
	if len(evs) != 1 || evs[0].Seq != 2 {
		t.Errorf("after pruning at 14 days: %+v, want only the fresh event", evs)
	}
}

// hook is a local HTTP server standing in for Slack or ntfy.
type hook struct {
	mu       sync.Mutex
	bodies   []string
	ctypes   []string
	failures int // answer 500 this many times first
	srv      *httptest.Server
}

func newHook(t *testing.T, failures int) *hook {
	h := &hook{failures: failures}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.failures > 0 {
			h.failures--
			http.Error(w, "secret internal detail", http.StatusInternalServerError)
			return
		}
		h.bodies = append(h.bodies, string(b))
		h.ctypes = append(h.ctypes, r.Header.Get("Content-Type"))
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

func notice(text string) event.Notice {
	return event.Notice{User: "alice", Kind: event.EventWarn, Node: "node01", At: t0, Text: text}
}

func TestWebhookJSONAndText(t *testing.T) {
	h := newHook(t, 0)
	w := NewWebhooks(WebhookConfig{Backoff: []time.Duration{time.Millisecond}}, NewMemStore(10), nil)
	t.Cleanup(w.Close)
	if err := w.Set(event.NotifySetting{User: "alice", URL: h.srv.URL + "/slack", Format: event.WebhookJSON, SetAt: t0}); err != nil {
		t.Fatal(err)
	}
	w.Deliver(notice("lease node01-7 ends in 10m"))
	w.Deliver(event.Notice{User: "bob", Kind: event.EventWarn, Node: "node01", At: t0, Text: "bob has no webhook"})
	eventually(t, "the JSON post", func() bool { return len(h.got()) == 1 })
	var p Payload
	if err := json.Unmarshal([]byte(h.got()[0]), &p); err != nil || p.Text != "dibs: lease node01-7 ends in 10m" || p.Content != p.Text {
		t.Errorf("JSON body %q (%v): want text and content both the notice", h.got()[0], err)
	}
	if h.ctypes[0] != "application/json" {
		t.Errorf("content type %q", h.ctypes[0])
	}
	w.Set(event.NotifySetting{User: "alice", URL: h.srv.URL + "/ntfy", Format: event.WebhookText, SetAt: t0})
	w.Deliver(notice("your job node01-q3 failed"))
	eventually(t, "the text post", func() bool { return len(h.got()) == 2 })
	if h.got()[1] != "dibs: your job node01-q3 failed" || !strings.HasPrefix(h.ctypes[1], "text/plain") {
		t.Errorf("text body %q, type %q", h.got()[1], h.ctypes[1])
	}
	if st := w.Status("alice"); st.LastOK.IsZero() || len(st.Failures) != 0 {
		t.Errorf("status after two deliveries: %+v", st)
	}
}

// TestWebhookRetriesThenReportsFailure: a server that fails twice gets the
// notice on the third try; one that always fails leaves a failure the
// person can read, without what the server said.
func TestWebhookRetriesThenReportsFailure(t *testing.T) {
	h := newHook(t, 2)
	w := NewWebhooks(WebhookConfig{Backoff: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}, Timeout: 100 * time.Millisecond}, NewMemStore(10), nil)
	t.Cleanup(w.Close)
	w.Set(event.NotifySetting{User: "alice", URL: h.srv.URL, Format: event.WebhookJSON, SetAt: t0})
	w.Deliver(notice("third time lucky"))
	eventually(t, "delivery after two failures", func() bool { return len(h.got()) == 1 })

	h2 := newHook(t, 100)
	w.Set(event.NotifySetting{User: "alice", URL: h2.srv.URL, Format: event.WebhookJSON, SetAt: t0})
	w.Deliver(notice("never lands"))
	eventually(t, "the failure to be recorded", func() bool { return len(w.Status("alice").Failures) == 1 })
	f := w.Status("alice").Failures[0]
	if f.Attempts != 4 || f.Err != errNotDelivered.Error() || f.Text != "never lands" {
		t.Errorf("failure = %+v, want 4 tries, one class of failure", f)
	}
	if strings.Contains(f.Err, "secret") {
		t.Errorf("the failure shows what the server said: %q", f.Err)
	}
}

func TestWebhookTestAndRefusals(t *testing.T) {
	w := NewWebhooks(WebhookConfig{Timeout: 100 * time.Millisecond}, NewMemStore(10), nil)
	t.Cleanup(w.Close)
	for _, bad := range []string{"ftp://x/y", "http://169.254.169.254/latest/meta-data", "http://u:p@example.com/", "not a url", "http://[fe80::1]/x"} {
		if err := w.Set(event.NotifySetting{User: "alice", URL: bad, Format: event.WebhookJSON, SetAt: t0}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	// A redirect is not followed: the post fails.
	redir := httptest.NewServer(http.RedirectHandler("http://169.254.169.254/", http.StatusFound))
	t.Cleanup(redir.Close)
	w.Set(event.NotifySetting{User: "alice", URL: redir.URL, Format: event.WebhookJSON, SetAt: t0})
	ok, err := w.Test(context.Background(), notice("test"))
	if !ok || err == nil || err.Error() != errNotDelivered.Error() {
		t.Errorf("Test against a redirect = %v, %v; want a failure", ok, err)
	}
	if ok, _ := w.Test(context.Background(), event.Notice{User: "bob", Text: "x"}); ok {
		t.Errorf("Test for someone without a webhook says it posted")
	}
	w.Clear("alice")
	if st := w.Status("alice"); st.Setting != nil {
		t.Errorf("cleared webhook still set: %+v", st)
	}
}

// TestFanoutQueuesPerUser: one user whose deliveries hang (their tmux
// server never answers) delays only their own notices; another user's
// notice goes out at once; each user's notices keep their order; and one
// user's queue is bounded.
func TestFanoutQueuesPerUser(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{}
	send := func(ctx context.Context, node string, n event.Notice) error {
		if n.User == "mallory" {
			<-ctx.Done() // a delivery that never finishes: the timeout ends it
			return ctx.Err()
		}
		mu.Lock()
		got[n.User] = append(got[n.User], n.Text)
		mu.Unlock()
		return nil
	}
	f := NewFanout(func() []string { return []string{"node01"} }, send, nil)
	f.Run()
	for i := range 10 {
		f.Notice(event.Notice{User: "mallory", Text: fmt.Sprint("to mallory ", i)})
	}
	began := time.Now()
	for i := range 3 {
		f.Notice(event.Notice{User: "alice", Text: fmt.Sprint("to alice ", i)})
	}
	eventually(t, "alice's notices", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["alice"]) == 3
	})
	if took := time.Since(began); took > time.Second {
		t.Errorf("alice's notices took %v behind mallory's hanging ones; want well under a second", took)
	}
	mu.Lock()
	if want := []string{"to alice 0", "to alice 1", "to alice 2"}; !slices.Equal(got["alice"], want) {
		t.Errorf("alice's notices arrived as %q, want %q", got["alice"], want)
	}
	mu.Unlock()

	// A flood from one user is bounded: past maxPerUser waiting, dropped.
	for i := range 2 * maxPerUser {
		f.Notice(event.Notice{User: "mallory", Text: fmt.Sprint("flood ", i)})
	}
	f.mu.Lock()
	waiting := len(f.users["mallory"].pending)
	f.mu.Unlock()
	if waiting > maxPerUser {
		t.Errorf("mallory has %d notices waiting; want at most %d", waiting, maxPerUser)
	}
}

// TestFanoutCloseIsBounded: a stopping agent with notices still queued for
// a user whose deliveries hang stops within closeWait and a send, not
// after every queued notice has timed out in turn.
func TestFanoutCloseIsBounded(t *testing.T) {
	send := func(ctx context.Context, node string, n event.Notice) error {
		<-ctx.Done()
		return ctx.Err()
	}
	f := NewFanout(func() []string { return []string{"node01"} }, send, nil)
	f.Run()
	for i := range 20 {
		f.Notice(event.Notice{User: "mallory", Text: fmt.Sprint("to mallory ", i)})
	}
	began := time.Now()
	f.Close()
	if took := time.Since(began); took > closeWait+2*time.Second {
		t.Errorf("Close took %v with 20 hanging notices queued; want about %v", took, closeWait)
	}
}
