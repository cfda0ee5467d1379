package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// pipe carries one mux's calls straight to another's Serve, and says what
// the other speaks, as its gossip node meta would.
type pipe struct {
	from string
	to   *Mux
}

func (p pipe) Request(ctx context.Context, node, op string, body []byte) ([]byte, refusal.Code, string, error) {
	r, c, m := p.to.Serve(ctx, p.from, op, body)
	return r, c, m, nil
}

func (p pipe) Protocols(string) (int, int, bool) {
	lo, hi := p.to.Protocols()
	return lo, hi, true
}

// A later release's shapes of the claim: a field protocol 6 does not know,
// at the top and inside the lease of the reply.
type claimV8 struct {
	ClaimRequest
	Priority int `json:"priority,omitempty"`
}

func (c claimV8) Validate() error { return c.ClaimRequest.Validate() }

type leaseV8 struct {
	lease.Lease
	Restarting bool `json:"restarting,omitempty"`
}

type leaseReplyV8 struct {
	Lease leaseV8 `json:"lease"`
	Queue int     `json:"queue,omitempty"`
}

func (r leaseReplyV8) Validate() error { return r.Lease.Lease.Validate() }

func sampleLease() lease.Lease {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	return lease.Lease{ID: "n1-1", Node: "n1", GPUs: []int{0}, User: "alice", UID: 1000, Token: 1,
		Kind: lease.KindInteractive, StartedAt: t0, ExpiresAt: t0.Add(time.Hour)}
}

// mixed is a mux of this release (n7) and one pinned to protocol 6 (n6),
// which decodes as strictly as v0.1.0 did, each serving claim with the
// shapes of its own release.
func mixed(t *testing.T) (n7, n6 *Mux, got6, got7 *[]string) {
	t.Helper()
	n7, n6 = NewMux("n7"), NewMux("n6")
	if err := n6.SpeakAtMost(6); err != nil {
		t.Fatal(err)
	}
	n7.SetTransport(pipe{from: "n7", to: n6})
	n6.SetTransport(pipe{from: "n6", to: n7})
	var a, b []string
	Handle(n6, Claim, func(_ context.Context, from string, who Actor, r ClaimRequest) (LeaseReply, error) {
		a = append(a, from+" "+who.User+" "+r.Note)
		return LeaseReply{Lease: sampleLease()}, nil
	})
	Handle(n7, Endpoint[claimV8, leaseReplyV8]{Name: "claim"}, func(_ context.Context, from string, who Actor, r claimV8) (leaseReplyV8, error) {
		b = append(b, from+" "+who.User+" "+r.Note)
		return leaseReplyV8{Lease: leaseV8{Lease: sampleLease(), Restarting: true}, Queue: 3}, nil
	})
	return n7, n6, &a, &b
}

// TestMixedProtocolsCall: a newer agent and one of the previous release's
// dialect call each other both ways; what the newer one knows and the
// older does not is left out of what the older one reads, and the older
// one's requests and replies, lacking the new fields, are read with their
// zero values.
func TestMixedProtocolsCall(t *testing.T) {
	ctx := context.Background()
	n7, n6, got6, got7 := mixed(t)

	// New to old: the request carries a field v0.1.0's strict decoder
	// would refuse ("unknown field \"priority\"").
	r, err := Call(ctx, n7, "n6", Endpoint[claimV8, LeaseReply]{Name: "claim"}, As("alice"),
		claimV8{ClaimRequest: ClaimRequest{Count: 1, Note: "new to old"}, Priority: 5})
	if err != nil {
		t.Fatalf("a newer agent's claim at an older one: %v", err)
	}
	if r.Lease.ID != "n1-1" || len(*got6) != 1 || (*got6)[0] != "n7 alice new to old" {
		t.Errorf("reply %+v, served %q", r.Lease, *got6)
	}

	// Old to new: the reply's new fields are left out for the old caller.
	r6, err := Call(ctx, n6, "n7", Claim, As("bob"), ClaimRequest{Count: 1, Note: "old to new"})
	if err != nil {
		t.Fatalf("an older agent's claim at a newer one: %v", err)
	}
	if r6.Lease.ID != "n1-1" || len(*got7) != 1 || (*got7)[0] != "n6 bob old to new" {
		t.Errorf("reply %+v, served %q", r6.Lease, *got7)
	}
}

