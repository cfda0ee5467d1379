package job_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/queue"
)

func TestPickEnvTakesOnlyTheCarriedVariables(t *testing.T) {
	got := job.PickEnv([]string{"PATH=/v/bin:/usr/bin", "VIRTUAL_ENV=/v", "WANDB_API_KEY=secret", "SSH_AUTH_SOCK=/tmp/x",
		"CUDA_VISIBLE_DEVICES=3", "CONDA_PREFIX=", "TERM=xterm", "noequals"})
	if len(got) != 2 || got["PATH"] != "/v/bin:/usr/bin" || got["VIRTUAL_ENV"] != "/v" {
		t.Errorf("PickEnv = %v, want PATH and VIRTUAL_ENV only", got)
	}
	if job.PickEnv([]string{"HOME=/root"}) != nil {
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
			err := job.CheckEnv(tc.env)
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
		job  job.Job
		want string // "" means accepted
	}{
		{"a plain 60 KB command", job.Job{Command: []string{"echo", strings.Repeat("x", 60<<10)}}, ""},
		{"60 KB of quotes", job.Job{Command: []string{"echo", strings.Repeat(`"`, 60<<10)}}, ""},
		{"30 KB of control characters", job.Job{Command: []string{"echo", strings.Repeat("\x01", 30<<10)}}, "as the agents send them"},
		{"a kept copy with its command", job.Job{Kept: true, Command: []string{"x"}}, "marked kept"},
		{"a kept copy", job.Job{Kept: true, Name: "train"}, ""},
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
		arr, idx, ok := job.ArrayTaskOf(tc.id)
		if arr != tc.arr || idx != tc.idx || ok != tc.ok {
			t.Errorf("ArrayTaskOf(%q) = %q, %d, %v; want %q, %d, %v", tc.id, arr, idx, ok, tc.arr, tc.idx, tc.ok)
		}
	}
	if o, ok := queue.OriginOfQueueID("node01-q7/5"); !ok || o != "node01" {
		t.Errorf("OriginOfQueueID of a task = %q, %v; want node01", o, ok)
	}
}
