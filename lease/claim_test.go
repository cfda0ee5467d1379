package lease_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

// TestClaimValidate: every bound a claim is held to, at the edge and again
// where the network brings it, refused in words that say what was wrong.
func TestClaimValidate(t *testing.T) {
	run := func(f func(r *job.RunSpec)) *job.RunSpec {
		r := &job.RunSpec{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/alice", Env: map[string]string{"PATH": "/usr/bin"}}
		f(r)
		return r
	}
	tests := []struct {
		name  string
		claim lease.Claim
		// want is a part of the refusal; empty accepts.
		want string
	}{
		{name: "a count", claim: lease.Claim{Count: 2}},
		{name: "named GPUs, a note, a kind, a time, a request id", claim: lease.Claim{GPUs: []int{0, 3}, Note: "eval", Kind: lease.KindBatch,
			Duration: 3 * time.Hour, RequestID: "req-0123456789"}},
		{name: "no kind (the granting node's default)", claim: lease.Claim{Count: 1}},
		{name: "a MIG instance", claim: lease.Claim{MIG: "3g.40gb"}},
		{name: "a memory budget on a model in pools", claim: lease.Claim{GPUs: []int{1}, MemMiB: 20 << 10, Model: "H100", Tags: []string{"east"}}},
		{name: "a run", claim: lease.Claim{Count: 1, Run: run(func(*job.RunSpec) {})}},
		{name: "a negative count", claim: lease.Claim{Count: -1}, want: "GPU count must be positive, got -1"},
		{name: "more GPUs than a node has", claim: lease.Claim{Count: words.MaxGPUsPerNode + 1}, want: "is out of range"},
		{name: "a count and indices", claim: lease.Claim{Count: 2, GPUs: []int{0, 1}}, want: "-g 2 and --ids 0,1 both say which GPUs: give -g N for any N free GPUs, or --ids for those GPUs, not both"},
		{name: "a negative GPU index", claim: lease.Claim{GPUs: []int{-1}}, want: "-1"},
		{name: "a negative time", claim: lease.Claim{Count: 1, Duration: -time.Hour}, want: "time limit -1h is out of range"},
		{name: "an unknown kind", claim: lease.Claim{Count: 1, Kind: "urgent"}, want: `unknown lease kind "urgent"`},
		{name: "a note of two lines", claim: lease.Claim{Count: 1, Note: "a\nb"}, want: "note must be one line"},
		{name: "a note with an escape", claim: lease.Claim{Count: 1, Note: "hi\x1b[2J"}, want: "note holds"},
		{name: "a request id too short", claim: lease.Claim{Count: 1, RequestID: "x"}, want: `request id "x" must be 8 to 64 letters`},
		{name: "a MIG instance too long", claim: lease.Claim{MIG: strings.Repeat("m", words.MaxNameLen+1)}, want: "too long or too large"},
		{name: "a memory budget too large", claim: lease.Claim{MemMiB: words.MaxMemMiB + 1}, want: "too long or too large"},
		{name: "a model with a control character", claim: lease.Claim{Count: 1, Model: "H100\x07"}, want: "model holds"},
		{name: "a run in a relative directory", claim: lease.Claim{Count: 1, Run: run(func(r *job.RunSpec) { r.Dir = "exp" })},
			want: "must be an absolute path"},
		{name: "a run carrying a variable that does not travel", claim: lease.Claim{Count: 1, Run: run(func(r *job.RunSpec) { r.Env["SECRET"] = "x" })},
			want: "environment variable \"SECRET\" does not travel"},
		{name: "a run with a NUL in its command", claim: lease.Claim{Count: 1, Run: run(func(r *job.RunSpec) { r.Command = []string{"a\x00b"} })},
			want: "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.claim.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v; want it accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v; want a refusal saying %q", err, tt.want)
			case tt.want != "" && refusal.CodeOf(err) != refusal.CodeInvalid:
				t.Fatalf("Validate: %v has code %q; want %q", err, refusal.CodeOf(err), refusal.CodeInvalid)
			}
		})
	}
}

