package lease_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

// TestBookRequestValidate: every bound a booking is held to, at the edge
// and again where the network brings it, refused in words that say what
// was wrong.
func TestBookRequestValidate(t *testing.T) {
	start := t0.Add(2 * time.Hour)
	run := func(f func(r *job.RunSpec)) *job.RunSpec {
		r := &job.RunSpec{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/bob", Env: map[string]string{"PATH": "/usr/bin"}}
		f(r)
		return r
	}
	tests := []struct {
		name string
		req  lease.BookRequest
		// want is a part of the refusal; empty accepts.
		want string
	}{
		{name: "a count", req: lease.BookRequest{Count: 2, Start: start, Duration: time.Hour}},
		{name: "named GPUs, a note, a kind, a model, pools, a request id", req: lease.BookRequest{GPUs: []int{0, 3}, Start: start, Duration: 3 * time.Hour,
			Kind: lease.KindBatch, Note: "deadline", Model: "H100", Tags: []string{"east"}, RequestID: "req-0123456789"}},
		{name: "a run", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Run: run(func(*job.RunSpec) {})}},
		{name: "the first part of a booking across nodes", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Lead: true}},
		{name: "another part", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Group: "node01-7"}},
		{name: "an unknown kind", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Kind: "urgent"}, want: `unknown lease kind "urgent"`},
		{name: "a request id too short", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, RequestID: "x"},
			want: `request id "x" must be 8 to 64 letters`},
		{name: "a count and indices", req: lease.BookRequest{Count: 2, GPUs: []int{0, 1}, Start: start, Duration: time.Hour},
			want: "-g 2 and --ids 0,1 both say which GPUs: give -g N for any N free GPUs, or --ids for those GPUs, not both"},
		{name: "a run in a relative directory", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Run: run(func(r *job.RunSpec) { r.Dir = "exp" })},
			want: "must be an absolute path"},
		{name: "a run carrying a variable that does not travel", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour,
			Run: run(func(r *job.RunSpec) { r.Env["SECRET"] = "x" })}, want: `environment variable "SECRET" does not travel`},
		{name: "a negative count", req: lease.BookRequest{Count: -1, Start: start, Duration: time.Hour}, want: "GPU count -1 is out of range"},
		{name: "more GPUs than a node has", req: lease.BookRequest{Count: words.MaxGPUsPerNode + 1, Start: start, Duration: time.Hour}, want: "is out of range"},
		{name: "a negative GPU index", req: lease.BookRequest{GPUs: []int{-1}, Start: start, Duration: time.Hour}, want: "-1"},
		{name: "a negative time", req: lease.BookRequest{Count: 1, Start: start, Duration: -time.Hour}, want: "booking time out of range"},
		{name: "a time past any limit", req: lease.BookRequest{Count: 1, Start: start, Duration: words.MaxDuration + time.Hour}, want: "booking time out of range"},
		{name: "a start no clock shows", req: lease.BookRequest{Count: 1, Start: time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC), Duration: time.Hour},
			want: "booking time out of range"},
		{name: "a pool with a control character", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Tags: []string{"east\x1b[2J"}}, want: "east"},
		{name: "a model with a control character", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Model: "H100\x07"}, want: "model holds"},
		{name: "a model too long", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Model: strings.Repeat("m", words.MaxModelLen+1)},
			want: "is longer than"},
		{name: "a group that is not a booking id", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Group: "node01"}, want: "bad booking group"},
		{name: "a lead with a group", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Group: "node01-7", Lead: true}, want: "bad booking group"},
		{name: "a note of two lines", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Note: "a\nb"}, want: "note must be one line"},
		{name: "a note with an escape", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Note: "hi\x1b]0;x\x07"}, want: "note holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v; want it accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v; want a refusal saying %q", err, tt.want)
			case tt.want != "" && refusal.CodeOf(err) != refusal.CodeInvalid:
				t.Fatalf("Validate: code %q; want %q", refusal.CodeOf(err), refusal.CodeInvalid)
			}
		})
	}
}

// TestBookRequestJSONNames: the booking is the agents' book request, so
// it encodes with the names, order and omissions the protocol has always
// had (these bytes are what peer.BookRequest wrote before it became this
// type); start and duration are written even when zero.
func TestBookRequestJSONNames(t *testing.T) {
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		req  lease.BookRequest
		want string
	}{
		{name: "every field",
			req: lease.BookRequest{Count: 2, GPUs: []int{1, 3}, Start: at, Duration: 3 * time.Hour, Kind: lease.KindBatch, Note: "deadline",
				Model: "H100", Tags: []string{"east"}, Run: &job.RunSpec{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/bob",
					Env: map[string]string{"PATH": "/usr/bin"}}, RequestID: "req-0123456789", Group: "node01-7"},
			want: `{"count":2,"gpus":[1,3],"start":"2030-01-02T09:00:00Z","duration":10800000000000,"kind":"batch","note":"deadline",` +
				`"model":"H100","tags":["east"],"run":{"name":"train","command":["python","train.py"],"dir":"/home/bob","env":{"PATH":"/usr/bin"}},` +
				`"request_id":"req-0123456789","group":"node01-7"}`},
		{name: "the first part of a booking across nodes", req: lease.BookRequest{Count: 1, Start: at, Duration: time.Hour, Lead: true},
			want: `{"count":1,"start":"2030-01-02T09:00:00Z","duration":3600000000000,"lead":true}`},
		{name: "nothing", req: lease.BookRequest{}, want: `{"start":"0001-01-01T00:00:00Z","duration":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("the booking encodes as\n%s\nwant\n%s", b, tt.want)
			}
		})
	}
}

// TestBookingKeepsItsRun: the run a booking carries is the job the
// booking keeps, as asked, and the run the node starts at its time.
func TestBookingKeepsItsRun(t *testing.T) {
	run := &job.RunSpec{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/bob", Env: map[string]string{"PATH": "/usr/bin"}}
	b, err := table().PlanBooking(bob, lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour, Run: run}, islands(2), t0, lease.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if b.Job == nil || b.Job.Name != "train" || !slices.Equal(b.Job.Command, run.Command) || b.Job.Dir != run.Dir || b.Job.Env["PATH"] != "/usr/bin" {
		t.Fatalf("the booking keeps job %+v; want %+v", b.Job, run)
	}
	if got := b.Job.Spec("dibs-node01-1"); got.Name != "dibs-node01-1" || !slices.Equal(got.Command, run.Command) || got.Dir != run.Dir || !maps.Equal(got.Env, run.Env) {
		t.Errorf("the booked job starts as %+v; want %+v in session dibs-node01-1", got, run)
	}
	b, err = table().PlanBooking(bob, lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour}, islands(2), t0, lease.DefaultPolicy())
	if err != nil || b.Job != nil {
		t.Fatalf("a booking without a run keeps job %+v, %v; want none", b.Job, err)
	}
}
