package peer

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// accept registers e with a handler that accepts whatever passed the
// decoder and Validate, and counts it.
func accept[Req, Resp Message](m *Mux, e Endpoint[Req, Resp], n *int) {
	Handle(m, e, func(context.Context, string, Actor, Req) (Resp, error) {
		*n++
		var zero Resp
		return zero, nil
	})
}

// FuzzServe feeds what another agent may send — any op, any body —
// through the mux as the gossip transport hands it over: the envelope,
// the version (6 or 7), the actor and every request type's decoder
// (bounded; unknown fields ignored, as from protocol 7 on) and Validate. Nothing panics, and whatever does not reach a handler is
// refused with a code and one bounded line of UTF-8.
func FuzzServe(f *testing.F) {
	ops := []string{"claim", "release", "extend", "start", "started", "preempt", "cancel", "usage", "refused", "place", "book", "health", "history", "entry-status", "doctor-tally", "log-runs", "run-history", "gpu-samples", "usage-by-day"}
	env := func(actor Actor, req any) []byte {
		r, _ := json.Marshal(req)
		b, _ := json.Marshal(envelope{V: Version, Actor: actor, Req: r})
		return b
	}
	f.Add("claim", env(As("alice"), ClaimRequest{Count: 1, Duration: time.Hour}))
	f.Add("claim", env(As("alice"), ClaimRequest{GPUs: []int{1}, MemMiB: 20 << 10, Model: "H100", Tags: []string{"east"}, Kind: lease.KindBatch,
		Note: "eval", RequestID: "req-0123456789", Run: &Run{Name: "train-7", Command: []string{"python", "train.py"}, Dir: "/home/alice",
			Env: map[string]string{"PATH": "/usr/bin"}}}))
	f.Add("claim", env(As("alice"), ClaimRequest{MIG: "3g.40gb", Duration: time.Hour}))
	f.Add("release", env(As("alice"), ReleaseRequest{IDs: []string{"n1-1"}}))
	f.Add("place", env(System, PlaceRequest{Key: "n1-q1#0", Placer: "n2/ab12"}))
	f.Add("started", env(System, StartedRequest{Key: "n1-q1#0"}))
	f.Add("preempt", env(System, PreemptRequest{Lease: "n1-1", Token: 1, Reason: "gang"}))
	f.Add("entry-status", env(As("alice"), StatusRequest{ID: "n1-q3"}))
	f.Add("cancel", env(As("alice"), CancelRequest{ID: "n1-q3/7"}))
	f.Add("start", env(System, StartRequest{Phase: PhaseStart, GPUs: []int{0}, Entry: queue.QueueEntry{
		ID: "n1-q4", Origin: "n1", User: "alice", Nodes: 1, GPUsPerNode: 1, Kind: lease.KindBatch, MIG: "3g.40gb"}}))
	f.Add("claim", []byte(`{"v":5,"actor":{"user":"\u001b]0;x\u0007"},"req":{}}`))
	f.Add("claim", []byte(`{"v":1,"actor":{"system":true},"req":{"count":1}}`))
	f.Add("claim", []byte(`{"v":6,"actor":{"user":"alice"},"req":{"count":1,"duration":3600000000000}}`))
	f.Add("claim", []byte(`{"v":7,"actor":{"user":"alice"},"req":{"count":1,"priority":2},"trace":"x"}`))
	f.Add("book", env(As("bob"), BookRequest{Count: 2, Start: time.Unix(1_900_000_000, 0), Duration: time.Hour, Lead: true}))
	f.Add("book", env(As("bob"), BookRequest{Count: 2, Start: time.Unix(1_900_000_000, 0), Duration: time.Hour, Group: "node01-7"}))
	f.Add("book", []byte(`{"v":7,"actor":{"user":"bob"},"req":{"count":1,"start":"2030-01-01T00:00:00Z","duration":3600000000000,"group":"node01-7","lead":true}}`))
	f.Add("doctor-tally", env(System, TallyRequest{Since: time.Now(), Running: []string{"n1-1"}, Page: 1}))
	f.Add("log-runs", env(As("alice"), LogRunsRequest{Name: "node01-q3"}))
	f.Add("run-history", env(As("alice"), RunHistoryRequest{Filter: lease.HistoryFilter{User: "bob", Since: time.Unix(1_800_000_000, 0), States: []lease.RunState{lease.StateFailed}, Job: "n1-q3"}}))
	f.Add("gpu-samples", env(As("alice"), SamplesRequest{GPU: 3, Since: time.Unix(1_800_000_000, 0)}))
	f.Add("usage-by-day", env(As("alice"), UsageByDayRequest{Cuts: []time.Time{time.Unix(1_800_000_000, 0), time.Unix(1_800_086_400, 0)}}))
	f.Add("nope", []byte(`{}`))
	f.Add("release", []byte(strings.Repeat("[", 4096)))
	f.Fuzz(func(t *testing.T, op string, body []byte) {
		m := NewMux("n1")
		var handled int
		accept(m, Claim, &handled)
		accept(m, Release, &handled)
		accept(m, Extend, &handled)
		accept(m, Start, &handled)
		accept(m, Started, &handled)
		accept(m, Preempt, &handled)
		accept(m, Cancel, &handled)
		accept(m, Usage, &handled)
		accept(m, Refused, &handled)
		accept(m, Place, &handled)
		accept(m, Book, &handled)
		accept(m, Health, &handled)
		accept(m, History, &handled)
		accept(m, Status, &handled)
		accept(m, DoctorTally, &handled)
		accept(m, LogRuns, &handled)
		accept(m, RunHistory, &handled)
		accept(m, GPUSamples, &handled)
		accept(m, UsageByDay, &handled)
		if len(ops) > 0 && len(op) == 1 {
			op = ops[int(op[0])%len(ops)] // short ops pick a real one
		}
		reply, code, msg := m.Serve(context.Background(), "n2", op, body)
		if handled == 0 {
			if reply != nil || code == "" || msg == "" {
				t.Fatalf("a refused request answered reply %q, code %q, message %q", reply, code, msg)
			}
			if strings.ContainsAny(msg, "\n\r") || len(msg) > 4096 || !utf8.ValidString(msg) {
				t.Fatalf("a refusal that is not one short line: %q", msg)
			}
		}
	})
}