// TestClaimLimit: a claim's defaults come from one place, the granting
// node's policy.
func TestClaimLimit(t *testing.T) {
	p := lease.DefaultPolicy()
	tests := []struct {
		name     string
		claim    lease.Claim
		wantKind lease.Kind
		wantDur  time.Duration
		wantErr  string
	}{
		{name: "nothing asked: interactive, its default", claim: lease.Claim{}, wantKind: lease.KindInteractive, wantDur: p.DefaultInteractive},
		{name: "batch: its default", claim: lease.Claim{Kind: lease.KindBatch}, wantKind: lease.KindBatch, wantDur: p.DefaultBatch},
		{name: "a time asked is kept", claim: lease.Claim{Duration: 90 * time.Minute}, wantKind: lease.KindInteractive, wantDur: 90 * time.Minute},
		{name: "over the kind's maximum", claim: lease.Claim{Duration: p.MaxInteractive + time.Hour}, wantErr: "over the interactive maximum"},
		{name: "an unknown kind", claim: lease.Claim{Kind: "urgent"}, wantErr: `"urgent"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, d, err := tt.claim.Limit(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Limit: %s %s, %v; want a refusal saying %q", k, d, err, tt.wantErr)
				}
				return
			}
			if err != nil || k != tt.wantKind || d != tt.wantDur {
				t.Fatalf("Limit: %s %s, %v; want %s %s", k, d, err, tt.wantKind, tt.wantDur)
			}
		})
	}
}

// TestClaimJSONNames: the claim is the agents' claim request, so its JSON
// names are the protocol's (v0.1.0 decodes them strictly); QueuedAt never
// travels.
func TestClaimJSONNames(t *testing.T) {
	c := lease.Claim{Count: 1, GPUs: []int{2}, Duration: time.Hour, Note: "n", Kind: lease.KindBatch, Force: true,
		Run: &job.RunSpec{Name: "s", Command: []string{"true"}, Dir: "/d", Env: map[string]string{"PATH": "/bin"}}, RequestID: "req-0123456789",
		QueuedAt: time.Unix(1, 0), MIG: "1g.10gb", MemMiB: 1, Model: "m", Tags: []string{"t"}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"count":1,"gpus":[2],"duration":3600000000000,"note":"n","kind":"batch","force":true,` +
		`"run":{"name":"s","command":["true"],"dir":"/d","env":{"PATH":"/bin"}},"request_id":"req-0123456789",` +
		`"mig":"1g.10gb","mem_mib":1,"model":"m","tags":["t"]}`
	if string(b) != want {
		t.Errorf("a claim encodes as\n%s\nwant\n%s", b, want)
	}
	if b, _ := json.Marshal(lease.Claim{}); string(b) != "{}" {
		t.Errorf("an empty claim encodes as %s; want {}", b)
	}
}

// TestClaimWant: placement reads the claim as it is, with the span the
// placing node's policy gives it, or the time asked for when that policy
// would refuse it (the granting node's may not).
func TestClaimWant(t *testing.T) {
	p := lease.DefaultPolicy()
	held := map[string]float64{"east": 1}
	tests := []struct {
		name     string
		claim    lease.Claim
		wantSpan time.Duration
	}{
		{name: "no time: the kind's default", claim: lease.Claim{Count: 2, Kind: lease.KindBatch, Model: "H100", Tags: []string{"east"}}, wantSpan: p.DefaultBatch},
		{name: "a time asked for", claim: lease.Claim{MIG: "3g.40gb", Duration: time.Hour}, wantSpan: time.Hour},
		{name: "over this policy's maximum: as asked", claim: lease.Claim{MemMiB: 1 << 10, Duration: p.MaxInteractive + time.Hour}, wantSpan: p.MaxInteractive + time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.claim.Want(p, t0, held)
			c := tt.claim
			if w.Span != tt.wantSpan || w.Duration != c.Duration || w.Count != c.Count || w.MIG != c.MIG || w.MemMiB != c.MemMiB ||
				w.Model != c.Model || !slices.Equal(w.Tags, c.Tags) || !w.Now.Equal(t0) || w.Held["east"] != 1 {
				t.Errorf("Want = %+v; want the claim's count, MIG, budget, model, tags and duration, span %s, now %v, held %v", w, tt.wantSpan, t0, held)
			}
		})
	}
}
