package lease_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

func TestPickEnvTakesOnlyTheCarriedVariables(t *testing.T) {
	got := lease.PickEnv([]string{"PATH=/v/bin:/usr/bin", "VIRTUAL_ENV=/v", "WANDB_API_KEY=secret", "SSH_AUTH_SOCK=/tmp/x",
		"CUDA_VISIBLE_DEVICES=3", "CONDA_PREFIX=", "TERM=xterm", "noequals"})
	if len(got) != 2 || got["PATH"] != "/v/bin:/usr/bin" || got["VIRTUAL_ENV"] != "/v" {
		t.Errorf("PickEnv = %v, want PATH and VIRTUAL_ENV only", got)
	}
	if lease.PickEnv([]string{"HOME=/root"}) != nil {
		t.Error("PickEnv of nothing carried is not nil")
	}
}

func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" means accepted
	}{
		{"none", nil, ""},
		{"a venv", map[string]string{"PATH": "/v/bin:/bin", "VIRTUAL_ENV": "/v"}, ""},
		{"a name outside the list", map[string]string{"LD_PRELOAD": "/x.so"}, `environment variable "LD_PRELOAD" does not travel with a run`},
		{"a lowercase twin", map[string]string{"path": "/x"}, "does not travel"},
		{"a newline", map[string]string{"PATH": "/bin\nX=1"}, "NUL, a newline or invalid UTF-8"},
		{"a NUL", map[string]string{"PATH": "/bin\x00"}, "NUL"},
		{"invalid UTF-8", map[string]string{"PATH": "/\xff"}, "invalid UTF-8"},
		{"an escape sequence", map[string]string{"VIRTUAL_ENV": "/v\x1b]0;pwned\x07"}, "environment variable VIRTUAL_ENV holds"},
		{"a bidi control", map[string]string{"PATH": "/bin:/\u202etmp"}, "environment variable PATH holds"},
		{"too long", map[string]string{"PATH": strings.Repeat("/x", 5000)}, "at most 8192 travel with a run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lease.CheckEnv(tc.env)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckEnv = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// A job is held to what one request between agents can carry (the origin
// hands it to the scheduler, which hands it to the placed nodes), counted
// as sent: a command of control characters takes six bytes a byte.
func TestJobCheckBoundsTheJobAsSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  lease.Job
		want string // "" means accepted
	}{
		{"a plain 60 KB command", lease.Job{Command: []string{"echo", strings.Repeat("x", 60<<10)}}, ""},
		{"60 KB of quotes", lease.Job{Command: []string{"echo", strings.Repeat(`"`, 60<<10)}}, ""},
		{"30 KB of control characters", lease.Job{Command: []string{"echo", strings.Repeat("\x01", 30<<10)}}, "as the agents send them"},
		{"a kept copy with its command", lease.Job{Kept: true, Command: []string{"x"}}, "marked kept"},
		{"a kept copy", lease.Job{Kept: true, Name: "train"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.job.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// What travels and shows of a job to others: its public part only.
func TestJobPublicAndShownTo(t *testing.T) {
	j := &lease.Job{Command: []string{"train.py", "--key=sk-1"}, Dir: "/srv/p", Name: "t", Torchrun: true, Env: map[string]string{"PATH": "/v"}}
	e := queue.QueueEntry{User: "mallory", Job: j}
	for _, tc := range []struct {
		who  lease.Caller
		full bool
	}{
		{lease.Caller{User: "mallory", UID: 7}, true},
		{lease.Caller{User: "carol", UID: 8}, false},
		{lease.Caller{User: "root", Admin: true}, true},
		{lease.Caller{UID: 9}, false},
	} {
		got := e.ShownTo(tc.who).Job
		if full := len(got.Command) > 0; full != tc.full || !got.RunsCommand() || got.Name != "t" || !got.Torchrun {
			t.Errorf("%s sees %+v; want whole %v, and always its name, torchrun and that it runs a command", tc.who, got, tc.full)
		}
		if !tc.full && (got.Dir != "" || got.Env != nil || !got.Kept) {
			t.Errorf("%s sees %+v; want no directory or environment", tc.who, got)
		}
	}
	if p := e.Published(); p.Job == j || len(j.Command) == 0 {
		t.Error("Published changed the entry's own job")
	}
	if (queue.QueueEntry{}).Published().Job != nil {
		t.Error("a queued claim grew a job")
	}
}

func TestArrayTaskOf(t *testing.T) {
	for _, tc := range []struct {
		id, arr string
		idx     int
		ok      bool
	}{
		{"node01-q7/5", "node01-q7", 5, true},
		{"node01-q7/0", "node01-q7", 0, true},
		{"node01-q7", "", 0, false},
		{"node01-q7/", "", 0, false},
		{"node01-q7/05", "", 0, false},
		{"node01-q7/-1", "", 0, false},
		{"/3", "", 0, false},
	} {
		arr, idx, ok := lease.ArrayTaskOf(tc.id)
		if arr != tc.arr || idx != tc.idx || ok != tc.ok {
			t.Errorf("ArrayTaskOf(%q) = %q, %d, %v; want %q, %d, %v", tc.id, arr, idx, ok, tc.arr, tc.idx, tc.ok)
		}
	}
	if o, ok := queue.OriginOfQueueID("node01-q7/5"); !ok || o != "node01" {
		t.Errorf("OriginOfQueueID of a task = %q, %v; want node01", o, ok)
	}
}