// FuzzEnvKey: the byte check accepts exactly what the pattern it replaced
// accepted.
func FuzzEnvKey(f *testing.F) {
	pattern := regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)
	for _, s := range []string{"MASTER_ADDR", "_X", "9LIVES", "a", "", strings.Repeat("A", 64), strings.Repeat("A", 65), "NODE_RANK\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if envKey(s) != pattern.MatchString(s) {
			t.Fatalf("envKey(%q) = %v, the pattern says %v", s, envKey(s), pattern.MatchString(s))
		}
	})
}

// FuzzPlaceReply feeds what an origin may answer a scheduler's place —
// the job it keeps, whole — through the reply's strict decoder and
// Validate: nothing panics, and a job that passes holds within the bounds
// every job is held to.
func FuzzPlaceReply(f *testing.F) {
	for _, r := range []PlaceReply{
		{},
		{Job: &job.Job{Command: []string{"python", "train.py"}, Dir: "/home/a", Env: map[string]string{"PATH": "/usr/bin"}}},
		{Job: &job.Job{Name: "sweep", Torchrun: true, Command: []string{"train.py"}}},
		{Job: &job.Job{Kept: true, Command: []string{"x"}}},
		{Job: &job.Job{Env: map[string]string{"AWS_SECRET_ACCESS_KEY": "x"}}},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"job":{"command":["` + strings.Repeat(`\u0001`, 30000) + `"]}}`))
	f.Add([]byte(`{"job":{"command":[""]},"extra":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r PlaceReply
		if err := decode(body, &r, false); err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			return
		}
		if r.Job == nil {
			return
		}
		if r.Job.Kept && r.Job.Private() {
			t.Fatalf("a kept job with its command passed: %+v", r.Job)
		}
		if b, _ := json.Marshal(r.Job); len(b) > job.MaxJobWireSize {
			t.Fatalf("a job of %d bytes passed, over %d", len(b), job.MaxJobWireSize)
		}
	})
}