// TestMixedProtocolsWire pins the bytes: what this release sends a
// protocol-6 agent is exactly what v0.1.0 would have sent (envelope
// version 6, only v0.1.0's fields), and what it answers one has no field
// v0.1.0 does not know.
func TestMixedProtocolsWire(t *testing.T) {
	ctx := context.Background()
	n7, _, _, _ := mixed(t)
	var sent []byte
	n7.SetTransport(recorder{pipe: pipe{from: "n7", to: pinned(t, 6)}, sent: &sent})
	_, err := Call(ctx, n7, "n6", Endpoint[claimV8, LeaseReply]{Name: "claim"}, As("alice"),
		claimV8{ClaimRequest: ClaimRequest{Count: 1, Note: "x"}, Priority: 5})
	if err == nil || !strings.Contains(err.Error(), "unknown request") {
		t.Fatalf("want the recorder's refusal, got %v", err)
	}
	old, _ := json.Marshal(envelope{V: 6, Actor: As("alice"), Req: mustJSON(t, ClaimRequest{Count: 1, Note: "x"})})
	if string(sent) != string(old) {
		t.Errorf("sent %s\nv0.1.0 sends %s", sent, old)
	}

	// A reply of a newer shape, downgraded for a protocol-6 caller.
	body, _ := json.Marshal(envelope{V: 6, Actor: As("bob"), Req: mustJSON(t, ClaimRequest{Count: 1})})
	reply, code, msg := n7.Serve(ctx, "n6", "claim", body)
	if code != "" {
		t.Fatalf("serve: %s %s", code, msg)
	}
	if strings.Contains(string(reply), "restarting") || strings.Contains(string(reply), "queue") {
		t.Errorf("a protocol-6 caller gets fields it does not know: %s", reply)
	}
	var strict LeaseReply
	if err := decode(reply, &strict, true); err != nil {
		t.Errorf("v0.1.0's strict decoder refuses the reply %s: %v", reply, err)
	}
	// The same reply to a protocol-7 caller keeps them.
	body, _ = json.Marshal(envelope{V: 7, Actor: As("bob"), Req: mustJSON(t, ClaimRequest{Count: 1})})
	reply, _, _ = n7.Serve(ctx, "n6", "claim", body)
	if !strings.Contains(string(reply), `"restarting":true`) {
		t.Errorf("a protocol-7 caller lost the new fields: %s", reply)
	}
}

// recorder keeps what was sent, then lets the pinned mux refuse it.
type recorder struct {
	pipe
	sent *[]byte
}

func (r recorder) Request(ctx context.Context, node, op string, body []byte) ([]byte, refusal.Code, string, error) {
	*r.sent = append([]byte(nil), body...)
	return r.pipe.Request(ctx, node, op, body)
}

// pinned is a mux of no endpoints pinned to protocol v.
func pinned(t *testing.T, v int) *Mux {
	m := NewMux("n6")
	if err := m.SpeakAtMost(v); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServeProtocols: which envelope versions an agent takes, and what the
// others are told.
func TestServeProtocols(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		pin    int
		body   string
		refuse string
	}{
		{"protocol 8", 0, `{"v":8,"actor":{"user":"alice"},"req":{"count":1}}`, ""},
		{"protocol 7", 0, `{"v":7,"actor":{"user":"alice"},"req":{"count":1}}`, ""},
		{"protocol 6 (v0.1.0)", 0, `{"v":6,"actor":{"user":"alice"},"req":{"count":1}}`, ""},
		{"a newer release's field is ignored", 0, `{"v":7,"actor":{"user":"alice"},"req":{"count":1,"priority":3},"trace":"x"}`, ""},
		{"protocol 8", 0, `{"v":8,"actor":{"user":"alice"},"req":{"count":1,"cpus_per_gpu":4}}`, ""},
		{"two releases behind", 0, `{"v":5,"actor":{"user":"alice"},"req":{"count":1}}`, fmt.Sprintf("speaks agent protocol 5 and this agent 6 to %d: nodes may be at most one dibs release apart", Version)},
		{"two releases ahead", 0, fmt.Sprintf(`{"v":%d,"actor":{"user":"alice"},"req":{"count":1}}`, Version+1), fmt.Sprintf("speaks agent protocol %d and this agent 6 to %d", Version+1, Version)},
		{"pinned to 6: protocol 7 refused", 6, `{"v":7,"actor":{"user":"alice"},"req":{"count":1}}`, "this agent 6 to 6"},
		{"pinned to 6: unknown field refused, as v0.1.0 did", 6, `{"v":6,"actor":{"user":"alice"},"req":{"count":1,"priority":3}}`, `unknown field "priority"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMux("n1")
			if tt.pin != 0 {
				if err := m.SpeakAtMost(tt.pin); err != nil {
					t.Fatal(err)
				}
			}
			Handle(m, Claim, func(context.Context, string, Actor, ClaimRequest) (LeaseReply, error) {
				return LeaseReply{Lease: sampleLease()}, nil
			})
			_, code, msg := m.Serve(ctx, "n2", "claim", []byte(tt.body))
			if tt.refuse == "" && code != "" {
				t.Errorf("refused: %s %s", code, msg)
			}
			if tt.refuse != "" && !strings.Contains(msg, tt.refuse) {
				t.Errorf("got %q %q, want a refusal with %q", code, msg, tt.refuse)
			}
		})
	}
}

// TestNewEndpointToOldAgent: an endpoint protocol 6 does not have is
// refused before it is sent, saying so, rather than reaching v0.1.0 as an
// "unknown request".
func TestNewEndpointToOldAgent(t *testing.T) {
	n7 := NewMux("n7")
	n7.SetTransport(pipe{from: "n7", to: pinned(t, 6)})
	_, err := Call(context.Background(), n7, "n6", Endpoint[Empty, Empty]{Name: "drain"}, System, Empty{})
	if err == nil || !strings.Contains(err.Error(), "drain is not known to agents of protocol 6 (an older dibs): upgrade every node first") {
		t.Errorf("got %v", err)
	}
}

// TestDowngradeKeepsWhatV6Knows: every endpoint of protocol 6, encoded by
// this release and downgraded, decodes under v0.1.0's strictness, and a
// message with nothing to drop goes out byte for byte as encoded.
func TestDowngradeKeepsWhatV6Knows(t *testing.T) {
	d, err := loadV6()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Endpoints) != 18 {
		t.Errorf("dialect_v6.json has %d endpoints, v0.1.0 had 18", len(d.Endpoints))
	}
	in := mustJSON(t, LeaseReply{Lease: sampleLease()})
	out, err := downgrade("claim", true, 6, in)
	if err != nil || string(out) != string(in) {
		t.Errorf("downgrade changed a v6 reply: %s -> %s, %v", in, out, err)
	}
	in = mustJSON(t, leaseReplyV8{Lease: leaseV8{Lease: sampleLease(), Restarting: true}, Queue: 2})
	out, err = downgrade("claim", true, 6, in)
	if err != nil {
		t.Fatal(err)
	}
	var strict LeaseReply
	if err := decode(out, &strict, true); err != nil || strict.Lease.ID != "n1-1" || !strict.Lease.ExpiresAt.Equal(sampleLease().ExpiresAt) {
		t.Errorf("downgraded %s: %+v, %v", out, strict, err)
	}
}

// replyCheck reads a reply of e as this release's Call does.
func replyCheck[Req, Resp Message](e Endpoint[Req, Resp]) func([]byte) error {
	return func(b []byte) error {
		var r Resp
		if err := decode(b, &r, false); err != nil {
			return err
		}
		return r.Validate()
	}
}

// TestFirstReleasePeerMessages: this release serves every request v0.1.0
// sent and reads every reply it answered (gossip/testdata/wire/v0.1.0,
// written by v0.1.0's own code), and this release's own kept messages too.
func TestFirstReleasePeerMessages(t *testing.T) {
	m := NewMux("node01")
	var n int
	for _, reg := range []func(){
		func() { accept(m, Claim, &n) }, func() { accept(m, Release, &n) }, func() { accept(m, Extend, &n) },
		func() { accept(m, Start, &n) }, func() { accept(m, Started, &n) }, func() { accept(m, Place, &n) },
		func() { accept(m, Preempt, &n) }, func() { accept(m, Cancel, &n) }, func() { accept(m, Refused, &n) },
		func() { accept(m, Usage, &n) },
	} {
		reg()
	}
	replies := map[string]func([]byte) error{
		"claim": replyCheck(Claim), "release": replyCheck(Release), "extend": replyCheck(Extend), "start": replyCheck(Start),
		"started": replyCheck(Started), "place": replyCheck(Place), "preempt": replyCheck(Preempt), "cancel": replyCheck(Cancel),
		"refused": replyCheck(Refused), "usage": replyCheck(Usage),
	}
	for _, rel := range []string{"v0.1.0", "unreleased"} {
		files, _ := filepath.Glob(filepath.Join("../../gossip/testdata/wire", rel, "peer-*.json"))
		if len(files) != 20 {
			t.Fatalf("%s: %d peer messages, want 20", rel, len(files))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b = bytes.TrimSuffix(b, []byte("\n"))
			name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "peer-"), ".json")
			if op, ok := strings.CutSuffix(name, "-reply"); ok {
				if err := replies[op](b); err != nil {
					t.Errorf("%s %s reply: %v", rel, op, err)
				}
				continue
			}
			before := n
			if _, code, msg := m.Serve(context.Background(), "node02", name, b); code != "" || n != before+1 {
				t.Errorf("%s %s request refused: %s %s", rel, name, code, msg)
			}
		}
	}
}
